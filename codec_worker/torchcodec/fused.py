"""The decoder's snake activations as one Triton kernel each (``GEPARD_CODEC_FUSED_ACTIVATIONS``).

Eager, a half-snake activation is ten kernels (a copy, alpha * x, sin, the square, alpha + eps, its
reciprocal, the product, the sum, then a copy and the leaky ReLU of the other half), each streaming
the tensor through memory, and a decode applies 96 of them: 960 of the 1,217 kernels a full-size
decode launches (counted on CPU with a dispatch counter), 353 once fused. On a GPU a short decode
is bound by those launches (replayed as a CUDA graph they still run one after another), a long one
by their memory traffic. Here one kernel reads each value once, computes in float32 and writes it
once.

    snake_then_leaky(x, alpha, split)   x [B, C, T]: snake on channels < split, leaky ReLU on the rest

The kernel runs where Triton runs: CUDA. Under Triton's interpreter (``TRITON_INTERPRET=1`` set
before this module is imported) it runs on CPU tensors too, slowly: that is how the CPU tests check
its arithmetic against the eager activations.
"""

from __future__ import annotations

import contextlib

import torch

from codec_worker.torchcodec.layers import LEAKY_RELU_SLOPE, SNAKE_EPS
from codec_worker.triton_support import interpreted, tl, triton, unavailable_reason

BLOCK = 1024  # values per program, over the flattened [B, C, T]

if triton is not None:

    # sizes are not specialised (Triton would compile a variant per divisibility of each): one
    # compiled kernel per dtype, made before any CUDA graph capture by the codec's probe
    @triton.jit(do_not_specialize=["numel", "channels", "split", "length"])
    def _snake_then_leaky(x_ptr, alpha_ptr, out_ptr, numel, channels, split, length, eps, slope,
                          BLOCK: tl.constexpr):
        # flat, not a program per (batch, channel) row: the first stages' rows are a few frames
        # long, and a row-sized block would leave most of its lanes idle
        offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # B * C * T passes 2^31
        inside = offsets < numel
        channel = (offsets // length) % channels
        snaking = inside & (channel < split)
        x = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
        alpha = tl.load(alpha_ptr + channel, mask=snaking, other=1.0).to(tl.float32)
        wave = tl.sin(alpha * x)
        y = tl.where(channel < split, x + wave * wave / (alpha + eps), tl.where(x >= 0, x, x * slope))
        tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=inside)


def snake_then_leaky(x: torch.Tensor, alpha: torch.Tensor, split: int) -> torch.Tensor:
    """x [B, C, T] -> snake (x + sin(alpha x)^2 / (alpha + eps), alpha [1, split, 1]) on channels
    < ``split`` and leaky ReLU on the rest, as one kernel; the output is contiguous, x's dtype."""
    reason = unavailable_reason(x.device)
    if reason:
        raise RuntimeError(f"the fused activation cannot run here: {reason}")
    if x.dim() != 3 or alpha.numel() != split or not 0 <= split <= x.shape[1]:
        raise ValueError(f"expected x [B, C, T] and {split} alphas for split {split}, got {tuple(x.shape)} "
                         f"and {alpha.numel()}")
    x = x.contiguous()
    out = torch.empty_like(x)
    _, channels, length = x.shape
    numel = out.numel()
    if numel:
        # Triton launches on the calling thread's current device, not the tensors': the codec's
        # worker thread on cuda:1 would otherwise launch on cuda:0
        with torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext():
            _snake_then_leaky[(triton.cdiv(numel, BLOCK),)](x, alpha.contiguous(), out, numel, channels, split, length,
                                                            SNAKE_EPS, LEAKY_RELU_SLOPE, BLOCK=BLOCK)
    return out


__all__ = ["BLOCK", "interpreted", "snake_then_leaky", "unavailable_reason"]
