"""Device and dtype choice: bf16 on an NVIDIA GPU that computes in it, float32 elsewhere (bf16
kernels crash some CPUs, and GPUs before Ampere only emulate bf16)."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Callable

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


@dataclass(frozen=True)
class GpuModel:
    name: str  # "NVIDIA H200", "Tesla T4", ...
    capability: tuple[int, int]  # CUDA compute capability: (9, 0), (7, 5), ...


def torch_gpu_model(index: int) -> GpuModel:
    """The GPU at ``index`` as PyTorch reports it. This initialises CUDA in the process: right where
    the model loads onto the GPU here next, not before vLLM starts its engine process (which then
    could no longer fork; the vLLM backend asks vLLM's platform instead)."""
    props = torch.cuda.get_device_properties(index)
    return GpuModel(props.name, (props.major, props.minor))


def pick_dtype(device: torch.device, requested: str | None = None,
               gpu_model: Callable[[int], GpuModel] = torch_gpu_model) -> torch.dtype:
    """GEPARD_DTYPE's dtype; auto: bf16 on a GPU of compute capability 8.0 or later (Ampere, Hopper,
    ...), the dtype the model was trained and published in; float32 on older GPUs (``gpu_model``
    says which GPU ``device`` is) and on CPU."""
    if requested and requested != "auto":
        try:
            return _DTYPES[requested]
        except KeyError:
            raise ValueError(f"unknown dtype {requested!r}; choose one of {sorted(_DTYPES)}") from None
    if device.type != "cuda":
        return torch.float32
    return _auto_cuda_dtype(device.index if device.index is not None else 0, gpu_model)


@functools.cache  # once per GPU: the engine and the codec both ask
def _auto_cuda_dtype(index: int, gpu_model: Callable[[int], GpuModel]) -> torch.dtype:
    """A GPU before compute capability 8.0 (a T4, a V100) has no bf16 arithmetic: PyTorch emulates
    it slowly where it can, Triton and vLLM refuse it. float16 would run fast there but not safely:
    its range ends at 65,504 where bf16's is float32's, and the model was never checked in it (the
    codec's snake activation already gives NaN in fp16 for its smallest alphas). So float32: twice
    the weight traffic of bf16, and exact."""
    gpu = gpu_model(index)
    if gpu.capability >= (8, 0):
        return torch.bfloat16
    logger.warning("GEPARD_DTYPE=auto: %s (cuda:%d) has compute capability %d.%d, below the 8.0 that computes in "
                   "bfloat16; running in float32 (GEPARD_DTYPE chooses another)", gpu.name, index, *gpu.capability)
    return torch.float32
