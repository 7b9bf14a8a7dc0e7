"""Device and dtype choice: bf16 on an NVIDIA GPU that computes in it, float32 elsewhere (bf16
kernels crash some CPUs, and GPUs before Ampere only emulate bf16)."""

from __future__ import annotations

import functools
import logging

import torch

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


def pick_device(requested: str | None = None) -> torch.device:
    if requested and requested != "auto":
        return torch.device(requested)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> "bfloat16" (the name GEPARD_DTYPE takes)."""
    return str(dtype).removeprefix("torch.")


def pick_dtype(device: torch.device, requested: str | None = None) -> torch.dtype:
    """GEPARD_DTYPE's dtype; auto: bf16 on a GPU of compute capability 8.0 or later (Ampere, Hopper,
    ...), the dtype the model was trained and published in; float32 on older GPUs and on CPU."""
    if requested and requested != "auto":
        try:
            return _DTYPES[requested]
        except KeyError:
            raise ValueError(f"unknown dtype {requested!r}; choose one of {sorted(_DTYPES)}") from None
    if device.type != "cuda":
        return torch.float32
    return _auto_cuda_dtype(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache  # once per GPU: the engine and the codec both ask
def _auto_cuda_dtype(index: int) -> torch.dtype:
    """A GPU before compute capability 8.0 (a T4, a V100) has no bf16 arithmetic: PyTorch emulates
    it slowly where it can, Triton and vLLM refuse it. float16 would run fast there but not safely:
    its range ends at 65,504 where bf16's is float32's, and the model was never checked in it (the
    codec's snake activation already gives NaN in fp16 for its smallest alphas). So float32: twice
    the weight traffic of bf16, and exact."""
    props = torch.cuda.get_device_properties(index)
    if props.major >= 8:
        return torch.bfloat16
    logger.warning("GEPARD_DTYPE=auto: %s (cuda:%d) has compute capability %d.%d, below the 8.0 that computes in "
                   "bfloat16; running in float32 (GEPARD_DTYPE chooses another)", props.name, index,
                   props.major, props.minor)
    return torch.float32
