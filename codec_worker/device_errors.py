"""What an accelerator's errors mean: shared by the engine (engine.backends) and the codec
(codec_worker.nanocodec, codec_worker.torchcodec), which fall back to slower work where a capture,
a compile or a fused kernel fails, but must not where the device itself is gone.

CUDA reports both kinds as "CUDA error: ...": a refused graph capture ends that capture only, and
the same work runs eagerly; a lost device (an illegal memory access, a device-side assert) leaves
a context no later kernel can use, so falling back would only move the failure to the first
request. The codec lives below the engine (the engine imports codec_worker.triton_support), hence
this module's place.
"""

from __future__ import annotations

import torch

_DEVICE_LOST_MARKERS = ("CUDA error", "CUBLAS_STATUS", "CUDNN_STATUS", "device-side assert", "HIP error",
                        "illegal memory access", "NCCL error")
# The CUDA driver's texts (cuGetErrorString) for its sticky errors, the ones that leave the context
# unusable. Triton's launcher reports every driver error as "Triton Error [CUDA]: <that text>", so its
# prefix alone says nothing: its "out of memory" or "too many resources requested for launch" leave the
# device as it was, and the fused kernel that raised it can fall back like any other failed kernel.
_STICKY_DRIVER_ERRORS = ("an illegal memory access was encountered", "device-side assert triggered",
                         "unspecified launch failure", "misaligned address", "an illegal instruction was encountered",
                         "invalid program counter", "hardware stack error",
                         "operation not supported on global/shared address space",
                         "the launch timed out and was terminated", "uncorrectable ECC error encountered",
                         "context is destroyed")
# What a refused CUDA graph capture says: the stream-capture errors 900-908 of the CUDA runtime
# ("operation not permitted when stream is capturing", "operation failed due to a previous error
# during capture", "... separate capture sequences", "capture was not ended in the same stream as
# it began", "capturing stream has unjoined work", "dependency created on uncaptured work in another
# stream", ...) and PyTorch's own checks ("... during CUDA graph capture").
_CAPTURE_REFUSED_MARKERS = ("capturing", "during capture", "capture sequence", "capture was not", "uncaptured work",
                            "CUDA graph capture")


def capture_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is a CUDA graph capture that failed on something the captured work did (a
    host sync, a pageable copy, ...). Such an error ends that capture only: the device and every
    other stream stay usable, and the same work runs eagerly."""
    return isinstance(exc, RuntimeError) and any(marker in str(exc) for marker in _CAPTURE_REFUSED_MARKERS)


def device_lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the accelerator (its context) is unusable: no request can run any more.

    Out-of-memory is not in this class (it frees with the failed requests), nor is a refused CUDA
    graph capture (``capture_refused``), although CUDA reports it as a "CUDA error". A Triton launch
    that fails counts by what the driver said (``_STICKY_DRIVER_ERRORS``), not by its prefix.
    """
    if isinstance(exc, torch.cuda.OutOfMemoryError) or capture_refused(exc):
        return False
    accelerator_error = getattr(torch, "AcceleratorError", None)
    if accelerator_error is not None and isinstance(exc, accelerator_error):
        return True
    message = str(exc)
    return isinstance(exc, RuntimeError) and (any(marker in message for marker in _DEVICE_LOST_MARKERS)
                                              or any(text in message for text in _STICKY_DRIVER_ERRORS))


def error_summary(exc: BaseException) -> str:
    """``exc`` for a log line: its type and the first line of its message (CUDA, Triton and
    Inductor errors run to pages; the first line says what failed)."""
    message = str(exc)
    return f"{type(exc).__name__}: {message.splitlines()[0]}" if message.strip() else type(exc).__name__


__all__ = ["capture_refused", "device_lost", "error_summary"]
