"""The element-wise work of the fast path's decoder layers, eager or fused (``GEPARD_TORCH_FUSED_KERNELS``).

``DeviceStep`` calls one of two interchangeable sets of ops around its matrix products and
attention:

- ``EagerLayerOps``: the model's own modules and torch ops, op for op as the reference loop runs
  them, so the fast path's frames equal the reference loop's (the CPU default, and the form
  torch.compile fuses by itself);
- ``FusedLayerOps``: the same math as one Triton kernel per op (engine.backends.fused_ops), for
  CUDA, where a step is bound by how many kernels it launches (with them, DeviceStep makes a
  decode step's inputs in two kernels around the frame embedder's products, samples all heads
  in one kernel and commits the frames in another: ``fused_ops.embed_frames``,
  ``decode_inputs``, ``sample_heads`` and ``commit_frames``, the first two checked by
  ``inputs_check``, the last by ``commit_check``).

``fuse_check`` runs both (and both samplings) on the model's own weights, on the device and in its
dtype, ``inputs_check`` both forms of a decode step's inputs and ``commit_check`` both commits,
before the fast path uses the fused ones: a kernel that fails to compile, or computes something
else, leaves the step eager instead of serving wrong audio.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.backends import fused_ops
from engine.model.backbone import RotaryEmbedding, ZeroCenteredRMSNorm
from engine.sampling import cfg_combine, repetition_penalty, sample_codes


class EagerLayerOps:
    """The reference loop's ops (engine.model.backbone)."""

    fused = False

    def __init__(self, rope: RotaryEmbedding) -> None:
        self.rope = rope

    def norm(self, norm: ZeroCenteredRMSNorm, x: torch.Tensor) -> torch.Tensor:
        return norm(x)

    def add_norm(self, norm: ZeroCenteredRMSNorm, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x + h, norm(x + h)): a residual add and the norm after it."""
        x = x + h
        return x, norm(x)

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What ``attention_inputs`` rotates with for tokens at ``positions`` [B, T]: their cos and
        sin [B, T, rot] (RotaryEmbedding.cos_sin)."""
        return self.rope.cos_sin(positions)

    def norm_rope(self, norm: ZeroCenteredRMSNorm, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [B, T, heads, hd] -> per-head norm then rotary, [B, heads, T, hd]."""
        return self.rope.apply(norm(x).transpose(1, 2), cos, sin)

    def attention_inputs(self, attn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         rope: tuple[torch.Tensor, torch.Tensor], key_cache: torch.Tensor, value_cache: torch.Tensor,
                         slots: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The queries q and keys k [B, T, heads, hd] normed and rotated (``norm_rope``, with attn's
        q_norm and k_norm and the cos/sin of ``rotary``), then the keys and the values v
        [B, kv_heads, T, hd] written into the layer's caches at (slots, positions): [B] each for a
        decode step's one token a row, [B, T] for a prefill. Returns (queries, keys) as
        [B, heads, T, hd]."""
        q = self.norm_rope(attn.q_norm, q, *rope)
        k = self.norm_rope(attn.k_norm, k, *rope)
        if slots.dim() == 1:
            key_cache[slots, :, positions] = k[:, :, 0]
            value_cache[slots, :, positions] = v[:, :, 0]
        else:
            key_cache[slots, :, positions] = k.transpose(1, 2)
            value_cache[slots, :, positions] = v.transpose(1, 2)
        return q, k

    def sigmoid_gate(self, out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """out [..., heads * hd] * sigmoid(gate [..., heads, hd]), out's shape."""
        return out * torch.sigmoid(gate.reshape(out.shape))

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up

    def add_linear(self, x: torch.Tensor, h: torch.Tensor, linear: torch.nn.Linear) -> torch.Tensor:
        """x + linear(h): a residual add after a bias-free projection."""
        return x + linear(h)


class FusedLayerOps:
    """The same ops as one Triton kernel each (engine.backends.fused_ops), and the MLP's residual add
    in its down projection's product. The rotary's cos and sin are tables of every position of the
    cache, made once (on CUDA the same values the eager ops compute per step: one float32 op per
    element either way), which the attention inputs' kernel reads by position."""

    fused = True

    def __init__(self, rope: RotaryEmbedding, positions: int, device: torch.device) -> None:
        with torch.no_grad():
            self.cos_table, self.sin_table = rope.cos_sin(torch.arange(positions, device=device))

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole tables: the kernel reads each token's row by its position."""
        return self.cos_table, self.sin_table

    def norm(self, norm: ZeroCenteredRMSNorm, x: torch.Tensor) -> torch.Tensor:
        return fused_ops.rms_norm(x, norm.weight, norm.eps)

    def add_norm(self, norm: ZeroCenteredRMSNorm, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return fused_ops.add_rms_norm(x, h, norm.weight, norm.eps)

    def attention_inputs(self, attn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         rope: tuple[torch.Tensor, torch.Tensor], key_cache: torch.Tensor, value_cache: torch.Tensor,
                         slots: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return fused_ops.attention_inputs(q, k, v, attn.q_norm.weight, attn.k_norm.weight, attn.q_norm.eps,
                                          attn.k_norm.eps, *rope, key_cache, value_cache, slots, positions)

    def sigmoid_gate(self, out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return fused_ops.sigmoid_gate(out, gate).view(out.shape)

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        return fused_ops.silu_mul(gate_up)

    def add_linear(self, x: torch.Tensor, h: torch.Tensor, linear: torch.nn.Linear) -> torch.Tensor:
        """One matrix product whose epilogue adds x (addmm: beta = 1), not a product then an add:
        in bf16 the sum is rounded once instead of twice."""
        return torch.addmm(x.reshape(-1, x.shape[-1]), h.reshape(-1, h.shape[-1]), linear.weight.t()).view(x.shape)


def fuses_by_default(device: torch.device, compiled: bool) -> bool:
    """The setting's auto: on for CUDA, where Triton compiles, unless the step goes through
    torch.compile (Inductor fuses these ops itself, and would have to trace the kernels)."""
    return device.type == "cuda" and not compiled


def tolerance(want: torch.Tensor) -> torch.Tensor:
    """How far a fused op may be from the eager one: a few roundings of the dtype (the kernels
    round where the eager ops round, but sum a reduction in another order and fuse multiply-adds)."""
    eps = max(torch.finfo(want.dtype).eps, 1e-6)
    return 3 * eps * (1 + want.float().abs())


def fuse_check(model, layer_weights, head: tuple[torch.Tensor, torch.Tensor], eager: EagerLayerOps,
               fused: FusedLayerOps, seed: int = 0) -> None:
    """Run each fused op against the eager one on the first layer's real weights and projections,
    and the fused sampling against engine.sampling's on the heads' real weights (``head``: the
    fused weight and bias), on the model's device and in its dtype (compiling the kernels there,
    before any CUDA graph capture). Raises with what differs; returns when every op agrees within
    ``tolerance`` and the sampled codes agree (``sample_check``)."""
    bb = model.config.backbone
    layer, weights = model.backbone.layers[0], layer_weights[0]
    attn = layer.self_attn
    device, dtype = model.device, model.dtype
    generator = torch.Generator(device="cpu").manual_seed(seed)
    rows, tokens = 2, min(3, fused.cos_table.shape[0])  # tokens at positions the cache (and tables) hold
    x = torch.randn(rows, tokens, bb.hidden_size, generator=generator).to(device=device, dtype=dtype)
    h = torch.randn(rows, tokens, bb.hidden_size, generator=generator).to(device=device, dtype=dtype)
    nq, nkv = bb.num_attention_heads * 2 * bb.head_dim, bb.num_key_value_heads * bb.head_dim
    with torch.no_grad():
        qg, k, v = F.linear(x, weights.qkv).split((nq, nkv, nkv), dim=-1)
        qg = qg.view(rows, tokens, bb.num_attention_heads, 2 * bb.head_dim)
        q, gate = qg[..., : bb.head_dim], qg[..., bb.head_dim :]
        k = k.view(rows, tokens, bb.num_key_value_heads, bb.head_dim)
        v = v.view(rows, tokens, bb.num_key_value_heads, bb.head_dim).transpose(1, 2)
        # the second row's tokens as far into the cache (and the fused rotary's tables) as fit
        capacity = fused.cos_table.shape[0]
        later = max(0, min(37, capacity - tokens))
        positions = torch.arange(tokens, device=device).view(1, tokens) + torch.tensor([[0], [later]], device=device)
        cache_slots = torch.tensor([[2], [0]], device=device).expand(rows, tokens)

        def attention_inputs(ops) -> torch.Tensor:  # queries, keys, and fresh caches of 3 slots
            caches = [torch.zeros(3, bb.num_key_value_heads, later + tokens, bb.head_dim, device=device, dtype=dtype)
                      for _ in range(2)]
            queries, keys = ops.attention_inputs(attn, q, k, v, ops.rotary(positions), *caches, cache_slots, positions)
            return torch.cat([queries.flatten(), keys.flatten(), *(c.flatten() for c in caches)])

        out = torch.randn(rows, tokens, nq // 2, generator=generator).to(device=device, dtype=dtype)
        gate_up = F.linear(x, weights.gate_up)
        activated = eager.silu_mul(gate_up)  # one input for both forms of the residual product
        cases = {
            "rms_norm": lambda ops: ops.norm(layer.input_layernorm, x),
            "add_rms_norm": lambda ops: torch.cat(ops.add_norm(layer.post_attention_layernorm, x, h)),
            "attention_inputs": attention_inputs,
            "sigmoid_gate": lambda ops: ops.sigmoid_gate(out, gate),
            "silu_mul": lambda ops: ops.silu_mul(gate_up),
            "add_linear": lambda ops: ops.add_linear(x, activated, layer.mlp.down_proj),
        }
        for name, case in cases.items():
            want, got = case(eager), case(fused)
            if got.shape != want.shape or got.dtype != want.dtype:
                raise RuntimeError(f"{name} gives {tuple(got.shape)} {got.dtype}, not {tuple(want.shape)} {want.dtype}")
            error = (got.float() - want.float()).abs()
            if not bool(torch.isfinite(got).all()) or bool((error > tolerance(want)).any()):
                raise RuntimeError(f"{name} differs from the eager op by up to {float(error.max()):.3g}")
        sample_check(model, head, generator)


def sample_check(model, head: tuple[torch.Tensor, torch.Tensor], generator: torch.Generator, rows: int = 8) -> None:
    """fused_ops.sample_heads against engine.sampling's steps on random hidden states through the
    real heads, with every kind of knob (greedy and sampled, top-k, a repetition window, CFG). The
    two compute the same float32 steps and the same noise; a code may differ only where two
    scores tie within a rounding, so at most 1 in 100 may (a real error changes far more)."""
    device = model.device
    heads = model.heads
    grid, valid = heads._grid_index, heads._grid_valid
    channels, levels = grid.shape
    slots = torch.arange(rows, device=device).flip(0)  # rows read their knobs from other slots
    hidden = torch.randn(rows, model.config.backbone.hidden_size, generator=generator).to(device=device, dtype=model.dtype)
    counts = torch.randint(0, 2, (rows + 1, channels, levels), generator=generator).to(device)
    knobs = torch.tensor([[0.0, 1.0, 0], [1.0, 1.0, 0], [0.8, 2.0, 3], [1.2, 1.0, 1], [0.7, 1.5, 0], [0.0, 3.0, 2],
                          [1.0, 1.0, levels], [0.9, 1.0, 2], [1.0, 1.0, 0]])[: rows + 1]
    temperature, penalty = knobs[:, 0].to(device), knobs[:, 1].to(device)
    top_k = knobs[:, 2].long().to(device)
    seeds = torch.randint(0, 2**62, (rows + 1,), generator=generator).to(device)
    frames = torch.randint(0, 2000, (rows + 1,), generator=generator).to(device)
    uncond = torch.arange(rows, device=device)
    uncond[:2] = uncond[:2].flip(0)  # the first two rows are each other's CFG branch
    cfg_scale = torch.ones(rows, device=device)
    cfg_scale[:2] = 2.5
    with torch.no_grad():
        logits = F.linear(hidden, *head)
        grid_logits = logits.float()[:, grid].masked_fill(~valid, float("-inf"))
        want = cfg_combine(grid_logits, grid_logits[uncond], cfg_scale)
        want = repetition_penalty(want, counts[slots] > 0, penalty[slots])
        want = sample_codes(want, temperature[slots], top_k[slots], seeds[slots], frames[slots])
        got = fused_ops.sample_heads(logits, grid, valid, uncond, cfg_scale, slots, counts, penalty, temperature, top_k,
                                     seeds, frames)
    differ = int((got != want).sum())
    if got.shape != want.shape or differ > want.numel() // 100:
        raise RuntimeError(f"sample_heads differs from engine.sampling in {differ} of {want.numel()} codes")


def _check_rows(step, rows: int):
    """Row tables of ``rows`` rows for a check: requests in slots 0.. (each its own row), a CFG
    row fed row 0's frame once there are 3 rows, the last row padding once there are 2."""
    from engine.backends.cuda_graphs import TableUpload  # imports fast_step, which imports this module
    from engine.backends.fast_step import HostRows, RowTables

    device, scratch = step.model.device, step.cache.scratch
    host = HostRows.padding(rows, scratch)
    for i in range(rows - (rows > 1)):
        host.slot[i] = host.feed[i] = i
        host.real[i] = host.commit[i] = True
    if rows >= 3:  # row 1 is row 0's CFG branch
        host.commit[1], host.feed[1], host.uncond[0], host.uncond[1] = False, 0, 1, 0
    tables = RowTables.allocate(rows, scratch, device)
    TableUpload(rows, device)(tables, host)
    return tables


def inputs_check(step, seed: int = 0) -> None:
    """A DeviceStep's fused decode inputs (``fused_start_decode``: fused_ops.embed_frames, the frame
    embedder's products, fused_ops.decode_inputs) against its eager ones from the same random last
    frames and cache lengths: the embedded frames within ``tolerance``, the positions and the mask
    exactly. The state and lengths are cleared afterwards: this runs at start, before any request."""
    st, cache, device = step.state, step.cache, step.model.device
    rows = min(4, cache.slots)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    levels = torch.tensor(step.model.config.audio_heads)
    st.last_codes.copy_((torch.rand(st.last_codes.shape, generator=generator) * levels).long().to(device))
    cache.lengths.copy_(torch.randint(0, cache.max_positions, cache.lengths.shape, generator=generator).to(device))
    tables = _check_rows(step, rows)
    span = cache.max_positions
    try:
        with torch.no_grad():
            want_x, want_pos, _, want_mask = step.eager_start_decode(tables, span)
            got_x, got_pos, _, got_mask = step.fused_start_decode(tables, span)
    finally:
        st.clear()
        cache.lengths.zero_()
    error = (got_x.float() - want_x.float()).abs()
    if got_x.shape != want_x.shape or got_x.dtype != want_x.dtype or not bool(torch.isfinite(got_x).all()) or \
            bool((error > tolerance(want_x)).any()):
        raise RuntimeError(f"the fused decode inputs embed frames otherwise than the eager ones: {tuple(got_x.shape)} "
                           f"{got_x.dtype}, up to {float(error.max()) if error.numel() else 0.0:.3g} apart")
    if not torch.equal(got_pos, want_pos) or not torch.equal(got_mask, want_mask):
        raise RuntimeError("the fused decode inputs give other positions or another attention mask than the eager ones")


def commit_check(step, seed: int = 0) -> None:
    """A DeviceStep's ``fused_commit`` against its eager ``commit`` from the same random slot state
    and the same codes, as a prefill commits (its lengths set apart) and as a decode step does
    (counting its token; either way the kernel is compiled here, not at the first request): cond
    rows, a CFG branch and a padding row, out-of-range codes among them, windows that have and have
    not filled. Both must leave the same state, cache lengths and results (integer work: exactly;
    the scratch slot, which nothing reads, aside). The state and lengths are cleared afterwards:
    this runs at start, before any request."""
    st, device, scratch = step.state, step.model.device, step.cache.scratch
    rows = min(4, step.cache.slots)
    generator = torch.Generator(device="cpu").manual_seed(seed)

    def rand(high: int, *shape: int) -> torch.Tensor:
        return torch.randint(0, high, shape, generator=generator).to(device)

    for tensor, high in ((st.frames, 3 * st.ring), (st.window, st.ring), (st.last_codes, step.max_level),
                         (st.counts, 3), (st.history, step.max_level)):
        tensor.copy_(rand(high, *tensor.shape))
    st.stop_threshold.copy_(torch.rand(st.stop_threshold.shape, generator=generator).to(device))
    tables = _check_rows(step, rows)
    codes = rand(step.max_level + 2, rows, step.channels) - 1  # -1 and max_level: out of range
    stop_logits = (4 * torch.randn(rows, generator=generator)).to(device=device, dtype=step.model.dtype)
    lengths = step.cache.lengths
    lengths.copy_(rand(step.cache.max_positions, *lengths.shape))
    state = [*st.per_slot(), lengths]
    before = [t.clone() for t in state]
    differ: list[str] = []
    for count_token in (False, True):
        step.commit(codes, st.frames[tables.slot], stop_logits.float(), tables, count_token=count_token)
        want = [t[:scratch].clone() for t in state] + [tables.out.clone()]
        for t, saved in zip(state, before):
            t.copy_(saved)
        step.fused_commit(codes, stop_logits, tables, count_token=count_token)
        got = [t[:scratch] for t in state] + [tables.out]
        differ += [name for name, a, b in zip((*st.PER_SLOT, "lengths", "out"), want, got)
                   if not torch.equal(a, b) and name not in differ]
        for t, saved in zip(state, before):
            t.copy_(saved)
    st.clear()
    lengths.zero_()
    if differ:
        raise RuntimeError(f"commit_frames leaves other {', '.join(differ)} than the eager commit")


__all__ = ["EagerLayerOps", "FusedLayerOps", "commit_check", "fuse_check", "fuses_by_default", "inputs_check",
           "sample_check", "tolerance"]
