"""Every Triton kernel launch names its multiply-add contraction (``enable_fp_fusion``).

Triton 3.9 warns that 3.10 turns its default off: a launch that leaves it to the default would
round differently on the GPU image's Triton 3.6 than on a later one, with no test noticing (the
CPU tests run the kernels in the interpreter, which ignores the setting). Checked on the source:
a launch is a call of a subscripted kernel, ``_kernel[grid](...)``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNEL_MODULES = ("engine/backends/fused_ops.py", "codec_worker/torchcodec/fused.py")


def launches(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
            and isinstance(node.func.value, ast.Name) and node.func.value.id.startswith("_")]


@pytest.mark.parametrize("module", KERNEL_MODULES)
def test_every_launch_names_its_fp_fusion(module: str) -> None:
    found = launches(ROOT / module)
    assert found, f"no kernel launch found in {module}: the check would pass on nothing"
    unnamed = [f"{module}:{call.lineno} {call.func.value.id}" for call in found  # type: ignore[attr-defined]
               if not any(keyword.arg == "enable_fp_fusion" for keyword in call.keywords)]
    assert not unnamed, "launches leaving fp fusion to Triton's default:\n" + "\n".join(unnamed)
