"""The decoder's Triton kernels (``GEPARD_CODEC_FUSED_ACTIVATIONS``): its snake activations, each
adding the sum it reads and written into the padded input of the conv it feeds, and the carried
conv state's reads and records.

Eager, a half-snake activation is ten kernels (a copy, alpha * x, sin, the square, alpha + eps, its
reciprocal, the product, the sum, then a copy and the leaky ReLU of the other half), each streaming
the tensor through memory, and a decode applies 96 of them. On a GPU a short decode is bound by
its launches (replayed as a CUDA graph they still run one after another), a long one partly by
their memory traffic. Here one kernel reads each value once, computes in float32 and writes it once.

    snake_then_leaky(x, alpha, split, pad)   x [B, C, T]: snake on channels < split, leaky ReLU on
                                             the rest, written behind ``pad`` zeros: a causal conv's
                                             padded input in one kernel instead of two; x may be a
                                             PendingSum, which it adds first
    extend_with_tail(store, ...)             a causal conv's input with each row's remembered tail in
                                             front (optionally activated as above), and the tail to
                                             remember next (torchcodec.state)

Every activation of the decoder feeds a causal conv, which pads its input with zeros on the left
(or, carrying state, puts the stream's last inputs there). Done apart, the pad is one more kernel
and one more pass over the activation's output; here the activation writes straight into the
conv's input, one kernel for both. And every activation reads a sum (layers.PendingSum): a residual unit's
``x + y``, or the mean of the residual chains. The kernel adds its terms as it reads them, in
float32 in the eager ops' order, rounded once to the tensors' dtype (one pair: the eager add's
bits), and writes the sum out as well where it is read again (a unit's input is its residual):
no add kernels, and no pass over memory to write a sum that only the activation reads. x, or a
sum's first term, may be strided (an up-sample's cut output), so it is not copied first either.

Carrying conv state (``GEPARD_CODEC_CARRY_STATE``), a conv's input is its stream's last samples
followed by the new ones, and the new last samples are recorded: eagerly five kernels a conv (the
rows' tails gathered, the concatenation, the record's index, its gather, the write back), where a
windowed decode pads with one. Here it is one kernel a conv, which applies the activation before
the conv too, and one copy of every record per decode (ConvStateCache keeps all the tails in one
tensor). What one decode of one stream launches (``bench/kernel_count.py``, the full-size codec,
counted on CPU; the count does not depend on the size):

    decode            eager    with these kernels
    windowed          1,226    211 (96 of them activations; one pad left, the first conv's)
    carrying state    1,629    216 (97 of them the state's, activations included)

so a decode is its 97 convs and one kernel before each, and a stateful one launches about what a
windowed one does (a few set-up ops more), and decodes 25 frames of context fewer per chunk.

The kernels run where Triton runs: CUDA. Under Triton's interpreter (``TRITON_INTERPRET=1`` set
before this module is imported) they run on CPU tensors too, slowly: that is how the CPU tests
check their arithmetic against the eager ops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from codec_worker.torchcodec.layers import LEAKY_RELU_SLOPE, SNAKE_EPS, Input, PendingSum, value_of
from codec_worker.triton_support import FP_FUSION, interpreted, launch_context, tl, triton, unavailable_reason

BLOCK = 1024  # values per program, over the flattened [B, C, T]
MAX_PAIRS = 3  # of a PendingSum the kernels add (NanoCodec's mean has 3, one per kernel size); more are added eagerly

if triton is not None:

    @triton.jit
    def _activate(x, alpha, snaking, eps, slope):
        # x, alpha float32: snake where ``snaking``, leaky ReLU elsewhere. The one expression both
        # kernels compute, so a value a conv reads and the same value recorded for the stream's next
        # chunk are the same bits
        wave = tl.sin(alpha * x)
        return tl.where(snaking, x + wave * wave / (alpha + eps), tl.where(x >= 0, x, x * slope))

    @triton.jit
    def _layer_input(x_ptr, x_at, b0_ptr, a1_ptr, b1_ptr, a2_ptr, b2_ptr, at, mask, divisor,
                     PAIRS: tl.constexpr, MEAN: tl.constexpr):
        # an activation's input at these lanes, in x's dtype: x (at x_at) when PAIRS is 0, else the
        # pending sum ((x + b0) + (a1 + b1) + (a2 + b2)) / divisor of PAIRS pairs (x its first term,
        # at x_at; the others contiguous, at ``at``): added in float32 in the eager ops' order and
        # rounded once, so one pair's sum is the bits of the eager add (the lanes masked off are 0)
        value = tl.load(x_ptr + x_at, mask=mask, other=0.0)
        if PAIRS > 0:
            total = value.to(tl.float32) + tl.load(b0_ptr + at, mask=mask, other=0.0).to(tl.float32)
            if PAIRS > 1:
                total = total + (tl.load(a1_ptr + at, mask=mask, other=0.0).to(tl.float32) +
                                 tl.load(b1_ptr + at, mask=mask, other=0.0).to(tl.float32))
            if PAIRS > 2:
                total = total + (tl.load(a2_ptr + at, mask=mask, other=0.0).to(tl.float32) +
                                 tl.load(b2_ptr + at, mask=mask, other=0.0).to(tl.float32))
            if MEAN:
                total = total / divisor
            value = total.to(value.dtype)
        return value

    # sizes are not specialised (Triton would compile a variant per divisibility of each): one
    # compiled kernel per dtype and form of input, made before any CUDA graph capture by the
    # codec's probe
    @triton.jit(do_not_specialize=["x_batch", "x_channel", "numel", "channels", "split", "length", "pad"])
    def _snake_then_leaky(x_ptr, x_batch, x_channel, b0_ptr, a1_ptr, b1_ptr, a2_ptr, b2_ptr, divisor, total_ptr,
                          alpha_ptr, out_ptr, numel, channels, split, length, pad, eps, slope,
                          BLOCK: tl.constexpr, PAIRS: tl.constexpr, MEAN: tl.constexpr, KEEP: tl.constexpr):
        # out [B, C, pad + length]: ``pad`` zeros, then the activation of the input [B, C, length]
        # (x, strided by x_batch and x_channel, or a pending sum: _layer_input), whose sum goes to
        # total [B, C, length] as well when KEEP. Flat, not a program per (batch, channel) row: the
        # first stages' rows are a few frames long, and a row-sized block would leave most of its
        # lanes idle
        offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # B * C * T passes 2^31
        inside = offsets < numel
        row = offsets // (pad + length)  # batch * channels + channel
        t = offsets - row * (pad + length) - pad  # the input's sample; negative in the padding
        real = inside & (t >= 0)
        channel = row % channels
        at = row * length + t  # in a contiguous [B, C, length]
        x = _layer_input(x_ptr, (row // channels) * x_batch + channel * x_channel + t, b0_ptr, a1_ptr, b1_ptr, a2_ptr,
                         b2_ptr, at, real, divisor, PAIRS, MEAN)
        if KEEP:
            tl.store(total_ptr + at, x, mask=real)
        alpha = tl.load(alpha_ptr + channel, mask=real & (channel < split), other=1.0).to(tl.float32)
        y = tl.where(t >= 0, _activate(x.to(tl.float32), alpha, channel < split, eps, slope), 0.0)
        tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=inside)

    @triton.jit
    def _conv_input(value, alpha, snaking, eps, slope, ACTIVATE: tl.constexpr):
        # a conv's new input samples, through the activation before the conv when ACTIVATE
        if ACTIVATE:
            value = _activate(value.to(tl.float32), alpha, snaking, eps, slope).to(value.dtype)
        return value

    @triton.jit(do_not_specialize=["store_row", "offset", "tail", "x_row", "x_channel", "length", "scale", "channels",
                                   "stage_row", "split"])
    def _extend_with_tail(store_ptr, store_row, offset, tail, reads_ptr, x_ptr, x_row, x_channel, b0_ptr, a1_ptr,
                          b1_ptr, a2_ptr, b2_ptr, divisor, total_ptr, length, lengths_ptr, scale, full_ptr, stage_ptr,
                          stage_row, channels, alpha_ptr, split, eps, slope, BLOCK: tl.constexpr,
                          ACTIVATE: tl.constexpr, PAIRS: tl.constexpr, MEAN: tl.constexpr, KEEP: tl.constexpr):
        # grid (rows * channels, blocks of tail + length). A row's (channel c) tail is at
        # store[reads[row], offset + c * tail + j]: full[row, c] = tail, then the new input
        # (x, or a pending sum: _layer_input, its sum also written to total when KEEP), activated
        # when ACTIVATE; the first block's program also records the tail that ends at the row's
        # real end, lengths[row] * scale samples into the input, into stage[row, offset + c * tail
        # + j] (read from the same two sources, the new samples computed by the same expressions)
        program = tl.program_id(0).to(tl.int64)
        row = program // channels
        channel = program % channels
        width = tail + length
        read = tl.load(reads_ptr + row) * store_row + offset + channel * tail
        src = row * x_row + channel * x_channel - tail  # x's sample t - tail, for t >= tail
        term = program * length - tail  # the same sample of a contiguous [rows, C, length]: the other terms, total
        snaking = channel < split
        alpha = 1.0
        if ACTIVATE:
            alpha = tl.load(alpha_ptr + channel, mask=snaking, other=1.0).to(tl.float32)
        t = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = t < width
        remembered = t < tail
        new = _layer_input(x_ptr, src + t, b0_ptr, a1_ptr, b1_ptr, a2_ptr, b2_ptr, term + t, inside & ~remembered,
                           divisor, PAIRS, MEAN)
        if KEEP:
            tl.store(total_ptr + term + t, new, mask=inside & ~remembered)
        value = tl.where(remembered, tl.load(store_ptr + read + t, mask=inside & remembered),
                         _conv_input(new, alpha, snaking, eps, slope, ACTIVATE))
        tl.store(full_ptr + program * width + t, value, mask=inside)
        if tl.program_id(1) == 0:
            end = tl.load(lengths_ptr + row) * scale
            for first in range(0, tail, BLOCK):
                j = first + tl.arange(0, BLOCK)
                recording = j < tail
                at = end + j
                old = at < tail
                new = _layer_input(x_ptr, src + at, b0_ptr, a1_ptr, b1_ptr, a2_ptr, b2_ptr, term + at,
                                   recording & ~old, divisor, PAIRS, MEAN)
                value = tl.where(old, tl.load(store_ptr + read + at, mask=recording & old),
                                 _conv_input(new, alpha, snaking, eps, slope, ACTIVATE))
                tl.store(stage_ptr + row * stage_row + offset + channel * tail + j, value, mask=recording)


@dataclass(frozen=True)
class _Operands:
    """An activation's input as the kernels read it: a tensor ``x``, or a PendingSum's terms."""

    first: torch.Tensor  # x, or the sum's first term: samples contiguous, any batch and channel strides
    others: tuple[torch.Tensor, ...]  # the sum's other five terms (b0, a1, b1, a2, b2), contiguous; ``first`` unused
    pairs: int  # 0: x itself
    divisor: int
    total: Optional[torch.Tensor]  # [B, C, T], where the sum goes (a PendingSum that ``keep``s it)

    @property
    def constants(self) -> dict[str, bool | int]:
        return {"PAIRS": self.pairs, "MEAN": self.divisor > 1, "KEEP": self.total is not None}

    @property
    def total_or_any(self) -> torch.Tensor:
        return self.first if self.total is None else self.total


def _operands(x: Input) -> _Operands:
    """What the kernels read of ``x``. A PendingSum not yet computed is added by the kernel (where
    it ``keep``s the sum, into a new tensor left in its ``total``); one of more than MAX_PAIRS
    pairs is added eagerly first."""
    if isinstance(x, PendingSum) and x.total is None and len(x.pairs) <= MAX_PAIRS:
        (first, b0), *rest = x.pairs
        terms = [b0] + [term for pair in rest for term in pair]
        if any(term.shape != x.shape for term in (first, *terms)):
            raise ValueError(f"a pending sum's terms differ in shape: {[tuple(t.shape) for p in x.pairs for t in p]}")
        if first.stride(-1) != 1:
            first = first.contiguous()
        terms = [term.contiguous() for term in terms]
        total = None
        if x.keep:
            total = x.total = first.new_empty(x.shape)  # written by the kernel about to run
        return _Operands(first, tuple(terms) + (first,) * (5 - len(terms)), len(x.pairs), x.divisor, total)
    x = value_of(x)
    if x.stride(-1) != 1:
        x = x.contiguous()
    return _Operands(x, (x,) * 5, 0, 1, None)


def snake_then_leaky(x: Input, alpha: torch.Tensor, split: int, pad: int = 0) -> torch.Tensor:
    """x [B, C, T] -> snake (x + sin(alpha x)^2 / (alpha + eps), alpha [1, split, 1]) on channels
    < ``split`` and leaky ReLU on the rest, behind ``pad`` zeros: [B, C, pad + T], contiguous, x's
    dtype, as one kernel (what F.pad(activation, (pad, 0)) gives in two). ``x`` may be strided,
    or a PendingSum, which the kernel adds as it reads it (writing the sum to its ``total`` where
    it ``keep``s it): one kernel where each add was one more."""
    on_device = launch_context(x.pairs[0][0] if isinstance(x, PendingSum) else x, "fused activation")
    if len(x.shape) != 3 or alpha.numel() != split or not 0 <= split <= x.shape[1] or pad < 0:
        raise ValueError(f"expected x [B, C, T], {split} alphas for split {split} and pad >= 0, got {tuple(x.shape)}, "
                         f"{alpha.numel()} and {pad}")
    ops = _operands(x)
    batch, channels, length = ops.first.shape
    out = ops.first.new_empty((batch, channels, pad + length))
    numel = out.numel()
    if numel:
        with on_device:
            _snake_then_leaky[(triton.cdiv(numel, BLOCK),)](
                ops.first, ops.first.stride(0), ops.first.stride(1), *ops.others, float(ops.divisor), ops.total_or_any,
                alpha.contiguous(), out, numel, channels, split, length, pad, SNAKE_EPS, LEAKY_RELU_SLOPE, BLOCK=BLOCK,
                enable_fp_fusion=FP_FUSION, **ops.constants)
    return out


def extend_with_tail(store: torch.Tensor, offset: int, tail: int, reads: torch.Tensor, x: Input,
                     lengths: torch.Tensor, scale: int, stage: torch.Tensor, alpha: torch.Tensor | None = None,
                     split: int = 0) -> torch.Tensor:
    """A causal conv's input with each row's remembered tail in front, as one kernel
    (torchcodec.state.DecodeStep.extend): x [B, C, N] -> [B, C, tail + N], row b's tail read from
    ``store`` [rows, width] row ``reads[b]``, columns ``offset + c * tail + j``; and the ``tail``
    samples before row b's real end (``lengths[b] * scale`` samples into x) written to ``stage``
    [B, width] at the same columns, the tail its stream remembers next. Every value is a copy;
    with ``alpha`` [1, split, 1], x's samples are first put through ``snake_then_leaky`` (the
    activation before the conv), the same bits in the input and in the record. ``x`` may be a
    PendingSum, added as in ``snake_then_leaky``."""
    on_device = launch_context(x.pairs[0][0] if isinstance(x, PendingSum) else x, "fused state")
    rows, channels, length = x.shape
    width = store.shape[1]
    if store.dim() != 2 or not store.is_contiguous() or stage.shape != (rows, width) or not stage.is_contiguous() or \
            offset < 0 or tail < 1 or offset + channels * tail > width or reads.shape != (rows,) or lengths.shape != (rows,):
        raise ValueError(f"expected a contiguous store and stage [rows, width >= {offset + channels * tail}] and reads "
                         f"and lengths [{rows}], got {tuple(store.shape)}, {tuple(stage.shape)}, {tuple(reads.shape)} "
                         f"and {tuple(lengths.shape)}")
    if alpha is not None and (alpha.numel() != split or not 0 <= split <= channels):
        raise ValueError(f"expected {split} alphas for split {split} of {channels} channels, got {alpha.numel()}")
    ops = _operands(x)
    full = ops.first.new_empty((rows, channels, tail + length))
    if full.numel():
        with on_device:
            _extend_with_tail[(rows * channels, triton.cdiv(tail + length, BLOCK))](
                store, width, offset, tail, reads.contiguous(), ops.first, ops.first.stride(0), ops.first.stride(1),
                *ops.others, float(ops.divisor), ops.total_or_any, length, lengths.contiguous(), scale, full, stage,
                width, channels, ops.first if alpha is None else alpha.contiguous(), split, SNAKE_EPS, LEAKY_RELU_SLOPE,
                BLOCK=BLOCK, ACTIVATE=alpha is not None, enable_fp_fusion=FP_FUSION, **ops.constants)
    return full


__all__ = ["BLOCK", "MAX_PAIRS", "extend_with_tail", "interpreted", "snake_then_leaky", "unavailable_reason"]
