"""The element-wise work of the fast path's decoder layers, eager or fused (``GEPARD_TORCH_FUSED_KERNELS``).

``DeviceStep`` calls one of two interchangeable sets of ops around its matrix products and
attention:

- ``EagerLayerOps``: the model's own modules and torch ops, op for op as the reference loop runs
  them, so the fast path's frames equal the reference loop's (the CPU default, and the form
  torch.compile fuses by itself);
- ``FusedLayerOps``: the same math as one Triton kernel per op (engine.backends.fused_ops), for
  CUDA, where a step is bound by how many kernels it launches (with them, DeviceStep samples all
  heads in one kernel and commits the frames in another: ``fused_ops.sample_heads`` and
  ``commit_frames``, the latter checked by ``commit_check``).

``fuse_check`` runs both (and both samplings) on the model's own weights, on the device and in its
dtype, and ``commit_check`` both commits, before the fast path uses the fused ones: a kernel that
fails to compile, or computes something else, leaves the step eager instead of serving wrong audio.
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

    def norm_rope(self, norm: ZeroCenteredRMSNorm, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [B, T, heads, hd] -> per-head norm then rotary, [B, heads, T, hd]."""
        return self.rope.apply(norm(x).transpose(1, 2), cos, sin)

    def keys_into_cache(self, norm: ZeroCenteredRMSNorm, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
                        sin: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, slots: torch.Tensor,
                        positions: torch.Tensor) -> torch.Tensor:
        """The keys k [B, T, heads, hd] normed and rotated (``norm_rope``), then written with the
        values v [B, heads, T, hd] into the layer's caches at (slots, positions): [B] each for a
        decode step's one token a row, [B, T] for a prefill. Returns the keys [B, heads, T, hd]."""
        k = self.norm_rope(norm, k, cos, sin)
        if slots.dim() == 1:
            key_cache[slots, :, positions] = k[:, :, 0]
            value_cache[slots, :, positions] = v[:, :, 0]
        else:
            key_cache[slots, :, positions] = k.transpose(1, 2)
            value_cache[slots, :, positions] = v.transpose(1, 2)
        return k

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
    in its down projection's product."""

    fused = True

    def norm(self, norm: ZeroCenteredRMSNorm, x: torch.Tensor) -> torch.Tensor:
        return fused_ops.rms_norm(x, norm.weight, norm.eps)

    def add_norm(self, norm: ZeroCenteredRMSNorm, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return fused_ops.add_rms_norm(x, h, norm.weight, norm.eps)

    def norm_rope(self, norm: ZeroCenteredRMSNorm, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return fused_ops.norm_rope(x, norm.weight, norm.eps, cos, sin)

    def keys_into_cache(self, norm: ZeroCenteredRMSNorm, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
                        sin: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, slots: torch.Tensor,
                        positions: torch.Tensor) -> torch.Tensor:
        return fused_ops.keys_into_cache(k, v, norm.weight, norm.eps, cos, sin, key_cache, value_cache, slots, positions)

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
    rows, tokens = 2, 3
    x = torch.randn(rows, tokens, bb.hidden_size, generator=generator).to(device=device, dtype=dtype)
    h = torch.randn(rows, tokens, bb.hidden_size, generator=generator).to(device=device, dtype=dtype)
    nq, nkv = bb.num_attention_heads * 2 * bb.head_dim, bb.num_key_value_heads * bb.head_dim
    with torch.no_grad():
        qg, k, v = F.linear(x, weights.qkv).split((nq, nkv, nkv), dim=-1)
        qg = qg.view(rows, tokens, bb.num_attention_heads, 2 * bb.head_dim)
        q, gate = qg[..., : bb.head_dim], qg[..., bb.head_dim :]
        k = k.view(rows, tokens, bb.num_key_value_heads, bb.head_dim)
        v = v.view(rows, tokens, bb.num_key_value_heads, bb.head_dim).transpose(1, 2)
        positions = torch.arange(tokens, device=device).view(1, tokens) + torch.tensor([[0], [37]], device=device)
        cos, sin = model.backbone.rotary.cos_sin(positions)
        cache_slots = torch.tensor([[2], [0]], device=device).expand(rows, tokens)

        def keys_into_cache(ops) -> torch.Tensor:  # the keys, and fresh caches of 3 slots x 2 * tokens positions
            caches = [torch.zeros(3, bb.num_key_value_heads, 2 * tokens, bb.head_dim, device=device, dtype=dtype)
                      for _ in range(2)]
            keys = ops.keys_into_cache(attn.k_norm, k, v, cos, sin, *caches, cache_slots, positions - positions[:, :1])
            return torch.cat([keys.flatten(), *(c.flatten() for c in caches)])

        out = torch.randn(rows, tokens, nq // 2, generator=generator).to(device=device, dtype=dtype)
        gate_up = F.linear(x, weights.gate_up)
        activated = eager.silu_mul(gate_up)  # one input for both forms of the residual product
        cases = {
            "rms_norm": lambda ops: ops.norm(layer.input_layernorm, x),
            "add_rms_norm": lambda ops: torch.cat(ops.add_norm(layer.post_attention_layernorm, x, h)),
            "norm_rope (queries)": lambda ops: ops.norm_rope(attn.q_norm, q, cos, sin),
            "keys_into_cache": keys_into_cache,
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


def commit_check(step, seed: int = 0) -> None:
    """A DeviceStep's ``fused_commit`` against its eager ``commit`` from the same random slot state
    and the same codes: cond rows, a CFG branch and a padding row, out-of-range codes among them,
    windows that have and have not filled. Both must leave the same state and results (integer
    work: exactly; the scratch slot, which nothing reads, aside). The state is cleared afterwards:
    this runs at start, before any request."""
    from engine.backends.cuda_graphs import TableUpload  # imports fast_step, which imports this module
    from engine.backends.fast_step import HostRows, RowTables

    st, device, scratch = step.state, step.model.device, step.cache.scratch
    rows = min(4, step.cache.slots)
    generator = torch.Generator(device="cpu").manual_seed(seed)

    def rand(high: int, *shape: int) -> torch.Tensor:
        return torch.randint(0, high, shape, generator=generator).to(device)

    for tensor, high in ((st.frames, 3 * st.ring), (st.window, st.ring), (st.last_codes, step.max_level),
                         (st.counts, 3), (st.history, step.max_level)):
        tensor.copy_(rand(high, *tensor.shape))
    st.stop_threshold.copy_(torch.rand(st.stop_threshold.shape, generator=generator).to(device))
    host = HostRows.padding(rows, scratch)
    for i in range(rows - (rows > 1)):  # the last row pads, when there are two or more
        host.slot[i] = host.feed[i] = i
        host.real[i] = host.commit[i] = True
    if rows >= 3:  # row 1 is row 0's CFG branch
        host.commit[1], host.feed[1], host.uncond[0], host.uncond[1] = False, 0, 1, 0
    tables = RowTables.allocate(rows, scratch, device)
    TableUpload(rows, device)(tables, host)
    codes = rand(step.max_level + 2, rows, step.channels) - 1  # -1 and max_level: out of range
    stop_logits = (4 * torch.randn(rows, generator=generator)).to(device=device, dtype=step.model.dtype)
    before = [t.clone() for t in st.per_slot()]
    step.commit(codes, st.frames[tables.slot], stop_logits.float(), tables)
    want = [t[:scratch].clone() for t in st.per_slot()] + [tables.out.clone()]
    for t, saved in zip(st.per_slot(), before):
        t.copy_(saved)
    step.fused_commit(codes, stop_logits, tables)
    got = [t[:scratch] for t in st.per_slot()] + [tables.out]
    differ = [name for name, a, b in zip((*st.PER_SLOT, "out"), want, got) if not torch.equal(a, b)]
    st.clear()
    if differ:
        raise RuntimeError(f"commit_frames leaves other {', '.join(differ)} than the eager commit")


__all__ = ["EagerLayerOps", "FusedLayerOps", "commit_check", "fuse_check", "fuses_by_default", "sample_check",
           "tolerance"]
