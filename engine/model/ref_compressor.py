"""Voice-cloning compressor (Q-Former, spec 5.2): reference codes [T, 32] -> speaker prefix [K, H].

    x = dequantize(ref_codes)                      # [B, T, 32] in [-1, 1], float32
    x = input_proj(x) + sinusoidal_pe(T)           # [B, T, D]
    q = queries                                    # [B, K, D], no position encoding
    2 x (pre-norm):  q += SelfAttn(norm(q));  q += CrossAttn(norm(q), x, key_padding_mask);
                     q += SwiGLU(norm(q))
    prefix = output_scale * final_norm(q)          # [B, K, D]

Its RMSNorm is the *plain* kind (``x * rsqrt(mean x^2 + 1e-6)`` in float32, cast back, times w),
not the backbone's (1 + w) form (spec pitfall 3). Dropout is a training-only concern (eval mode).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from codec_worker.fsq import dequantize
from engine.config import CompressorConfig


class PlainRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
        return normed * self.weight


class MultiHeadAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"d_model {dim} is not divisible by num_heads {heads}")
        self.heads = heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.out_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, q_in: torch.Tensor, kv_in: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """q_in [B, Q, D], kv_in [B, S, D], key_mask [B, S] (True = real key) -> [B, Q, D]."""
        b, nq, d = q_in.shape
        hd = d // self.heads

        def split(x: torch.Tensor) -> torch.Tensor:
            return x.view(b, x.shape[1], self.heads, hd).transpose(1, 2)

        q, k, v = split(self.q_proj(q_in)), split(self.k_proj(kv_in)), split(self.v_proj(kv_in))
        mask = None if key_mask is None else key_mask[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(out.transpose(1, 2).reshape(b, nq, d))


class SwiGLUFFN(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class CompressorBlock(nn.Module):
    def __init__(self, dim: int, heads: int, ffn_hidden: int) -> None:
        super().__init__()
        self.norm_self = PlainRMSNorm(dim)
        self.self_attn = MultiHeadAttention(dim, heads)
        self.norm_cross = PlainRMSNorm(dim)
        self.cross_attn = MultiHeadAttention(dim, heads)
        self.norm_ffn = PlainRMSNorm(dim)
        self.ffn = SwiGLUFFN(dim, ffn_hidden)

    def forward(self, q: torch.Tensor, ref: torch.Tensor, ref_mask: torch.Tensor | None) -> torch.Tensor:
        h = self.norm_self(q)
        q = q + self.self_attn(h, h)
        q = q + self.cross_attn(self.norm_cross(q), ref, ref_mask)
        return q + self.ffn(self.norm_ffn(q))


def sinusoidal_positions(length: int, dim: int, device: torch.device | None = None) -> torch.Tensor:
    """Standard transformer PE: sin on even dims, cos on odd dims, base 10000. -> [length, dim]."""
    pos = torch.arange(length, dtype=torch.float32, device=device).unsqueeze(1)
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32, device=device) * (-math.log(10000.0) / dim))
    pe = torch.zeros(length, dim, device=device)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div[: dim // 2])
    return pe


class RefCompressor(nn.Module):
    def __init__(self, cfg: CompressorConfig, num_channels: int = 32) -> None:
        super().__init__()
        d = cfg.d_model
        self.input_proj = nn.Linear(num_channels, d)
        self.queries = nn.Parameter(torch.zeros(cfg.num_queries, d))
        self.blocks = nn.ModuleList(
            [CompressorBlock(d, cfg.num_heads, cfg.ffn_hidden_size_multiplier * d) for _ in range(cfg.num_layers)]
        )
        self.final_norm = PlainRMSNorm(d)
        self.output_scale = nn.Parameter(torch.ones(1), requires_grad=False)

    def forward(self, ref_codes: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """ref_codes [B, T, 32] int64 (unfolded) -> prefix [B, K, D]."""
        b, t, _ = ref_codes.shape
        param = self.input_proj.weight
        x = dequantize(ref_codes.transpose(1, 2)).transpose(1, 2).to(param.dtype)  # fp32 math, then module dtype
        x = self.input_proj(x) + sinusoidal_positions(t, param.shape[0], param.device).to(param.dtype)
        mask = None
        if lengths is not None:
            mask = torch.arange(t, device=param.device)[None, :] < lengths.to(param.device)[:, None]
        q = self.queries.unsqueeze(0).expand(b, -1, -1)
        for block in self.blocks:
            q = block(q, x, mask)
        return self.output_scale * self.final_norm(q)
