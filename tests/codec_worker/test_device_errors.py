"""Which accelerator errors end the device and which cost only a capture: the engine's fast path
and the codec fall back to eager work on the second kind and stop on the first."""

from __future__ import annotations

import pytest
import torch

from codec_worker.device_errors import capture_refused, device_lost, error_summary

# what PyTorch raises when a captured op syncs with the host (cudaErrorStreamCaptureUnsupported)
REFUSED = "CUDA error: operation not permitted when stream is capturing\nCUDA kernel errors might be asynchronously reported"
LOST = "CUDA error: an illegal memory access was encountered"


@pytest.mark.parametrize("message, refused, lost", [
    (REFUSED, True, False),
    ("CUDA error: operation failed due to a previous error during capture", True, False),
    ("CUDA error: operation would result in a merge of separate capture sequences", True, False),
    ("CUDA error: capturing stream has unjoined work", True, False),
    ("CUDA error: dependency created on uncaptured work in another stream", True, False),
    ("Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor is pinned", True, False),
    (LOST, False, True),
    ("CUDA error: device-side assert triggered", False, True),
    ("CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx`", False, True),
    ("shape mismatch", False, False),
])
def test_a_refused_capture_is_not_a_lost_device(message, refused, lost):
    # what PyTorch raises: an AcceleratorError for a CUDA error, a RuntimeError for its own checks
    exc = torch.AcceleratorError(message) if message.startswith("CUDA error") else RuntimeError(message)
    assert (capture_refused(exc), device_lost(exc)) == (refused, lost)


@pytest.mark.parametrize("driver_text, lost", [
    ("an illegal memory access was encountered", True),
    ("unspecified launch failure", True),
    ("misaligned address", True),
    ("an illegal instruction was encountered", True),
    ("the launch timed out and was terminated", True),
    ("uncorrectable ECC error encountered", True),
    ("out of memory", False),
    ("too many resources requested for launch", False),
    ("operation not permitted when stream is capturing", False),
])
def test_a_triton_launch_error_counts_by_what_the_driver_said(driver_text, lost):
    # Triton's launcher raises a plain RuntimeError, "Triton Error [CUDA]: " + cuGetErrorString's text
    exc = RuntimeError("Triton Error [CUDA]: " + driver_text)
    assert device_lost(exc) is lost


def test_running_out_of_memory_is_not_a_lost_device():
    assert not device_lost(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))


def test_other_exceptions_lose_nothing():
    # a Python error with the words in it is still not CUDA's: only runtime errors are read
    assert not device_lost(ValueError("CUDA error: an illegal memory access was encountered"))
    assert not capture_refused(ValueError("operation not permitted when stream is capturing"))


@pytest.mark.parametrize("exc, said", [
    (torch.AcceleratorError(REFUSED), "AcceleratorError: CUDA error: operation not permitted when stream is capturing"),
    (RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore detail"),
     "RuntimeError: InvalidCxxCompiler: No working C++ compiler found"),
    (RuntimeError(), "RuntimeError"),
    (KeyError("slot"), "KeyError: 'slot'"),
])
def test_an_error_is_summarised_as_its_type_and_first_line(exc, said):
    assert error_summary(exc) == said
