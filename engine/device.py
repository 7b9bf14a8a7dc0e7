"""Device and dtype choice: bf16 on an NVIDIA GPU, float32 on CPU (bf16 kernels crash some CPUs)."""

from __future__ import annotations

import torch

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
    if requested and requested != "auto":
        try:
            return _DTYPES[requested]
        except KeyError:
            raise ValueError(f"unknown dtype {requested!r}; choose one of {sorted(_DTYPES)}") from None
    return torch.bfloat16 if device.type == "cuda" else torch.float32
