"""Device code run on a stand-in for a GPU, on a machine that has none.

PyTorch's ``meta`` device holds tensors with shape, dtype and device but no data, and runs every
op's shape function. Used as the device a model is loaded onto, it applies the rules a GPU run
would: an operand left on the host fails ("not on the expected device"), and so does an op whose
output shape depends on the data (``.item()``, ``nonzero``, boolean-mask indexing) or that
reads the data back. ``capture_check`` adds the rules of CUDA graph capture, which a captured
step must follow:

- no op may wait for the device or need its data on the host;
- no op may read or make a host tensor (Python scalars excepted) or copy between host and
  device: a graph replays device kernels only, so host work would keep its capture-time value;
- the floating operands of a matrix product or attention share one dtype (CUDA kernels refuse
  a mix; the meta shape functions do not check it).

What it cannot show: values (frames, audio), speed, and the CUDA runtime itself (streams,
events, pinned memory, capture and replay). bench/gpu_session.sh checks those on a GPU.

(A fake *CUDA* device, PyTorch's FakeTensorMode, would be closer, but a CPU build of PyTorch
refuses indexing and ``.to`` on it before any mode sees the call.)
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

GPU = torch.device("meta")

# ops that make the host wait for the device, or whose output shape the host must read first
SYNCING = frozenset({"aten::_local_scalar_dense", "aten::nonzero", "aten::nonzero_static", "aten::masked_select",
                     "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive", "aten::equal",
                     "aten::is_nonzero", "aten::_assert_async", "aten::repeat_interleave"})
# ops whose CUDA kernels need their floating operands in one dtype
ONE_DTYPE = frozenset({"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                       "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_efficient_attention",
                       "aten::_scaled_dot_product_flash_attention", "aten::embedding", "aten::conv1d",
                       "aten::convolution", "aten::conv_transpose1d"})
INDEXING = frozenset({"aten::index", "aten::index_put_", "aten::index_put", "aten::_index_put_impl_"})


class CaptureUnsafe(AssertionError):
    """An op that CUDA graph capture would refuse, or would freeze at its capture-time value."""


@dataclass
class _CaptureGuard(TorchDispatchMode):
    ops: list[tuple[str, tuple[torch.dtype, ...]]] = field(default_factory=list)  # (op, its floating inputs' dtypes)

    def __post_init__(self) -> None:
        super().__init__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        self.ops.append((name, tuple(t.dtype for t in tensors if t.is_floating_point())))
        if name in SYNCING:
            raise CaptureUnsafe(f"{name} waits for the device (or needs its data on the host) inside the captured step")
        if name in INDEXING and any(t.dtype == torch.bool for t in tree_flatten(args[1])[0] if isinstance(t, torch.Tensor)):
            raise CaptureUnsafe(f"{name} with a boolean mask has a data-dependent shape (it runs nonzero)")
        for t in tensors:
            if t.device != GPU and t.dim() > 0:
                raise CaptureUnsafe(f"{name} reads a host tensor {tuple(t.shape)} {t.dtype} inside the captured step: "
                                    "a graph replays device work only")
        if name in ("aten::_to_copy", "aten::copy_") and any(t.device != GPU for t in tensors):
            raise CaptureUnsafe(f"{name} copies between host and device inside the captured step")
        check_one_dtype(name, tensors)
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device != GPU:
                raise CaptureUnsafe(f"{name} makes a host tensor inside the captured step")
        return out


def check_one_dtype(name: str, tensors: list[torch.Tensor]) -> None:
    if name in ONE_DTYPE:
        dtypes = {t.dtype for t in tensors if t.is_floating_point()}
        if len(dtypes) > 1:
            raise CaptureUnsafe(f"{name} mixes {sorted(str(d) for d in dtypes)}: a CUDA kernel needs one dtype")


@dataclass
class _DtypeGuard(TorchDispatchMode):
    """The one-dtype rule alone (for code that is not captured, e.g. a prefill or a codec)."""

    def __post_init__(self) -> None:
        super().__init__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        check_one_dtype(func._schema.name, [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)])
        return func(*args, **kwargs)


@contextlib.contextmanager
def capture_check() -> Iterator[list[tuple[str, tuple[torch.dtype, ...]]]]:
    """Fail on anything CUDA graph capture would refuse or freeze; yields the ops that ran, each
    with the dtypes of its floating inputs."""
    guard = _CaptureGuard()
    with torch.no_grad(), guard:
        yield guard.ops


@contextlib.contextmanager
def dtype_check() -> Iterator[None]:
    with torch.no_grad(), _DtypeGuard():
        yield


def load_gepard(model_dir, dtype: torch.dtype):
    """GepardModel.from_pretrained onto the stand-in device: the checkpoint's exact names,
    shapes and dtypes, no data."""
    from engine.model.gepard import GepardModel

    return GepardModel.from_pretrained(model_dir, device=GPU, dtype=dtype)


def full_size_gepard(dtype: torch.dtype, config_dir):
    """The published 556M model on the stand-in device, built from its tensor names and shapes
    alone (no checkpoint file: on this device weights have no data anyway)."""
    from engine.checkpoint import expected_shapes
    from engine.model.gepard import GepardModel
    from engine.tiny import SIZES, write_configs

    cfg = write_configs(config_dir, SIZES["full"], 400, SIZES["full"].vocab)
    with torch.device("meta"):
        model = GepardModel(cfg)
    model.load_checkpoint({name: torch.empty(shape, device=GPU) for name, shape in expected_shapes(cfg).items()},
                          device=GPU, dtype=dtype)
    return model.eval()


__all__ = ["GPU", "CaptureUnsafe", "capture_check", "dtype_check", "full_size_gepard", "load_gepard"]
