"""The decoder's Triton kernels (``GEPARD_CODEC_FUSED_ACTIVATIONS``): its snake activations, each
written into the padded input of the conv it feeds, and the carried conv state's reads and records.

Eager, a half-snake activation is ten kernels (a copy, alpha * x, sin, the square, alpha + eps, its
reciprocal, the product, the sum, then a copy and the leaky ReLU of the other half), each streaming
the tensor through memory, and a decode applies 96 of them. On a GPU a short decode is bound by
its launches (replayed as a CUDA graph they still run one after another), a long one partly by
their memory traffic. Here one kernel reads each value once, computes in float32 and writes it once.

    snake_then_leaky(x, alpha, split, pad)   x [B, C, T]: snake on channels < split, leaky ReLU on
                                             the rest, written behind ``pad`` zeros: a causal conv's
                                             padded input in one kernel instead of two
    extend_with_tail(store, ...)             a causal conv's input with each row's remembered tail in
                                             front (optionally activated as above), and the tail to
                                             remember next (torchcodec.state)

Every activation of the decoder feeds a causal conv, which pads its input with zeros on the left
(or, carrying state, puts the stream's last inputs there). Done apart, the pad is one more kernel
and one more pass over the activation's output; here the activation writes straight into the
conv's input, one kernel for both.

Carrying conv state (``GEPARD_CODEC_CARRY_STATE``), a conv's input is its stream's last samples
followed by the new ones, and the new last samples are recorded: eagerly five kernels a conv (the
rows' tails gathered, the concatenation, the record's index, its gather, the write back), where a
windowed decode pads with one. Here it is one kernel a conv, which applies the activation before
the conv too, and one copy of every record per decode (ConvStateCache keeps all the tails in one
tensor). What one decode of one stream launches (``bench/kernel_count.py``, the full-size codec,
counted on CPU; the count does not depend on the size):

    decode            eager    with these kernels
    windowed          1,226    286 (96 of them activations; one pad left, the first conv's)
    carrying state    1,629    276 (97 of them the state's, activations included)

so a stateful decode launches fewer kernels than a windowed one, and decodes 25 frames of context
fewer per chunk.

The kernels run where Triton runs: CUDA. Under Triton's interpreter (``TRITON_INTERPRET=1`` set
before this module is imported) they run on CPU tensors too, slowly: that is how the CPU tests
check their arithmetic against the eager ops.
"""

from __future__ import annotations

import torch

from codec_worker.torchcodec.layers import LEAKY_RELU_SLOPE, SNAKE_EPS
from codec_worker.triton_support import interpreted, launch_context, tl, triton, unavailable_reason

BLOCK = 1024  # values per program, over the flattened [B, C, T]

if triton is not None:

    @triton.jit
    def _activate(x, alpha, snaking, eps, slope):
        # x, alpha float32: snake where ``snaking``, leaky ReLU elsewhere. The one expression both
        # kernels compute, so a value a conv reads and the same value recorded for the stream's next
        # chunk are the same bits
        wave = tl.sin(alpha * x)
        return tl.where(snaking, x + wave * wave / (alpha + eps), tl.where(x >= 0, x, x * slope))

    # sizes are not specialised (Triton would compile a variant per divisibility of each): one
    # compiled kernel per dtype, made before any CUDA graph capture by the codec's probe
    @triton.jit(do_not_specialize=["numel", "channels", "split", "length", "pad"])
    def _snake_then_leaky(x_ptr, alpha_ptr, out_ptr, numel, channels, split, length, pad, eps, slope,
                          BLOCK: tl.constexpr):
        # out [B, C, pad + length]: ``pad`` zeros, then the activation of x [B, C, length]. Flat,
        # not a program per (batch, channel) row: the first stages' rows are a few frames long, and
        # a row-sized block would leave most of its lanes idle
        offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # B * C * T passes 2^31
        inside = offsets < numel
        row = offsets // (pad + length)  # batch * channels + channel
        t = offsets - row * (pad + length) - pad  # x's sample; negative in the padding
        real = inside & (t >= 0)
        channel = row % channels
        x = tl.load(x_ptr + row * length + t, mask=real, other=0.0).to(tl.float32)
        alpha = tl.load(alpha_ptr + channel, mask=real & (channel < split), other=1.0).to(tl.float32)
        y = tl.where(t >= 0, _activate(x, alpha, channel < split, eps, slope), 0.0)
        tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=inside)

    @triton.jit
    def _conv_input(pointer, mask, alpha, snaking, eps, slope, ACTIVATE: tl.constexpr):
        # a conv's new input samples, through the activation before the conv when ACTIVATE (the
        # lanes masked off read 0, so the activation never sees what lies outside x)
        value = tl.load(pointer, mask=mask, other=0.0)
        if ACTIVATE:
            value = _activate(value.to(tl.float32), alpha, snaking, eps, slope).to(value.dtype)
        return value

    @triton.jit(do_not_specialize=["store_row", "offset", "tail", "x_row", "x_channel", "length", "scale", "channels",
                                   "stage_row", "split"])
    def _extend_with_tail(store_ptr, store_row, offset, tail, reads_ptr, x_ptr, x_row, x_channel, length, lengths_ptr,
                          scale, full_ptr, stage_ptr, stage_row, channels, alpha_ptr, split, eps, slope,
                          BLOCK: tl.constexpr, ACTIVATE: tl.constexpr):
        # grid (rows * channels, blocks of tail + length). A row's (channel c) tail is at
        # store[reads[row], offset + c * tail + j]: full[row, c] = tail, then x[row, c] (activated
        # when ACTIVATE); the first block's program also records the tail that ends at the row's
        # real end, lengths[row] * scale samples into x, into stage[row, offset + c * tail + j]
        # (read from the same two sources, x's samples activated by the same expression)
        program = tl.program_id(0).to(tl.int64)
        row = program // channels
        channel = program % channels
        width = tail + length
        read = tl.load(reads_ptr + row) * store_row + offset + channel * tail
        src = x_ptr + row * x_row + channel * x_channel - tail  # x's sample t - tail, for t >= tail
        snaking = channel < split
        alpha = 1.0
        if ACTIVATE:
            alpha = tl.load(alpha_ptr + channel, mask=snaking, other=1.0).to(tl.float32)
        t = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = t < width
        remembered = t < tail
        value = tl.where(remembered, tl.load(store_ptr + read + t, mask=inside & remembered),
                         _conv_input(src + t, inside & ~remembered, alpha, snaking, eps, slope, ACTIVATE))
        tl.store(full_ptr + program * width + t, value, mask=inside)
        if tl.program_id(1) == 0:
            end = tl.load(lengths_ptr + row) * scale
            for first in range(0, tail, BLOCK):
                j = first + tl.arange(0, BLOCK)
                recording = j < tail
                at = end + j
                old = at < tail
                value = tl.where(old, tl.load(store_ptr + read + at, mask=recording & old),
                                 _conv_input(src + at, recording & ~old, alpha, snaking, eps, slope, ACTIVATE))
                tl.store(stage_ptr + row * stage_row + offset + channel * tail + j, value, mask=recording)


def snake_then_leaky(x: torch.Tensor, alpha: torch.Tensor, split: int, pad: int = 0) -> torch.Tensor:
    """x [B, C, T] -> snake (x + sin(alpha x)^2 / (alpha + eps), alpha [1, split, 1]) on channels
    < ``split`` and leaky ReLU on the rest, behind ``pad`` zeros: [B, C, pad + T], contiguous, x's
    dtype, as one kernel (what F.pad(activation, (pad, 0)) gives in two)."""
    on_device = launch_context(x, "fused activation")
    if x.dim() != 3 or alpha.numel() != split or not 0 <= split <= x.shape[1] or pad < 0:
        raise ValueError(f"expected x [B, C, T], {split} alphas for split {split} and pad >= 0, got {tuple(x.shape)}, "
                         f"{alpha.numel()} and {pad}")
    x = x.contiguous()
    batch, channels, length = x.shape
    out = x.new_empty((batch, channels, pad + length))
    numel = out.numel()
    if numel:
        with on_device:
            _snake_then_leaky[(triton.cdiv(numel, BLOCK),)](x, alpha.contiguous(), out, numel, channels, split, length,
                                                            pad, SNAKE_EPS, LEAKY_RELU_SLOPE, BLOCK=BLOCK)
    return out


def extend_with_tail(store: torch.Tensor, offset: int, tail: int, reads: torch.Tensor, x: torch.Tensor,
                     lengths: torch.Tensor, scale: int, stage: torch.Tensor, alpha: torch.Tensor | None = None,
                     split: int = 0) -> torch.Tensor:
    """A causal conv's input with each row's remembered tail in front, as one kernel
    (torchcodec.state.DecodeStep.extend): x [B, C, N] -> [B, C, tail + N], row b's tail read from
    ``store`` [rows, width] row ``reads[b]``, columns ``offset + c * tail + j``; and the ``tail``
    samples before row b's real end (``lengths[b] * scale`` samples into x) written to ``stage``
    [B, width] at the same columns, the tail its stream remembers next. Every value is a copy;
    with ``alpha`` [1, split, 1], x's samples are first put through ``snake_then_leaky`` (the
    activation before the conv), the same bits in the input and in the record."""
    on_device = launch_context(x, "fused state")
    rows, channels, length = x.shape
    width = store.shape[1]
    if store.dim() != 2 or not store.is_contiguous() or stage.shape != (rows, width) or not stage.is_contiguous() or \
            offset < 0 or tail < 1 or offset + channels * tail > width or reads.shape != (rows,) or lengths.shape != (rows,):
        raise ValueError(f"expected a contiguous store and stage [rows, width >= {offset + channels * tail}] and reads "
                         f"and lengths [{rows}], got {tuple(store.shape)}, {tuple(stage.shape)}, {tuple(reads.shape)} "
                         f"and {tuple(lengths.shape)}")
    if alpha is not None and (alpha.numel() != split or not 0 <= split <= channels):
        raise ValueError(f"expected {split} alphas for split {split} of {channels} channels, got {alpha.numel()}")
    if x.stride(-1) != 1:
        x = x.contiguous()
    full = x.new_empty((rows, channels, tail + length))
    if full.numel():
        with on_device:
            _extend_with_tail[(rows * channels, triton.cdiv(tail + length, BLOCK))](
                store, width, offset, tail, reads.contiguous(), x, x.stride(0), x.stride(1), length, lengths.contiguous(),
                scale, full, stage, width, channels, x if alpha is None else alpha.contiguous(), split, SNAKE_EPS,
                LEAKY_RELU_SLOPE, BLOCK=BLOCK, ACTIVATE=alpha is not None)
    return full


__all__ = ["BLOCK", "extend_with_tail", "interpreted", "snake_then_leaky", "unavailable_reason"]
