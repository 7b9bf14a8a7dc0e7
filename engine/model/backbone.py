"""Qwen3.5 full-attention text backbone in plain PyTorch, with a batched KV cache.

Matches transformers' ``modeling_qwen3_5`` for ``layer_types == full_attention`` (spec 1.3):
- RMSNorm is zero-centred: ``y = x * rsqrt(mean(x^2) + eps) * (1 + w)``, computed in float32;
- attention is gated: ``q_proj`` emits ``[heads, 2 * head_dim]`` per token, split per head into
  ``query | gate`` (interleaved per head); q_norm/k_norm (zero-centred RMSNorm over head_dim) then
  rotary embedding (rotate-half, ``cat(freqs, freqs)``, full rotary), SDPA with scale
  ``1/sqrt(head_dim)``, then ``out * sigmoid(gate)`` before ``o_proj``;
- pre-norm decoder layers with a SwiGLU MLP, and a final norm.

Tensor names follow the checkpoint (``model.layers.{i}.self_attn.q_proj.weight`` ...) once the
module is mounted as ``model``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import BackboneConfig


class ZeroCenteredRMSNorm(nn.Module):
    """RMSNorm with a (1 + w) gain; ``w`` is stored as in the checkpoint (zeros = identity gain)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (1.0 + self.weight.float())).to(x.dtype)


class RotaryEmbedding(nn.Module):
    """NeoX-style rotary embedding over the first ``rotary_dim`` dims of each head (1-D positions)."""

    def __init__(self, rotary_dim: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)
        self.rotary_dim = rotary_dim

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [...] int -> cos, sin [..., rotary_dim] float32."""
        freqs = positions.float().unsqueeze(-1) * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [B, heads, T, head_dim]; cos/sin [B, T, rotary_dim]."""
        rot = self.rotary_dim
        xr, xp = x[..., :rot], x[..., rot:]
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        half = rot // 2
        rotated = torch.cat((-xr[..., half:], xr[..., :half]), dim=-1)
        out = (xr.float() * cos + rotated.float() * sin).to(x.dtype)
        return torch.cat((out, xp), dim=-1) if xp.shape[-1] else out


@dataclass
class KVCache:
    """Per-layer key/value storage for up to ``rows`` sequences.

    keys/values: [layers] of [rows, kv_heads, capacity, head_dim]. ``lengths[r]`` tokens of row r
    are valid. Rows are managed by the caller (the torch engine keeps active rows compacted at the
    front so a batch is a view, not a gather).
    """

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    lengths: torch.Tensor  # [rows] int64, on CPU

    @classmethod
    def allocate(cls, cfg: BackboneConfig, rows: int, capacity: int, device: torch.device, dtype: torch.dtype) -> "KVCache":
        shape = (rows, cfg.num_key_value_heads, capacity, cfg.head_dim)
        keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_hidden_layers)]
        values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_hidden_layers)]
        return cls(keys, values, torch.zeros(rows, dtype=torch.int64))

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    @property
    def rows(self) -> int:
        return self.keys[0].shape[0]

    def grow(self, rows: int | None = None, capacity: int | None = None) -> None:
        """Reallocate to at least ``rows`` x ``capacity``, keeping the contents."""
        new_rows = max(rows or 0, self.rows)
        new_cap = max(capacity or 0, self.capacity)
        if new_rows == self.rows and new_cap == self.capacity:
            return
        for store in (self.keys, self.values):
            for i, old in enumerate(store):
                new = old.new_zeros((new_rows, old.shape[1], new_cap, old.shape[3]))
                new[: old.shape[0], :, : old.shape[2]] = old
                store[i] = new
        lengths = torch.zeros(new_rows, dtype=torch.int64)
        lengths[: self.lengths.shape[0]] = self.lengths
        self.lengths = lengths

    def move_row(self, src: int, dst: int) -> None:
        """Copy row ``src`` into row ``dst`` (used to keep active rows compacted)."""
        n = int(self.lengths[src])
        for store in (self.keys, self.values):
            for t in store:
                t[dst, :, :n] = t[src, :, :n]
        self.lengths[dst] = n
        self.lengths[src] = 0


class GatedAttention(nn.Module):
    def __init__(self, cfg: BackboneConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        h = cfg.hidden_size
        self.q_proj = nn.Linear(h, self.num_heads * self.head_dim * 2, bias=False)
        self.k_proj = nn.Linear(h, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=False)
        self.q_norm = ZeroCenteredRMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.scale = 1.0 / math.sqrt(self.head_dim)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        rope: RotaryEmbedding,
        cache_k: torch.Tensor,
        cache_v: torch.Tensor,
        rows: torch.Tensor | slice,
        starts: torch.Tensor,
        attn_mask: torch.Tensor,
    ) -> torch.Tensor:
        """x [B, T, H] for ``B`` cache rows whose new tokens start at ``starts`` [B].

        The new keys/values are written into the cache, then the queries attend to cache positions
        ``[0, starts + T)`` through ``attn_mask`` [B, 1, T, S] (True = attend).
        """
        b, t, _ = x.shape
        qg = self.q_proj(x).view(b, t, self.num_heads, 2 * self.head_dim)
        q, gate = qg[..., : self.head_dim], qg[..., self.head_dim :]
        k = self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim)
        q = rope.apply(self.q_norm(q).transpose(1, 2), cos, sin)  # [B, nh, T, hd]
        k = rope.apply(self.k_norm(k).transpose(1, 2), cos, sin)  # [B, nkv, T, hd]
        v = v.transpose(1, 2)

        # write the new keys/values at [starts, starts + T) of each row
        span = attn_mask.shape[-1]
        if t == 1:
            row_idx = torch.arange(b) if isinstance(rows, slice) else rows
            if isinstance(rows, slice):
                row_idx = row_idx + (rows.start or 0)
            cache_k[row_idx, :, starts] = k[:, :, 0]
            cache_v[row_idx, :, starts] = v[:, :, 0]
        else:
            for i in range(b):  # prefill: a handful of rows, each a contiguous span
                r = int(rows[i]) if not isinstance(rows, slice) else (rows.start or 0) + i
                s = int(starts[i])
                cache_k[r, :, s : s + t] = k[i]
                cache_v[r, :, s : s + t] = v[i]
        keys = cache_k[rows, :, :span]
        values = cache_v[rows, :, :span]
        out = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=attn_mask, scale=self.scale, enable_gqa=self.num_heads != self.num_kv_heads
        )  # [B, nh, T, hd]
        out = out.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim)
        out = out * torch.sigmoid(gate.reshape(b, t, -1))
        return self.o_proj(out)


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: BackboneConfig) -> None:
        super().__init__()
        self.self_attn = GatedAttention(cfg)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Qwen35Backbone(nn.Module):
    """Embeddings + decoder layers + final norm; no LM head (Gepard drops it)."""

    def __init__(self, cfg: BackboneConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary = RotaryEmbedding(cfg.rotary_dim, cfg.rope_theta)

    def forward(
        self,
        inputs_embeds: torch.Tensor,
        cache: KVCache,
        rows: torch.Tensor | slice,
        starts: torch.Tensor,
    ) -> torch.Tensor:
        """Run new tokens through the backbone, appending them to the cache.

        inputs_embeds: [B, T, H] (T new tokens for each of B rows; all rows get T tokens).
        rows: cache rows of the batch (a slice keeps the cache access a view).
        starts: [B] int64 position of the first new token of each row (= tokens already cached).
        Returns the final-normed hidden states [B, T, H].
        """
        b, t, _ = inputs_embeds.shape
        device = inputs_embeds.device
        starts_dev = starts.to(device)
        positions = starts_dev.unsqueeze(1) + torch.arange(t, device=device)  # [B, T]
        cos, sin = self.rotary.cos_sin(positions)
        span = int((starts + t).max())
        if span > cache.capacity:
            raise RuntimeError(f"KV cache capacity {cache.capacity} < needed {span}; grow() it first")
        key_pos = torch.arange(span, device=device)
        # causal within the new tokens, and only the row's own valid prefix
        attn_mask = (key_pos.view(1, 1, 1, span) <= positions.view(b, 1, t, 1))
        x = inputs_embeds
        for i, layer in enumerate(self.layers):
            h = layer.self_attn(
                layer.input_layernorm(x), cos, sin, self.rotary, cache.keys[i], cache.values[i], rows, starts_dev, attn_mask
            )
            x = x + h
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        row_ids = torch.arange(b) + (rows.start or 0) if isinstance(rows, slice) else rows.cpu()
        cache.lengths[row_ids] = starts + t
        return self.norm(x)
