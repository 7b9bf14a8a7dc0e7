"""Dependencies point down: engine, codec_worker and voices never import the HTTP layer.

Checked on the source (imports at any depth of the module body), so a lazy import inside a
function counts too. engine may use codec_worker's pure FSQ maths (``codec_worker.fsq``), its random
checkpoint writer, whether Triton runs (``codec_worker.triton_support``, shared by both packages'
fused kernels) and what an accelerator error means (``codec_worker.device_errors``, shared by both
packages' fallbacks) only.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "engine": ("api", "starlette", "voices", "uvicorn", "pydantic"),
    "codec_worker": ("api", "starlette", "engine", "voices", "uvicorn"),
    "voices": ("api", "starlette", "uvicorn", "engine"),
}
ALLOWED = {"engine": ("codec_worker.device_errors", "codec_worker.fsq", "codec_worker.tiny",
                      "codec_worker.triton_support")}


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_import_upper_layers(package):
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in imports_of(path):
            top = name.split(".")[0]
            if top in FORBIDDEN[package] and not name.startswith(ALLOWED.get(package, ())):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offenders, "\n".join(offenders)


def test_engine_touches_codec_worker_only_through_its_shared_modules():
    for path in sorted((ROOT / "engine").rglob("*.py")):
        for name in imports_of(path):
            if name.startswith("codec_worker"):
                assert name in ALLOWED["engine"], f"{path.relative_to(ROOT)} imports {name}"
