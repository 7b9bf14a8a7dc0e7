"""Whether Triton kernels can run here: shared by the codec's fused activations
(codec_worker.torchcodec.fused) and the engine's fused kernels (engine.backends.fused_ops).

``triton`` and ``tl`` are None on an install without Triton (CPU wheels of PyTorch do not need
it); the kernel modules then define no kernels and say why through ``unavailable_reason``.
Triton compiles for CUDA. Its interpreter (``TRITON_INTERPRET=1``, read when a kernel is defined)
runs the same kernels on CPU tensors, slowly: that is how the CPU tests check their arithmetic.
"""

from __future__ import annotations

import contextlib
import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError as exc:
    triton = tl = None
    _MISSING = f"{type(exc).__name__}: {exc}"
else:
    _MISSING = ""

# Multiply-adds contracted into FMAs (one rounding instead of two), as Triton has defaulted to so
# far and as PyTorch's own CUDA kernels are built (nvcc contracts by default). Triton 3.9 warns
# that 3.10 turns its default off; every launch names the setting, so the kernels round alike on
# the GPU image's Triton 3.6 and on any later one. A kernel that must round as the eager ops do,
# one op at a time (the engine's sampling), launches with it off.
FP_FUSION = True


def interpreted() -> bool:
    """Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET=1``): on CPU tensors too."""
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")


def unavailable_reason(device: torch.device) -> str:
    """Why Triton kernels cannot run on ``device`` ("" when they can)."""
    if triton is None:
        return f"Triton does not import ({_MISSING})"
    if device.type != "cuda" and not interpreted():
        return f"Triton compiles for CUDA, not {device.type}"
    return ""


def launch_context(x: torch.Tensor, what: str) -> contextlib.AbstractContextManager:
    """The context to launch a kernel on ``x``'s device in: Triton launches on the calling thread's
    current CUDA device, not the tensors' (a worker thread with tensors on cuda:1 would launch on
    cuda:0). RuntimeError ("the {what} cannot run here: ...") where Triton cannot run on it."""
    reason = unavailable_reason(x.device)
    if reason:
        raise RuntimeError(f"the {what} cannot run here: {reason}")
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


__all__ = ["FP_FUSION", "interpreted", "launch_context", "tl", "triton", "unavailable_reason"]
