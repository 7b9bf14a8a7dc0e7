"""The fast path's element-wise work as Triton kernels (``GEPARD_TORCH_FUSED_KERNELS``).

Eager, a decoder layer of a decode step launches 70 kernels in bf16 (52 in float32, where the
casts are no-ops), of which only 4 are matrix products and one is attention: a zero-centred RMSNorm
is ten (casts, the square, the mean, + eps, rsqrt, two products, 1 + w, the cast back), a rotary
embedding eight, the attention gate three and SwiGLU's activation two. Fourteen layers of that are
most of the 1,149 kernels a full-size bf16 step launches (bench/kernel_count.py counts them), and on
a GPU a batch-1 step is bound by those
launches, not by memory (replayed as a CUDA graph they still run one after another, ~2 us each).
Here each of them is one kernel that reads its inputs once, computes in float32 and writes once:

    rms_norm(x, weight, eps)                  y = x * rsqrt(mean(x^2) + eps) * (1 + w), by rows
    add_rms_norm(x, h, weight, eps)           (s, rms_norm(s)) for s = x + h
    attention_inputs(q, k, v, ..., caches)    per-head RMSNorm then rotate-half rotary of the queries
                                              and the keys (strided views of the projection), the
                                              rotary's cos/sin read from tables by position, and
                                              the keys and values written into the layer's caches
                                              (eager: 2 norms, 2 rotaries and 2 cache writes)
    sigmoid_gate(out, gate)                   out * sigmoid(gate), gate a strided [B, T, heads, hd] view
    silu_mul(gate_up)                         silu(gate) * up for gate_up = [gate | up] by rows
    sample_heads(head, grid, ...)             engine.sampling's CFG combine, repetition penalty,
                                              top-k and Gumbel-max for every (row, head): ~100
                                              eager kernels (the noise hash alone is ~20)
    commit_frames(codes, stop_logits, ...)    each row's frame into its slot's state (last codes,
                                              history ring, window counts, frame count), a decode
                                              step's token into its cache length, and the step's
                                              results: ~40 eager kernels
    embed_frames(last_codes, feed, ...)       a decode step's frame lookup (gather, offsets, table)
    decode_inputs(h, eps, scale, ...)         the frame embedder's LayerNorm and scale, each row's
                                              position and its additive attention mask: with the
                                              lookup, the step's inputs take 5 launches, not 18

Each rounds where the eager ops round (the norm's output to the model's dtype before the rotary
reads it, the sigmoid and the SiLU before their products), so in bf16 it differs from them only
by the order of a reduction's sums and the fused multiply-adds; in float32 by about one ulp.

The kernels run where Triton runs: CUDA. Under Triton's interpreter (``TRITON_INTERPRET=1`` set
before this module is imported) they run on CPU tensors too, slowly: that is how the CPU tests
check their arithmetic against the eager ops.
"""

from __future__ import annotations

from typing import Optional

import torch

from codec_worker.triton_support import FP_FUSION, interpreted, launch_context, tl, triton, unavailable_reason
from engine.sampling import NOISE_BITS, NOISE_MAX, NOISE_MIN

FLAT_BLOCK = 1024  # values per program of the flat (element-wise) kernels
# the sampling kernel rounds as the eager ops do, one op at a time (sample_heads): no multiply-add
# contraction, whatever Triton's default (triton_support.FP_FUSION, which the other kernels use)
SAMPLE_FP_FUSION = False

if triton is not None:

    # Sizes and strides are not specialised (Triton would compile a variant per value 1 and per
    # divisibility by 16 of each): one compiled kernel per dtype and block, made before any CUDA
    # graph capture by the fast path's check (and by the warm-up run before each capture).

    @triton.jit
    def _add(a, b):
        return a + b

    @triton.jit
    def _max(a, b):
        return tl.maximum(a, b)

    @triton.jit
    def _min(a, b):
        return tl.minimum(a, b)

    @triton.jit
    def _mix64(z):
        # engine.sampling.mix64 (splitmix64's finaliser) on uint64, where >> is the logical shift
        z = z + 0x9E3779B97F4A7C15
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB
        return z ^ (z >> 31)

    # tl.reduce with our own combines rather than tl.sum, tl.max or tl.argmax (the same reductions),
    # and no tl.zeros: those are jit functions of Triton's standard library, which the interpreter
    # only runs when TRITON_INTERPRET was set before Triton itself was imported, and the tests
    # switch it on for this module alone

    @triton.jit(do_not_specialize=["cols", "eps"])
    def _rms_norm(x_ptr, h_ptr, w_ptr, sum_ptr, out_ptr, cols, eps, ADD: tl.constexpr, BLOCK: tl.constexpr):
        # one program per row of a contiguous [rows, cols]
        row = tl.program_id(0).to(tl.int64) * cols
        offsets = tl.arange(0, BLOCK)
        inside = offsets < cols
        x = tl.load(x_ptr + row + offsets, mask=inside, other=0.0)
        if ADD:  # the residual sum, rounded to the model's dtype as the eager add rounds it
            x = (x.to(tl.float32) + tl.load(h_ptr + row + offsets, mask=inside, other=0.0).to(tl.float32)).to(x.dtype)
            tl.store(sum_ptr + row + offsets, x, mask=inside)
        xf = x.to(tl.float32)
        scale = tl.rsqrt(tl.reduce(xf * xf, 0, _add) / cols + eps)
        gain = 1.0 + tl.load(w_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
        tl.store(out_ptr + row + offsets, (xf * scale * gain).to(out_ptr.dtype.element_ty), mask=inside)

    @triton.jit
    def _norm_rotate(x_ptr, w_ptr, cos_ptr, sin_ptr, out_ptr, base, position, head_dim, rot, eps, BLOCK: tl.constexpr):
        # one head's values at x_ptr + base + [0, hd): zero-centred RMSNorm, then rotate-half rotary
        # with the cos/sin of ``position`` (rows of [positions, rot] tables); float32, each step
        # rounded where eager rounds, the result in out_ptr's dtype
        dtype = out_ptr.dtype.element_ty
        d = tl.arange(0, BLOCK)
        inside = d < head_dim
        x = tl.load(x_ptr + base + d, mask=inside, other=0.0).to(tl.float32)
        scale = tl.rsqrt(tl.reduce(x * x, 0, _add) / head_dim + eps)
        # the norm's output as the eager norm hands it to the rotary: rounded to the model's dtype
        normed = (x * scale * (1.0 + tl.load(w_ptr + d, mask=inside, other=0.0).to(tl.float32))).to(dtype).to(tl.float32)
        half = rot // 2
        rotating = d < rot
        partner = tl.where(d < half, d + half, d - half)  # rotate-half: the other half's element
        xp = tl.load(x_ptr + base + partner, mask=rotating, other=0.0).to(tl.float32)
        wp = tl.load(w_ptr + partner, mask=rotating, other=0.0).to(tl.float32)
        other = (xp * scale * (1.0 + wp)).to(dtype).to(tl.float32)
        other = tl.where(d < half, -other, other)
        cos = tl.load(cos_ptr + position * rot + d, mask=rotating, other=1.0)
        sin = tl.load(sin_ptr + position * rot + d, mask=rotating, other=0.0)
        return tl.where(rotating, normed * cos + other * sin, normed).to(dtype)

    @triton.jit(do_not_specialize=["heads", "kv_heads", "tokens", "q_token", "q_head", "k_token", "k_head", "head_dim",
                                   "rot", "table_rows", "q_eps", "k_eps", "v_row", "v_head", "v_token", "slot_row",
                                   "slot_token", "pos_row", "pos_token", "c_slot", "c_head", "c_pos"])
    def _attention_inputs(q_ptr, k_ptr, v_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, kc_ptr, vc_ptr,
                          slot_ptr, pos_ptr, heads, kv_heads, tokens, q_token, q_head, k_token, k_head, head_dim, rot,
                          table_rows, q_eps, k_eps, v_row, v_head, v_token, slot_row, slot_token, pos_row, pos_token,
                          c_slot, c_head, c_pos, BLOCK: tl.constexpr):
        # one program per (row, token, query head): the query head normed and rotated at the
        # token's position; the programs of the first kv_heads heads also do key head ``head``, and
        # write it into the key cache at the token's (slot, position) and its value into the value
        # cache there. The query's element (token n, head h, d) is at n * q_token + h * q_head + d,
        # likewise the key's; the outputs are [rows, heads, tokens, hd] and [rows, kv_heads, tokens, hd]
        program = tl.program_id(0).to(tl.int64)
        head = program % heads
        token = program // heads  # row * tokens + t
        row = token // tokens
        t = token % tokens
        d = tl.arange(0, BLOCK)
        inside = d < head_dim
        position = tl.load(pos_ptr + row * pos_row + t * pos_token)
        angle = tl.minimum(tl.maximum(position, 0), table_rows - 1)  # in the tables whatever a padding row holds
        q = _norm_rotate(q_ptr, qw_ptr, cos_ptr, sin_ptr, q_out_ptr, token * q_token + head * q_head, angle, head_dim,
                         rot, q_eps, BLOCK)
        tl.store(q_out_ptr + ((row * heads + head) * tokens + t) * head_dim + d, q, mask=inside)
        if head < kv_heads:
            k = _norm_rotate(k_ptr, kw_ptr, cos_ptr, sin_ptr, k_out_ptr, token * k_token + head * k_head, angle,
                             head_dim, rot, k_eps, BLOCK)
            tl.store(k_out_ptr + ((row * kv_heads + head) * tokens + t) * head_dim + d, k, mask=inside)
            slot = tl.load(slot_ptr + row * slot_row + t * slot_token)
            at = slot * c_slot + head * c_head + position * c_pos + d
            tl.store(kc_ptr + at, k, mask=inside)
            tl.store(vc_ptr + at, tl.load(v_ptr + row * v_row + head * v_head + t * v_token + d, mask=inside), mask=inside)

    @triton.jit(do_not_specialize=["channels", "dim", "table_rows"])
    def _embed_frames(last_ptr, feed_ptr, offsets_ptr, table_ptr, out_ptr, channels, dim, table_rows,
                      BLOCK: tl.constexpr):
        # one program per (row, channel): the embedding of the row's fed slot's last code in that
        # channel (a row of the flat table: the code plus its channel's offset) into out [rows,
        # channels * dim], the frame embedder's flattened lookup
        program = tl.program_id(0).to(tl.int64)
        row = program // channels
        channel = program % channels
        slot = tl.load(feed_ptr + row)
        index = tl.load(last_ptr + slot * channels + channel) + tl.load(offsets_ptr + channel)
        index = tl.minimum(tl.maximum(index, 0), table_rows - 1)  # last codes are clamped into range already
        d = tl.arange(0, BLOCK)
        for start in range(0, dim, BLOCK):
            inside = start + d < dim
            tl.store(out_ptr + (row * channels + channel) * dim + start + d,
                     tl.load(table_ptr + index * dim + start + d, mask=inside), mask=inside)

    @triton.jit(do_not_specialize=["hidden", "span", "eps"])
    def _decode_inputs(h_ptr, scale_ptr, slot_ptr, lengths_ptr, pos_ptr, mask_ptr, hidden, span, eps,
                       H_BLOCK: tl.constexpr, SPAN_BLOCK: tl.constexpr):
        # grid (rows, span blocks). Every program: its block of the row's additive attention mask (0
        # at the positions up to the row's, -inf past it). The first of a row also: the row's
        # position (its slot's length) and the frame embedder's end on h [rows, hidden] in place,
        # LayerNorm without affine then the embedding scale, each rounded where eager rounds
        row = tl.program_id(0).to(tl.int64)
        block = tl.program_id(1)
        position = tl.load(lengths_ptr + tl.load(slot_ptr + row))
        columns = block * SPAN_BLOCK + tl.arange(0, SPAN_BLOCK)
        dtype = mask_ptr.dtype.element_ty
        tl.store(mask_ptr + row * span + columns, tl.where(columns <= position, 0.0, float("-inf")).to(dtype),
                 mask=columns < span)
        if block == 0:
            tl.store(pos_ptr + row, position)
            d = tl.arange(0, H_BLOCK)
            inside = d < hidden
            x = tl.load(h_ptr + row * hidden + d, mask=inside, other=0.0).to(tl.float32)
            mean = tl.reduce(x, 0, _add) / hidden
            centred = tl.where(inside, x - mean, 0.0)
            rstd = tl.rsqrt(tl.reduce(centred * centred, 0, _add) / hidden + eps)
            normed = (centred * rstd).to(h_ptr.dtype.element_ty).to(tl.float32)
            scale = tl.load(scale_ptr).to(tl.float32)
            tl.store(h_ptr + row * hidden + d, (normed * scale).to(h_ptr.dtype.element_ty), mask=inside)

    @triton.jit(do_not_specialize=["numel", "width", "head_dim", "token_stride", "head_stride"])
    def _sigmoid_gate(out_ptr, gate_ptr, y_ptr, numel, width, head_dim, token_stride, head_stride,
                      BLOCK: tl.constexpr):
        # flat over a contiguous [tokens, width = heads * hd]; the gate's (token, head, d) is strided
        offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = offsets < numel
        token = offsets // width
        column = offsets % width
        at = token * token_stride + (column // head_dim) * head_stride + column % head_dim
        dtype = y_ptr.dtype.element_ty
        gate = tl.load(gate_ptr + at, mask=inside, other=0.0).to(tl.float32)
        weight = (1.0 / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)  # eager rounds the sigmoid first
        out = tl.load(out_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
        tl.store(y_ptr + offsets, (out * weight).to(dtype), mask=inside)

    @triton.jit(do_not_specialize=["numel", "width"])
    def _silu_mul(gate_up_ptr, y_ptr, numel, width, BLOCK: tl.constexpr):
        # flat over y [tokens, width]; gate_up is a contiguous [tokens, 2 * width] = [gate | up]
        offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = offsets < numel
        at = (offsets // width) * 2 * width + offsets % width
        dtype = y_ptr.dtype.element_ty
        gate = tl.load(gate_up_ptr + at, mask=inside, other=0.0).to(tl.float32)
        up = tl.load(gate_up_ptr + at + width, mask=inside, other=0.0).to(tl.float32)
        act = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)  # eager rounds the SiLU first
        tl.store(y_ptr + offsets, (act * up).to(dtype), mask=inside)

    @triton.jit(do_not_specialize=["head_stride", "channels", "levels"])
    def _sample_heads(head_ptr, head_stride, grid_ptr, valid_ptr, uncond_ptr, cfg_ptr, slot_ptr, counts_ptr, penalty_ptr,
                      temperature_ptr, top_k_ptr, seed_ptr, frame_ptr, codes_ptr, channels, levels, noise_scale,
                      noise_min, noise_max, NOISE_SHIFT: tl.constexpr, LEVELS: tl.constexpr):
        # one program per (row, channel), a lane per code; engine.sampling's steps in its order
        program = tl.program_id(0).to(tl.int64)
        row = program // channels
        channel = program % channels
        code = tl.arange(0, LEVELS)
        inside = code < levels
        cell = channel * levels + code
        valid = inside & (tl.load(valid_ptr + cell, mask=inside, other=0) != 0)
        column = tl.load(grid_ptr + cell, mask=inside, other=0)
        # the heads' logits on the channel's grid (AudioHeads.code_logits), -inf past its levels: set
        # after cfg_combine, which meanwhile sees zeros there (not -inf - -inf, a NaN thrown away, which
        # Triton's interpreter warns of)
        cond = tl.load(head_ptr + row * head_stride + column, mask=valid, other=0.0).to(tl.float32)
        uncond_row = tl.load(uncond_ptr + row)
        uncond = tl.load(head_ptr + uncond_row * head_stride + column, mask=valid, other=0.0).to(tl.float32)
        # cfg_combine
        mixed = uncond + tl.load(cfg_ptr + row) * (cond - uncond)
        logits = tl.where((cond == float("inf")) | (cond == float("-inf")), cond, mixed)
        logits = tl.where(valid, logits, float("-inf"))
        # repetition_penalty, over the slot's window counts
        slot = tl.load(slot_ptr + row)
        seen = tl.load(counts_ptr + (slot * channels + channel) * levels + code, mask=inside, other=0) > 0
        penalty = tl.load(penalty_ptr + slot)
        penalised = tl.where(logits > 0, tl.math.div_rn(logits, penalty), logits * penalty)
        logits = tl.where(seen, tl.where(penalty != 1.0, penalised, logits), logits)
        # top_k_mask: a code is kept when fewer than k codes are strictly better (= it is >= the k-th best)
        top_k = tl.load(top_k_ptr + slot)
        better = tl.reduce((logits[None, :] > logits[:, None]).to(tl.int32), 1, _add)
        masked = tl.where(better < top_k, logits, float("-inf"))
        logits = tl.where((top_k > 0) & (top_k < levels), masked, logits)
        # uniform_noise of (seed, frame, channel, code), then gumbel_argmax
        seed = tl.load(seed_ptr + slot).to(tl.uint64, bitcast=True)
        key = ((tl.load(frame_ptr + slot) * channels + channel) * levels + code).to(tl.uint64, bitcast=True)
        bits = (_mix64(_mix64(seed) + key) >> NOISE_SHIFT).to(tl.int64)
        uniform = tl.minimum(tl.maximum(tl.math.div_rn(bits.to(tl.float32) + 0.5, noise_scale), noise_min), noise_max)
        gumbel = -tl.log(-tl.log(uniform))
        temperature = tl.load(temperature_ptr + slot)
        greedy = temperature <= 0
        scores = tl.math.div_rn(logits, tl.where(greedy, 1.0, temperature)) + tl.where(greedy, 0.0, gumbel)
        candidate = (logits == logits) & (logits != float("inf")) & (logits != float("-inf")) & (scores == scores)
        scores = tl.where(candidate, scores, float("-inf"))
        best = tl.reduce(scores, 0, _max)
        first = tl.reduce(tl.where(candidate & (scores == best), code, LEVELS), 0, _min)  # argmax: the first best
        found = tl.reduce(candidate.to(tl.int32), 0, _max) > 0
        tl.store(codes_ptr + row * channels + channel, tl.where(found, first, -1).to(tl.int64))

    @triton.jit(do_not_specialize=["channels", "max_level", "ring", "scratch"])
    def _commit_frames(codes_ptr, stop_ptr, levels_ptr, slot_ptr, commit_ptr, threshold_ptr, frames_ptr, window_ptr,
                       last_ptr, history_ptr, counts_ptr, out_ptr, lengths_ptr, real_ptr, channels, max_level, ring,
                       scratch, CHANNELS: tl.constexpr, COUNT_TOKEN: tl.constexpr):
        # one program per row, a lane per channel: DeviceStep.sample_and_commit's eager commit
        row = tl.program_id(0).to(tl.int64)
        channel = tl.arange(0, CHANNELS)
        inside = channel < channels
        code = tl.load(codes_ptr + row * channels + channel, mask=inside, other=0)
        level = tl.load(levels_ptr + channel, mask=inside, other=1)
        bad = tl.reduce((inside & ((code < 0) | (code >= level))).to(tl.int64), 0, _max)
        slot = tl.load(slot_ptr + row)
        stop_p = tl.math.div_rn(1.0, 1.0 + tl.exp(-tl.load(stop_ptr + row).to(tl.float32)))
        stop = stop_p > tl.load(threshold_ptr + slot)
        commits = tl.load(commit_ptr + row).to(tl.int64)  # 0 or 1
        commit = commits != 0
        # rows that do not commit write the scratch slot, which nothing real reads
        target = tl.where(commit, slot, scratch)
        frame = tl.load(frames_ptr + slot)
        safe = tl.minimum(tl.maximum(code, 0), level - 1)  # a bad code ends its request, in bounds meanwhile
        tl.store(last_ptr + target * channels + channel, safe, mask=inside)
        here = frame % ring
        # the window: the new code counted, the code of the frame that leaves it uncounted (read
        # before this frame's code is written, unless it is that very cell)
        leaving = frame - tl.load(window_ptr + slot)
        there = tl.maximum(leaving, 0) % ring
        old = tl.load(history_ptr + (target * ring + there) * channels + channel, mask=inside, other=0).to(tl.int64)
        old = tl.where(there == here, safe, old)
        tl.store(history_ptr + (target * ring + here) * channels + channel, safe.to(history_ptr.dtype.element_ty),
                 mask=inside)
        cell = (target * channels + channel) * max_level
        # the row's flags broadcast to a lane each, for the masks (tl.where, not tl.zeros: see _add)
        counting = tl.where(inside, commits, 0) != 0
        tl.store(counts_ptr + cell + safe, tl.load(counts_ptr + cell + safe, mask=counting, other=0) + 1, mask=counting)
        dropping = counting & (tl.where(inside, leaving, -1) >= 0)
        tl.store(counts_ptr + cell + old, tl.load(counts_ptr + cell + old, mask=dropping, other=0) - 1, mask=dropping)
        tl.store(frames_ptr + target, frame + commits)  # the scratch slot's count is never read
        tl.store(out_ptr + row * (channels + 2) + channel, code, mask=inside)
        tl.store(out_ptr + row * (channels + 2) + channels, stop.to(tl.int64))
        tl.store(out_ptr + row * (channels + 2) + channels + 1, bad)
        if COUNT_TOKEN:  # a decode step's token, in its row's slot (a padding row adds 0 to the scratch slot's)
            tl.store(lengths_ptr + slot, tl.load(lengths_ptr + slot) + tl.load(real_ptr + row).to(tl.int64))


def _on_device(x: torch.Tensor):
    return launch_context(x, "fused kernels")


def _token_stride(x: torch.Tensor) -> int:
    """The distance between consecutive tokens of x [B, T, ...] taken as B * T tokens; raises when
    the rows' tokens are not evenly spaced (a view the kernels cannot walk as one sequence)."""
    b, t = x.shape[:2]
    if t == 1:
        return x.stride(0)  # a dim of size 1 has an arbitrary stride
    if b > 1 and x.stride(0) != t * x.stride(1):
        raise ValueError(f"the tokens of a {tuple(x.shape)} view with strides {x.stride()} are not evenly spaced")
    return x.stride(1)


def _row_block(cols: int) -> int:
    return triton.next_power_of_2(max(cols, 1))


def _check_norm(x: torch.Tensor, weight: torch.Tensor) -> None:
    if weight.shape != x.shape[-1:]:
        raise ValueError(f"a norm over {x.shape[-1]} values got weights of shape {tuple(weight.shape)}")


def _launch_norm(x: torch.Tensor, h, weight: torch.Tensor, eps: float, total: torch.Tensor, out: torch.Tensor) -> None:
    cols = x.shape[-1]
    rows = x.numel() // cols if cols else 0
    if rows:
        with _on_device(x):
            _rms_norm[(rows,)](x, x if h is None else h, weight.contiguous(), total, out, cols, eps,
                               ADD=h is not None, BLOCK=_row_block(cols), enable_fp_fusion=FP_FUSION)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Zero-centred RMSNorm over the last dim (engine.model.backbone.ZeroCenteredRMSNorm) as one
    kernel: the output is contiguous, x's dtype."""
    _check_norm(x, weight)
    x = x.contiguous()
    out = torch.empty_like(x)
    _launch_norm(x, None, weight, eps, out, out)
    return out


def add_rms_norm(x: torch.Tensor, h: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual sum ``s = x + h`` and ``rms_norm(s)``, as one kernel (a decoder layer's second
    norm follows its attention's residual add)."""
    _check_norm(x, weight)
    if h.shape != x.shape:
        raise ValueError(f"cannot add {tuple(h.shape)} to {tuple(x.shape)}")
    x, h = x.contiguous(), h.contiguous()
    total, out = torch.empty_like(x), torch.empty_like(x)
    _launch_norm(x, h, weight, eps, total, out)
    return total, out


def _heads_view(x: torch.Tensor, name: str) -> int:
    """x [B, T, heads, hd] with each head's values contiguous (a slice of a fused projection's
    output is fine); returns its token stride."""
    if x.dim() != 4 or x.stride(-1) != 1:
        raise ValueError(f"expected {name} [B, T, heads, hd] with each head's values contiguous, got shape "
                         f"{tuple(x.shape)} strides {x.stride()}")
    return _token_stride(x)


def attention_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                     q_eps: float, k_eps: float, cos_table: torch.Tensor, sin_table: torch.Tensor,
                     key_cache: torch.Tensor, value_cache: torch.Tensor, slots: torch.Tensor,
                     positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A decoder layer's attention inputs after its projection, as one kernel: the queries q and
    keys k [B, T, heads, hd] each per-head zero-centred RMSNormed (GatedAttention's q_norm, k_norm)
    then rotated (rotate-half, RotaryEmbedding.apply) at each token's position, and the keys and the
    values v [B, kv_heads, T, hd] (a view) written into ``key_cache``/``value_cache`` [S, kv_heads,
    P, hd] at each token's (slot, position).

    The rotary's cos and sin are rows of tables [positions, rot] float32 (RotaryEmbedding.cos_sin
    of every position, made once), read at each token's position: a step computes none. slots and
    positions are [B] (one token a row: a decode step) or [B, T] (a prefill; expanded views are
    fine). Returns (queries [B, heads, T, hd], keys [B, kv_heads, T, hd]), contiguous, q's dtype:
    the layout the eager rotary returns."""
    q_token, k_token = _heads_view(q, "queries"), _heads_view(k, "keys")
    b, t, heads, head_dim = q.shape
    kv_heads = k.shape[2]
    _check_norm(q, q_weight)
    _check_norm(k, k_weight)
    rot = cos_table.shape[-1]
    if k.shape[:2] != (b, t) or k.shape[3] != head_dim or kv_heads > heads:
        raise ValueError(f"keys {tuple(k.shape)} do not fit queries {tuple(q.shape)}")
    if cos_table.dim() != 2 or sin_table.shape != cos_table.shape or rot > head_dim or rot % 2 or \
            cos_table.shape[0] < key_cache.shape[2]:
        raise ValueError(f"expected cos/sin tables [positions >= {key_cache.shape[2]}, rot] with an even rot <= "
                         f"{head_dim}, got {tuple(cos_table.shape)} and {tuple(sin_table.shape)}")
    if v.shape != (b, kv_heads, t, head_dim) or v.stride(-1) != 1 or key_cache.shape != value_cache.shape or \
            key_cache.stride() != value_cache.stride() or key_cache.shape[1] != kv_heads or key_cache.stride(-1) != 1:
        raise ValueError(f"values {tuple(v.shape)} and caches {tuple(key_cache.shape)} do not fit keys {tuple(k.shape)}")
    if slots.dim() == 1:
        slots, positions = slots.view(b, 1), positions.view(b, 1)
    if slots.shape != (b, t) or positions.shape != (b, t):
        raise ValueError(f"expected slots and positions [{b}] or [{b}, {t}], got {tuple(slots.shape)}")
    queries = torch.empty((b, heads, t, head_dim), dtype=q.dtype, device=q.device)
    keys = torch.empty((b, kv_heads, t, head_dim), dtype=q.dtype, device=q.device)
    if queries.numel():
        with _on_device(q):
            _attention_inputs[(b * t * heads,)](
                q, k, v, q_weight.contiguous(), k_weight.contiguous(), cos_table.float().contiguous(),
                sin_table.float().contiguous(), queries, keys, key_cache, value_cache, slots, positions, heads, kv_heads,
                t, q_token, q.stride(2), k_token, k.stride(2), head_dim, rot, cos_table.shape[0], q_eps, k_eps,
                v.stride(0), v.stride(1), v.stride(2), slots.stride(0), slots.stride(1) if t > 1 else 0,
                positions.stride(0), positions.stride(1) if t > 1 else 0, *key_cache.stride()[:3],
                BLOCK=_row_block(head_dim), enable_fp_fusion=FP_FUSION)
    return queries, keys


def embed_frames(last_codes: torch.Tensor, feed: torch.Tensor, offsets: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The frame embedder's lookup for a decode step, as one kernel: row i gets the embeddings of
    slot ``feed[i]``'s last codes (``last_codes`` [S, C]), each code looked up in the flat table
    [sum(levels), E] at its channel's offset (``offsets`` [C]), flattened: [B, C * E], the table's
    dtype (FrameEmbedder.forward up to its projection)."""
    rows, (channels, dim) = feed.shape[0], (last_codes.shape[1], table.shape[1])
    if offsets.shape != (channels,) or table.dim() != 2:
        raise ValueError(f"expected offsets [{channels}] and a [codes, dim] table, got {tuple(offsets.shape)} "
                         f"and {tuple(table.shape)}")
    out = table.new_empty((rows, channels * dim))
    if out.numel():
        with _on_device(table):
            _embed_frames[(rows * channels,)](last_codes.contiguous(), feed.contiguous(), offsets.contiguous(),
                                              table.contiguous(), out, channels, dim, table.shape[0],
                                              BLOCK=min(_row_block(dim), FLAT_BLOCK), enable_fp_fusion=FP_FUSION)
    return out


def decode_inputs(h: torch.Tensor, eps: float, scale: torch.Tensor, slots: torch.Tensor, lengths: torch.Tensor,
                  span: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The rest of a decode step's inputs, as one kernel: the frame embedder's end on its last
    projection's output h [B, H], in place (LayerNorm without affine, ``eps``, then times
    ``scale`` [1]), each row's position (``lengths`` [S] of its slot, ``slots`` [B]) and the
    additive attention mask over ``span`` positions (0 up to the row's position, -inf past it, h's
    dtype). Returns (positions [B] int64, mask [B, 1, 1, span])."""
    if h.dim() != 2 or not h.is_contiguous() or scale.numel() != 1 or slots.shape != h.shape[:1]:
        raise ValueError(f"expected a contiguous h [B, H], a scale of one value and slots [B], got {tuple(h.shape)}, "
                         f"{tuple(scale.shape)} and {tuple(slots.shape)}")
    rows, hidden = h.shape
    positions = torch.empty(rows, dtype=torch.int64, device=h.device)
    mask = h.new_empty((rows, 1, 1, span))
    if rows and span:
        with _on_device(h):
            _decode_inputs[(rows, triton.cdiv(span, FLAT_BLOCK))](h, scale, slots.contiguous(), lengths.contiguous(),
                                                                positions, mask, hidden, span, eps,
                                                                H_BLOCK=_row_block(hidden), SPAN_BLOCK=FLAT_BLOCK,
                                                                enable_fp_fusion=FP_FUSION)
    return positions, mask


def sigmoid_gate(out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """``out * sigmoid(gate)`` as one kernel: gate [B, T, heads, hd], a view whose heads' values
    are contiguous (the gate half of the attention's query projection), out B * T tokens of
    heads * hd values (made contiguous). Returns [B * T, heads * hd]."""
    if gate.dim() != 4 or gate.stride(-1) != 1:
        raise ValueError(f"expected a gate [B, T, heads, hd] with each head's values contiguous, got shape "
                         f"{tuple(gate.shape)} strides {gate.stride()}")
    heads, head_dim = gate.shape[-2:]
    tokens = gate.shape[0] * gate.shape[1]
    token_stride = _token_stride(gate)
    if out.numel() != gate.numel():
        raise ValueError(f"cannot gate {tuple(out.shape)} with {tuple(gate.shape)}")
    out = out.reshape(tokens, heads * head_dim).contiguous()
    y = torch.empty_like(out)
    numel = y.numel()
    if numel:
        with _on_device(out):
            _sigmoid_gate[(triton.cdiv(numel, FLAT_BLOCK),)](out, gate, y, numel, heads * head_dim, head_dim, token_stride,
                                                             gate.stride(-2), BLOCK=FLAT_BLOCK,
                                                             enable_fp_fusion=FP_FUSION)
    return y


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for ``gate_up = [gate | up]`` on its last dim, as one kernel (SwiGLU's
    activation after its fused gate/up product). Returns [..., width], gate_up's dtype."""
    width = gate_up.shape[-1] // 2
    if gate_up.shape[-1] != 2 * width:
        raise ValueError(f"gate_up's last dim must be even, got {gate_up.shape[-1]}")
    gate_up = gate_up.contiguous()
    y = gate_up.new_empty((*gate_up.shape[:-1], width))
    numel = y.numel()
    if numel:
        with _on_device(gate_up):
            _silu_mul[(triton.cdiv(numel, FLAT_BLOCK),)](gate_up, y, numel, width, BLOCK=FLAT_BLOCK,
                                                         enable_fp_fusion=FP_FUSION)
    return y


def sample_heads(head: torch.Tensor, grid_index: torch.Tensor, grid_valid: torch.Tensor, uncond: torch.Tensor,
                 cfg_scale: torch.Tensor, slots: torch.Tensor, counts: torch.Tensor, penalty: torch.Tensor,
                 temperature: torch.Tensor, top_k: torch.Tensor, seeds: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
    """One code per head for each row, as one kernel: engine.sampling's CFG combine, repetition
    penalty, top-k and Gumbel-max over the audio heads' logits, with the same counter-based noise.

    head [B, F]: the fused heads' outputs (AudioHeads.fused_weight), read through the grid
    ``grid_index``/``grid_valid`` [C, L]; uncond [B] the row of each row's CFG branch and
    cfg_scale [B] its scale; slots [B] the slot each row's knobs and state are read from: counts
    [S, C, L] (codes in the repetition window), penalty, temperature, top_k, seeds and frames [S].
    Returns codes [B, C] int64 (-1 for a head with no finite logit). Multiply-adds are not fused
    and divisions round to nearest (Triton's default float32 division may be off by 2 ulp), so
    float32 arithmetic rounds as the eager ops do, one op at a time."""
    rows, channels, levels = head.shape[0], grid_index.shape[0], grid_index.shape[1]
    if counts.shape[1:] != (channels, levels):
        raise ValueError(f"counts {tuple(counts.shape)} do not match a grid of {channels} channels x {levels} codes")
    head = head.contiguous()
    codes = torch.empty((rows, channels), dtype=torch.int64, device=head.device)
    if codes.numel():
        with _on_device(head):
            _sample_heads[(rows * channels,)](
                head, head.shape[1], *(t.contiguous() for t in (grid_index, grid_valid, uncond, cfg_scale.float(), slots,
                                                                counts, penalty.float(), temperature.float(), top_k, seeds,
                                                                frames)), codes, channels, levels,
                float(1 << NOISE_BITS), NOISE_MIN, NOISE_MAX, NOISE_SHIFT=64 - NOISE_BITS, LEVELS=_row_block(levels),
                enable_fp_fusion=SAMPLE_FP_FUSION, num_warps=1)  # a program's 8 lanes: one warp is plenty
    return codes


def commit_frames(codes: torch.Tensor, stop_logits: torch.Tensor, levels: torch.Tensor, slots: torch.Tensor,
                  commit: torch.Tensor, scratch: int, thresholds: torch.Tensor, frames: torch.Tensor, windows: torch.Tensor,
                  last_codes: torch.Tensor, history: torch.Tensor, counts: torch.Tensor, out: torch.Tensor,
                  lengths: Optional[torch.Tensor] = None, real: Optional[torch.Tensor] = None) -> None:
    """Commit each row's sampled frame into its slot's state and write the step's results, as one
    kernel: DeviceStep.sample_and_commit's eager ops (last codes, the history ring, the repetition
    window's counts, the frame count; a row that does not commit writes ``scratch``), the stop
    decision (sigmoid(stop logit) > the slot's threshold) and the code-range check.

    codes [B, C] int64 (sample_heads), stop_logits [B] or [B, 1], levels [C], slots [B], commit [B]
    bool; per slot: thresholds, frames, windows [S], last_codes [S, C], history [S, ring, C],
    counts [S, C, L]; out [B, C + 2] int64 gets the codes, the stop flag and the bad-code flag.
    With ``lengths`` [S] (a decode step's cache lengths, contiguous) and ``real`` [B] bool, each
    row's slot length also grows by 1 where the row is real (the token the step wrote).
    Every tensor is written in place (they are the step's static state)."""
    rows, channels = codes.shape
    if out.shape != (rows, channels + 2) or not out.is_contiguous() or any(
            not t.is_contiguous() for t in (thresholds, frames, windows, last_codes, history, counts)):
        raise ValueError(f"out must be a contiguous [{rows}, {channels + 2}] and the slot state contiguous")
    count = lengths is not None
    if count and (real is None or real.shape != (rows,) or not lengths.is_contiguous()):
        raise ValueError(f"counting the step's tokens takes contiguous lengths and real [{rows}]")
    if rows:
        with _on_device(codes):
            _commit_frames[(rows,)](codes.contiguous(), stop_logits.contiguous(), levels.contiguous(), slots.contiguous(),
                                    commit.contiguous(), thresholds, frames, windows, last_codes, history, counts, out,
                                    lengths if count else frames, real.contiguous() if count else commit.contiguous(),
                                    channels, counts.shape[2], history.shape[1], scratch, CHANNELS=_row_block(channels),
                                    COUNT_TOKEN=count, enable_fp_fusion=FP_FUSION, num_warps=1)


__all__ = ["FLAT_BLOCK", "add_rms_norm", "attention_inputs", "commit_frames", "decode_inputs", "embed_frames", "interpreted",
           "rms_norm", "sample_heads", "sigmoid_gate", "silu_mul", "unavailable_reason"]
