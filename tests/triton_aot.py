"""A Triton kernel compiled for the H200 of the GPU sessions (sm_90) on a machine with no GPU.

Triton's own ptxas checks what its interpreter, which runs the kernels in the CPU tests, does not:
the argument types, the int64 offsets, the casts of the loads and stores.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from codec_worker.triton_support import FP_FUSION


def assert_compiles_for_h200(module: ModuleType, name: str, signature: dict[str, str], constexprs: dict,
                             fp_fusion: bool = FP_FUSION) -> None:
    """``module.<name>`` (a @triton.jit kernel) compiles for sm_90 with ``signature`` (every
    argument, in order: "*bf16", "i32", "constexpr", ...) and ``constexprs``, multiply-adds
    contracted or not as its launch says (``fp_fusion``); skipped without Triton."""
    pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile as compile_kernel

    assert not module.interpreted()  # the module's real kernels, not the interpreter's
    kernel = getattr(module, name)
    assert list(signature) == kernel.arg_names
    compiled = compile_kernel(ASTSource(fn=kernel, signature=signature, constexprs=constexprs),
                              target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": fp_fusion})
    assert compiled.asm["cubin"] and ".target sm_90" in compiled.asm["ptx"]
