"""The fast path's device-side step: backbone over a static KV cache, then sampling, with all
per-request state kept on the device.

Everything in ``DeviceStep.decode`` has a fixed shape for a given (batch bucket, span bucket): it
reads its inputs from ``RowTables`` (rows -> cache slots, written by the host only when the batch
changes) and from per-slot state tensors, and writes its results into ``RowTables.out``. It calls
nothing that synchronises with the host, so on CUDA it can be captured once as a graph and
replayed (engine.backends.cuda_graphs); on CPU it runs eagerly. It runs in three parts (its
inputs, ``decode_layer`` once per layer, its sampling), and so does ``prefill`` (whole prompts into
fresh slots, then their first frames); ``compiled`` puts each part through torch.compile
(``compile_part``). The math is the reference loop's
(engine.backends.torch_generator), op for op where it matters for frame identity:

- frame embedding, decoder layers and heads reuse the model's own modules and the same fused
  head / flat embedding tables the reference builds on every call (built once here); each layer's
  q/k/v and gate/up projections run as one product each (``LayerWeights``: the same products);
- sampling calls engine.sampling's functions (CFG combine -> repetition penalty -> top-k ->
  Gumbel-max with the counter-based splitmix64 noise of (seed, frame index)), in float32;
- a request without CFG gets ``uncond = cond`` and scale 1, which ``cfg_combine`` returns exactly.

The norms, rotary, attention gate and SwiGLU activation go through ``self.ops``: the reference's
own ops (engine.backends.layer_ops.EagerLayerOps), or once ``fuse_kernels`` succeeded one Triton
kernel each (FusedLayerOps; the queries' and keys' norms and rotary and the cache writes are one),
which round where the eager ops round but are not bit-identical; with them, a decode step's
inputs are two kernels around the frame embedder's products (``fused_start_decode``), and the
sampling of all heads and the commit of the sampled frames one kernel each
(``fused_sample_and_commit``: the same steps, the same noise, the same state).

Row layout of a decode step (B = bucket): row i is cache slot i, for every i < B. A request's cond
branch is the row of its slot, its live CFG branch the row of its second slot; the other rows (free
slots) are padding. Attention reads the first B slots' cache as one view, so no step copies keys or
values; a padding row writes only the scratch slot and its output is never read. A CFG row is fed
its owner's last frame; only cond rows of real requests commit (last frame, frame count, repetition
window), and the host reads the output rows of its requests' slots.

``out`` columns: 0..31 the sampled codes, 32 the stop decision (cond branch; ignored after a
prefill: stop is never evaluated at SOS), 33 whether a code is outside its channel's levels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from engine.backends import fused_ops
from engine.backends.layer_ops import EagerLayerOps, FusedLayerOps, commit_check, fuse_check, inputs_check
from engine.backends.static_cache import StaticKVCache, to_device
from engine.model.gepard import GepardModel
from engine.requests import MAX_FRAMES
from engine.sampling import cfg_combine, invalid_codes, repetition_penalty, sample_codes, stop_decision

OUT_STOP = 32
OUT_BAD = 33


@dataclass
class RowTables:
    """Static inputs/outputs of one batch bucket (shared by all its span buckets)."""

    slot: torch.Tensor  # [B] the slot a row writes: its own index for a request's row, scratch for padding
    feed: torch.Tensor  # [B] slot whose last frame this row is fed (the owner's cond slot)
    real: torch.Tensor  # [B] bool: the row belongs to a request (cond or CFG branch)
    commit: torch.Tensor  # [B] bool: the row is a request's cond branch (its sample counts)
    uncond: torch.Tensor  # [B] row holding this row's CFG branch (itself when none)
    cfg_scale: torch.Tensor  # [B] float32: the CFG scale of this row (1.0 when no live CFG branch)
    out: torch.Tensor  # [B, 34] int64
    scratch: int

    @classmethod
    def allocate(cls, rows: int, scratch: int, device: torch.device) -> "RowTables":
        return cls(torch.full((rows,), scratch, dtype=torch.int64, device=device),
                torch.full((rows,), scratch, dtype=torch.int64, device=device),
                torch.zeros(rows, dtype=torch.bool, device=device),
                torch.zeros(rows, dtype=torch.bool, device=device),
                torch.arange(rows, dtype=torch.int64, device=device),
                torch.ones(rows, dtype=torch.float32, device=device),
                torch.zeros(rows, 34, dtype=torch.int64, device=device), scratch)

    @property
    def rows(self) -> int:
        return self.slot.shape[0]

    def fill_padding(self) -> None:
        """Turn every row into a padding row (it writes the scratch slot only)."""
        self.slot.fill_(self.scratch)
        self.feed.fill_(self.scratch)
        self.real.zero_()
        self.commit.zero_()
        self.uncond.copy_(torch.arange(self.rows, device=self.uncond.device))
        self.cfg_scale.fill_(1.0)


@dataclass
class HostRows:
    """The host's copy of a RowTables' inputs, built when the batch changes, uploaded in one go."""

    slot: list[int]
    feed: list[int]
    real: list[bool]
    commit: list[bool]
    uncond: list[int]
    cfg_scale: list[float]

    @classmethod
    def padding(cls, rows: int, scratch: int) -> "HostRows":
        return cls([scratch] * rows, [scratch] * rows, [False] * rows, [False] * rows, list(range(rows)), [1.0] * rows)

    def packed(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(int64 [5, B], float32 [B]) on CPU: one tensor per dtype, so an upload is two copies."""
        ints = torch.tensor([self.slot, self.feed, [int(r) for r in self.real], [int(c) for c in self.commit], self.uncond],
                            dtype=torch.int64)
        return ints, torch.tensor(self.cfg_scale, dtype=torch.float32)


class SlotState:
    """Per-slot sampling knobs and running state, on the device (index ``slots`` = scratch).

    The repetition window is kept as counts of each code per channel over the request's last
    ``repetition_window`` frames (a ring of recent frames says which frame leaves the window), so
    the penalty needs no history gather per step.
    """

    def __init__(self, slots: int, channels: int, max_level: int, ring: int, device: torch.device) -> None:
        n = slots + 1
        self.ring = ring
        self.temperature = torch.zeros(n, dtype=torch.float32, device=device)
        self.top_k = torch.zeros(n, dtype=torch.int64, device=device)
        self.seed = torch.zeros(n, dtype=torch.int64, device=device)
        self.stop_threshold = torch.full((n,), 0.5, dtype=torch.float32, device=device)
        self.penalty = torch.ones(n, dtype=torch.float32, device=device)
        self.window = torch.zeros(n, dtype=torch.int64, device=device)
        self.frames = torch.zeros(n, dtype=torch.int64, device=device)  # frames committed (= next frame's index)
        self.last_codes = torch.zeros(n, channels, dtype=torch.int64, device=device)
        self.counts = torch.zeros(n, channels, max_level, dtype=torch.int64, device=device)
        # codes fit a byte (levels <= 8): the ring is the largest state, slots x (MAX_FRAMES + 1) x 32
        self.history = torch.zeros(n, ring, channels, dtype=torch.uint8 if max_level <= 256 else torch.int64, device=device)

    def admit(self, slots: list[int], knobs: list[tuple[float, int, int, float, float, int]]) -> None:
        """Reset ``slots`` for new requests: knobs = (temperature, top_k, seed, stop_threshold,
        repetition_penalty, repetition_window) each. A few small copies per admission batch."""
        device = self.frames.device
        idx = to_device(slots, torch.int64, device)
        floats = to_device([[k[0], k[3], k[4]] for k in knobs], torch.float32, device)
        ints = to_device([[k[1], k[2], k[5]] for k in knobs], torch.int64, device)
        self.temperature[idx] = floats[:, 0]
        self.stop_threshold[idx] = floats[:, 1]
        self.penalty[idx] = floats[:, 2]
        self.top_k[idx] = ints[:, 0]
        self.seed[idx] = ints[:, 1]
        self.window[idx] = ints[:, 2]
        for t in (self.frames, self.last_codes, self.counts, self.history):
            t[idx] = 0

    PER_SLOT = ("temperature", "top_k", "seed", "stop_threshold", "penalty", "window", "frames", "last_codes", "counts",
                "history")

    def per_slot(self) -> tuple[torch.Tensor, ...]:
        """Every tensor indexed by slot (dim 0), in ``PER_SLOT``'s order."""
        return tuple(getattr(self, name) for name in self.PER_SLOT)

    def move(self, src: list[int], dst: list[int]) -> None:
        """Copy slots ``src`` into slots ``dst`` (pairwise): knobs and running state alike. The
        noise of a frame depends on the request's seed and frame index only, never on its slot, so
        a moved request samples exactly what it would have sampled where it was."""
        device = self.frames.device
        s, d = to_device(src, torch.int64, device), to_device(dst, torch.int64, device)
        for t in self.per_slot():
            t[d] = t[s]

    def clear(self) -> None:
        for t in (self.frames, self.last_codes, self.counts, self.history, self.top_k, self.seed, self.window):
            t.zero_()
        self.temperature.zero_()
        self.penalty.fill_(1.0)
        self.stop_threshold.fill_(0.5)


def fuse_rows(linears: list[torch.nn.Linear]) -> torch.Tensor:
    """One [sum of outputs, inputs] weight for bias-free linears that read the same input, so that
    they run as one matrix product. Each module's weight is re-pointed at its row block of it: the
    model works as before (a row block of a contiguous matrix is itself contiguous, and gives the
    same products) and no weight is held twice. Fusing already-fused modules returns their matrix."""
    first = linears[0].weight.detach()
    inputs = first.shape[1]
    offsets = [0]
    for lin in linears:
        offsets.append(offsets[-1] + lin.weight.shape[0])
    storage = first.untyped_storage()
    if storage.nbytes() == offsets[-1] * inputs * first.element_size() and all(
            lin.weight.is_contiguous() and lin.weight.untyped_storage().data_ptr() == storage.data_ptr()
            and lin.weight.storage_offset() == at * inputs for lin, at in zip(linears, offsets)):
        return first.as_strided((offsets[-1], inputs), (inputs, 1), 0)  # fused before: its whole matrix
    fused = torch.cat([lin.weight.detach() for lin in linears])
    for lin, start, end in zip(linears, offsets, offsets[1:]):
        lin.weight.data = fused[start:end]
    return fused


@dataclass
class LayerWeights:
    """A decoder layer's projections fused per input: q|k|v (attention input) and gate|up (MLP)."""

    qkv: torch.Tensor
    gate_up: torch.Tensor

    @classmethod
    def fuse(cls, layer) -> "LayerWeights":
        attn, mlp = layer.self_attn, layer.mlp
        for lin in (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj):
            assert lin.bias is None, "Gepard's projections have no biases"
        return cls(fuse_rows([attn.q_proj, attn.k_proj, attn.v_proj]), fuse_rows([mlp.gate_proj, mlp.up_proj]))


# torch.compile's backend for the parts, read when a DeviceStep is built. Another backend
# ("aot_eager", "eager") traces the same graphs with the same guards but generates no kernels: the
# CPU tests of what surrounds the compile and the benches' CPU stand-in runs set it, because
# Inductor's C++ for these parts takes about a minute on 2 cores with a cold cache.
COMPILE_BACKEND = "inductor"


def compile_part(fn):
    """A part of the decode step (DeviceStep.start_decode, decode_layer, finish_decode) or of the
    prefill (start_prefill, prefill_layer, finish_prefill) through torch.compile (TorchInductor:
    Triton kernels on CUDA, C++ on CPU). An eager step launches ~1,300 kernels at full size, most
    of them the small element-wise ops of the norms, rotary, gating and sampling; at batch 1 on a
    GPU their launch gaps, not memory traffic, bound the step, and likewise a lone prompt's prefill,
    which is most of a stream's time to first audio. Inductor fuses each part's into a handful.

    Shapes are dynamic from the start (one graph for every bucket > 1, span and prompt length; size
    1 is always specialised), and a layer's weights are graph inputs, so one compiled layer serves
    all layers. The fast path compiles every graph at start (FastGenerator.compile_all), outside
    CUDA graph capture."""
    return torch.compile(fn, dynamic=True, fullgraph=True, backend=COMPILE_BACKEND)


@dataclass(frozen=True)
class StepParts:
    """The three parts a decode step or a prefill runs in: its inputs, one decoder layer (called
    once per layer) and its sampling; each through torch.compile (``compile_part``) or eager."""

    start: Callable
    layer: Callable
    finish: Callable

    @classmethod
    def of(cls, start: Callable, layer: Callable, finish: Callable, compiled: bool) -> "StepParts":
        return cls(*(compile_part(f) for f in (start, layer, finish))) if compiled else cls(start, layer, finish)


class DeviceStep:
    """The model's forward over a StaticKVCache plus sampling, for the fast path."""

    def __init__(self, model: GepardModel, cache: StaticKVCache, max_frames: int = MAX_FRAMES,
                 compiled: bool = False) -> None:
        self.model = model
        self.cache = cache
        cfg = model.config
        device = model.device
        self.levels = torch.tensor(cfg.audio_heads, dtype=torch.int64, device=device)
        self.max_level = max(cfg.audio_heads)
        self.channels = cfg.num_channels
        self.state = SlotState(cache.slots, self.channels, self.max_level, ring=max_frames + 1, device=device)
        with torch.no_grad():  # the tables the reference concatenates on every call, built once
            self.head_weight, self.head_bias = model.heads.fused_weight()
            self.embed_table = model.frame_embedder.flat_table()
        bb = model.config.backbone
        self.num_heads, self.num_kv_heads, self.head_dim = bb.num_attention_heads, bb.num_key_value_heads, bb.head_dim
        self.group = self.num_heads // self.num_kv_heads
        self.gqa = self.group > 1  # a bool here: compared inside a compiled part, the sizes are symbolic
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self._channel_idx = torch.arange(self.channels, device=device)
        # 4 matrix products per layer instead of 7 (kernels, and weight reads in fewer, larger passes)
        with torch.no_grad():
            self.weights = [LayerWeights.fuse(layer) for layer in model.backbone.layers]
        self.compiled = compiled
        self.ops: EagerLayerOps | FusedLayerOps = EagerLayerOps(model.backbone.rotary)
        self.decode_parts = StepParts.of(self.start_decode, self.decode_layer, self.finish_decode, compiled)
        self.prefill_parts = StepParts.of(self.start_prefill, self.prefill_layer, self.finish_prefill, compiled)

    def fuse_kernels(self) -> None:
        """Run the layers' element-wise ops, the sampling and the commit as Triton kernels from now on
        (``FusedLayerOps``, ``fused_sample_and_commit``), after checking each against the eager ops
        on this model's weights, device and dtype (which also compiles the kernels: call it before
        any CUDA graph capture and any request). Raises, leaving the ops eager,
        when Triton cannot run here, a kernel fails, or it computes something else; a compiled step
        keeps the eager ops, which Inductor fuses by itself."""
        if self.compiled:
            raise RuntimeError("the step goes through torch.compile, which fuses these ops itself")
        reason = fused_ops.unavailable_reason(self.model.device)
        if reason:
            raise RuntimeError(f"the fused kernels cannot run here: {reason}")
        proj = self.model.frame_embedder.audio_embed_proj
        if [type(m) for m in proj] != [torch.nn.Linear, torch.nn.GELU, torch.nn.Linear, torch.nn.LayerNorm] or \
                proj[3].elementwise_affine:
            raise RuntimeError("the frame embedder's projection is not Linear, GELU, Linear, LayerNorm (no affine), "
                               "which the fused decode inputs compute")
        fused = FusedLayerOps(self.model.backbone.rotary, self.cache.max_positions, self.model.device)
        fuse_check(self.model, self.weights, (self.head_weight, self.head_bias), self.ops, fused)
        inputs_check(self)
        commit_check(self)
        self.ops = fused

    # -- model pieces ------------------------------------------------------------------------------
    def embed_frames(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, 32] -> [B, H] (FrameEmbedder.forward with the flat table built once)."""
        fe = self.model.frame_embedder
        flat = F.embedding(codes + fe._offsets, self.embed_table)
        return fe.audio_embed_proj(flat.flatten(-2)) * fe.audio_embed_scale

    def code_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """AudioHeads.code_logits with the fused head built once: [B, H] -> [B, 32, L] float32."""
        heads = self.model.heads
        fused = F.linear(hidden, self.head_weight, self.head_bias).float()
        return fused[:, heads._grid_index].masked_fill(~heads._grid_valid, float("-inf"))

    def _qkv(self, layer, qkv_weight: torch.Tensor, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
             kc: torch.Tensor, vc: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor):
        """Projections (one product: LayerWeights.qkv), per-head norms and rotary of GatedAttention
        (``rope``: what ``ops.rotary`` gave for the positions): x [B, T, H] -> q [B, nh, T, hd],
        gate [B, T, nh, hd] (a view), k/v [B, nkv, T, hd]; the keys and values also written into the
        layer's cache (kc, vc) at (slots, positions), [B] each for a decode step, [B, T] for a prefill."""
        b, t, _ = x.shape
        nq, nkv = self.num_heads * 2 * self.head_dim, self.num_kv_heads * self.head_dim
        qg, k, v = F.linear(x, qkv_weight).split((nq, nkv, nkv), dim=-1)
        qg = qg.view(b, t, self.num_heads, 2 * self.head_dim)
        q, gate = qg[..., : self.head_dim], qg[..., self.head_dim :]
        k = k.view(b, t, self.num_kv_heads, self.head_dim)
        v = v.view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = self.ops.attention_inputs(layer.self_attn, q, k, v, rope, kc, vc, slots, positions)
        return q, gate, k, v

    def _mlp(self, layer, gate_up_weight: torch.Tensor, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """The residual stream x plus SwiGLU of its normed h, with gate and up as one product
        (LayerWeights.gate_up) and the down projection adding onto x (``ops.add_linear``)."""
        return self.ops.add_linear(x, self.ops.silu_mul(F.linear(h, gate_up_weight)), layer.mlp.down_proj)

    def start_decode(self, tables: RowTables, span: int):
        """The inputs of a decode step's layers: each row's last frame embedded (x [B, H]), the
        position it is written at (pos [B]: lengths[slots[i]]), its rotary (``ops.rotary``) and a
        [B, 1, 1, span] mask over positions [0, pos] of slot i (for a request's row slots[i] == i;
        a padding row writes the scratch slot and reads a free slot, harmlessly).

        The mask is additive (0 where attended, -inf elsewhere, the model's dtype), made once per
        step: attention turns a boolean mask into exactly that at every layer (three kernels each).
        Eager that is 18 kernels; with the fused kernels 5 (``fused_start_decode``)."""
        if self.ops.fused:
            return self.fused_start_decode(tables, span)
        return self.eager_start_decode(tables, span)

    def eager_start_decode(self, tables: RowTables, span: int):
        x = self.embed_frames(self.state.last_codes[tables.feed])
        b = x.shape[0]
        pos = self.cache.lengths[tables.slot]  # [B]
        rope = self.ops.rotary(pos.view(b, 1))
        visible = (torch.arange(span, device=x.device).view(1, span) <= pos.view(b, 1)).view(b, 1, 1, span)
        mask = torch.full((b, 1, 1, span), float("-inf"), dtype=x.dtype, device=x.device).masked_fill_(visible, 0.0)
        return x, pos, rope, mask

    def fused_start_decode(self, tables: RowTables, span: int):
        """``start_decode`` in two kernels around the frame embedder's products (Linear, GELU,
        Linear): the lookup (fused_ops.embed_frames), then its LayerNorm and scale, the positions
        and the mask (fused_ops.decode_inputs); the rotary needs nothing (tables read by position)."""
        fe = self.model.frame_embedder
        proj = fe.audio_embed_proj
        flat = fused_ops.embed_frames(self.state.last_codes, tables.feed, fe._offsets, self.embed_table)
        x = proj[2](proj[1](proj[0](flat)))
        pos, mask = fused_ops.decode_inputs(x, proj[3].eps, fe.audio_embed_scale, tables.slot, self.cache.lengths, span)
        return x, pos, self.ops.rotary(pos), mask

    def decode_layer(self, layer, qkv_weight: torch.Tensor, gate_up_weight: torch.Tensor, x: torch.Tensor,
                     rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor, slots: torch.Tensor, pos: torch.Tensor,
                     kc: torch.Tensor, vc: torch.Tensor) -> torch.Tensor:
        """One decoder layer of a decode step: x [B, H] -> [B, H], its key and value written into
        the layer's cache (kc, vc) at (slots, pos). The span it attends to is the mask's last dim,
        and B and the span are read off tensor shapes, so one compiled graph serves every layer,
        bucket and span (see ``compile_part``; x in and out is a whole tensor, never a view, as
        Dynamo guards on that too)."""
        b, span = x.shape[0], mask.shape[-1]
        h = self.ops.norm(layer.input_layernorm, x)
        q, gate, k, v = self._qkv(layer, qkv_weight, h.unsqueeze(1), rope, kc, vc, slots, pos)
        # grouped-query decode: the heads sharing a kv head act as that head's "tokens", so
        # plain SDPA (any kernel) serves GQA without repeating keys/values
        qg = q.reshape(b, self.num_kv_heads, self.group, self.head_dim)
        # row i is slot i: the first b slots' span is a view (a gather by slot would copy every
        # row's keys and values each step, tripling the step's memory traffic at large batches)
        out = F.scaled_dot_product_attention(qg, kc[:b, :, :span], vc[:b, :, :span], attn_mask=mask, scale=self.scale)
        out = self.ops.sigmoid_gate(out.reshape(b, self.num_heads * self.head_dim), gate)
        x, h = self.ops.add_norm(layer.post_attention_layernorm, x, layer.self_attn.o_proj(out))
        return self._mlp(layer, gate_up_weight, x, h)

    def start_prefill(self, embeds: torch.Tensor, slots: torch.Tensor):
        """The inputs of a prefill's layers, for R prompts right-padded to T tokens (embeds [R, T, H])
        going into fresh ``slots`` [R] at positions [0, T): each token's position and rotary, no mask
        (None: see ``prefill_layer``) and the slot each token's key and value go to ([R, T])."""
        r, t, _ = embeds.shape
        positions = torch.arange(t, device=embeds.device).view(1, t).expand(r, t)
        return self.ops.rotary(positions), None, slots.view(r, 1).expand(r, t), positions

    def prefill_layer(self, layer, qkv_weight: torch.Tensor, gate_up_weight: torch.Tensor, x: torch.Tensor,
                      rope: tuple[torch.Tensor, torch.Tensor], mask: None, slots: torch.Tensor,
                      positions: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor) -> torch.Tensor:
        """One decoder layer over whole prompts: x [R, T, H] -> [R, T, H], every token's key and
        value written into the layer's cache at (slots, positions) ([R, T] each). Padding positions
        are written too (zeros in, finite out) and lie past each slot's length, where decode steps
        never look and later ones overwrite them. Like ``decode_layer``, R and T are read off
        shapes, so one compiled graph serves every layer and prompt length.

        Attention is plain causal (``is_causal``), no mask tensor (``mask`` is None): prompts are
        right-padded, so every real token comes before its row's padding and causal masking alone
        keeps it from seeing any. Without a mask tensor a fused kernel can run (flash attention on a
        GPU, grouped-query heads included); an explicit [R, 1, T, T] mask forces the math path, which
        materialises every score."""
        r, t, _ = x.shape
        q, gate, k, v = self._qkv(layer, qkv_weight, self.ops.norm(layer.input_layernorm, x), rope, kc, vc, slots,
                                  positions)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale, enable_gqa=self.gqa)
        out = self.ops.sigmoid_gate(out.transpose(1, 2).reshape(r, t, self.num_heads * self.head_dim), gate)
        x, h = self.ops.add_norm(layer.post_attention_layernorm, x, layer.self_attn.o_proj(out))
        return self._mlp(layer, gate_up_weight, x, h)

    def finish_prefill(self, x: torch.Tensor, lengths: torch.Tensor, slots: torch.Tensor, tables: RowTables) -> None:
        """After the layers: each slot's length set to its prompt's, then the final norm of each
        prompt's last token and the sampling of frame 0 (``sample_and_commit``; ``tables`` row i
        is prompt i)."""
        self.cache.lengths[slots] = lengths
        last = x[torch.arange(x.shape[0], device=x.device), lengths - 1]
        self.sample_and_commit(self.ops.norm(self.model.backbone.norm, last), tables)

    def prefill(self, embeds: torch.Tensor, lengths: torch.Tensor, slots: torch.Tensor, tables: RowTables) -> None:
        """Prompts of several requests at once (embeds [R, T, H] right-padded to T, their lengths
        [R] and fresh slots [R], both on the device), then frame 0 of each into ``tables.out``.
        Three parts like ``decode``, each through torch.compile when ``compiled``."""
        parts = self.prefill_parts
        rope, mask, slot_idx, positions = parts.start(embeds, slots)
        x = self._layers(parts, embeds, rope, mask, slot_idx, positions)
        parts.finish(x, lengths, slots, tables)

    # -- sampling ----------------------------------------------------------------------------------
    def sample_and_commit(self, hidden: torch.Tensor, tables: RowTables, count_token: bool = False) -> None:
        """Sample every row, commit the cond rows' frames into the slot state, write ``tables.out``
        (with the fused kernels: ``fused_sample_and_commit``). ``count_token`` (a decode step): each
        real row's slot also counts the token the step wrote into its cache (its length + 1)."""
        if self.ops.fused:
            self.fused_sample_and_commit(hidden, tables, count_token)
            return
        st = self.state
        slots = tables.slot
        logits = self.code_logits(hidden)  # [B, 32, L] float32
        logits = cfg_combine(logits, logits[tables.uncond], tables.cfg_scale)
        logits = repetition_penalty(logits, st.counts[slots] > 0, st.penalty[slots])
        frame = st.frames[slots]
        codes = sample_codes(logits, st.temperature[slots], st.top_k[slots], st.seed[slots], frame)
        self.commit(codes, frame, self.model.heads.stop_logit(hidden), tables, count_token)

    def commit(self, codes: torch.Tensor, frame: torch.Tensor, stop_logits: torch.Tensor, tables: RowTables,
               count_token: bool = False) -> None:
        """Commit the cond rows' sampled codes [B, 32] (``frame`` [B]: each row's frame index) into
        their slots' state, and write ``tables.out``: the codes, the stop decision of
        ``stop_logits`` [B] and the code-range check (eager ops; fused: fused_ops.commit_frames).
        ``count_token``: every real row's slot length + 1."""
        st, slots = self.state, tables.slot
        stop = stop_decision(stop_logits, st.stop_threshold[slots])
        bad = invalid_codes(codes, self.levels)

        # commit (rows that do not commit write the scratch slot, which nothing real reads); codes
        # are clamped into range for the state: a bad code ends its request, but must not index
        # out of bounds meanwhile
        target = torch.where(tables.commit, slots, self.cache.scratch)
        safe = torch.minimum(codes.clamp(min=0), self.levels - 1)
        st.last_codes[target] = safe
        ring = st.ring
        st.history[target, frame % ring] = safe.to(st.history.dtype)
        # counts are updated with scatter_add_ on a flat view (atomic adds: duplicates on the
        # scratch slot are fine, and it is plainly capturable)
        cell = (target.view(-1, 1) * self.channels + self._channel_idx.view(1, -1)) * self.max_level  # [B, 32]
        one = tables.commit.long().view(-1, 1).expand_as(safe)
        flat_counts = st.counts.view(-1)
        flat_counts.scatter_add_(0, (cell + safe).view(-1), one.reshape(-1))
        leaving = frame - st.window[slots]  # the frame that leaves the window (< 0: none yet)
        old = st.history[target, leaving.clamp(min=0) % ring].long()
        flat_counts.scatter_add_(0, (cell + old).view(-1), (-(one * (leaving >= 0).long().view(-1, 1))).reshape(-1))
        st.frames.scatter_add_(0, target, tables.commit.long())

        tables.out[:, :32] = codes
        tables.out[:, OUT_STOP] = stop.long()
        tables.out[:, OUT_BAD] = bad.long()
        if count_token:
            self.cache.lengths.scatter_add_(0, slots, tables.real.long())

    def fused_sample_and_commit(self, hidden: torch.Tensor, tables: RowTables, count_token: bool = False) -> None:
        """``sample_and_commit`` in two kernels and two products: the heads' and the stop head's
        outputs, then every (row, head) sampled (fused_ops.sample_heads: engine.sampling's steps and
        noise) and every row's frame committed with its stop and code-range flags
        (fused_ops.commit_frames), each reading the rows' slots itself."""
        st, heads, slots = self.state, self.model.heads, tables.slot
        codes = fused_ops.sample_heads(F.linear(hidden, self.head_weight, self.head_bias), heads._grid_index,
                                       heads._grid_valid, tables.uncond, tables.cfg_scale, slots, st.counts, st.penalty,
                                       st.temperature, st.top_k, st.seed, st.frames)
        self.fused_commit(codes, heads.stop_head(hidden), tables, count_token)

    def fused_commit(self, codes: torch.Tensor, stop_logits: torch.Tensor, tables: RowTables,
                     count_token: bool = False) -> None:
        """``commit`` as one kernel (fused_ops.commit_frames), which reads each row's frame index
        itself and, with ``count_token``, adds each real row's token to its slot's length."""
        st = self.state
        fused_ops.commit_frames(codes, stop_logits, self.levels, tables.slot, tables.commit, self.cache.scratch,
                                st.stop_threshold, st.frames, st.window, st.last_codes, st.history, st.counts, tables.out,
                                lengths=self.cache.lengths if count_token else None, real=tables.real)

    def finish_decode(self, x: torch.Tensor, tables: RowTables) -> None:
        """After the layers: the final norm, then sampling and commit (``sample_and_commit``), which
        also counts the new token in each real row's slot."""
        hidden = self.ops.norm(self.model.backbone.norm, x)
        self.sample_and_commit(hidden, tables, count_token=True)

    def decode(self, tables: RowTables, span: int) -> None:
        """The whole fixed-shape decode step for one (bucket, span); capturable. Three parts, each
        through torch.compile when ``compiled``: the inputs, the layers (one call per layer), the
        sampling."""
        parts = self.decode_parts
        x, pos, rope, mask = parts.start(tables, span)
        parts.finish(self._layers(parts, x, rope, mask, tables.slot, pos), tables)

    def _layers(self, parts: StepParts, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                mask: Optional[torch.Tensor], slots: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Every decoder layer in turn (``parts.layer``), with that layer's fused weights and cache."""
        cache = self.cache
        for i, (layer, w) in enumerate(zip(self.model.backbone.layers, self.weights)):
            x = parts.layer(layer, w.qkv, w.gate_up, x, rope, mask, slots, positions, cache.keys[i], cache.values[i])
        return x

    def move_slots(self, src: list[int], dst: list[int], positions: int) -> None:
        """Move requests from slots ``src`` to free slots ``dst``: their cached keys and values (the
        first ``positions``), lengths and sampling state. Not captured: it runs between steps."""
        self.cache.move(src, dst, positions)
        self.state.move(src, dst)

    def clear(self) -> None:
        self.cache.clear()
        self.state.clear()


__all__ = ["DeviceStep", "HostRows", "RowTables", "SlotState", "StepParts", "OUT_BAD", "OUT_STOP"]
