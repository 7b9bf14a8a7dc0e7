"""Gepard's audio overlay on the backbone: frame embedding (feedback path) and output heads.

Both backends use these modules, so the torch reference and the vLLM model compute the same thing.

Frame embedding (spec 2.2), codes c [B, 32] -> x_audio [B, H]:
    u = cat_k audio_embeddings[k](c_k)            # [B, 32 * E]
    z = Linear2(GELU_erf(Linear1(u)))             # audio_embed_proj.0 / .2
    x_audio = LayerNorm_no_affine(z, eps=1e-5) * audio_embed_scale

Heads (spec 2.3) read the post-final-norm hidden state h [B, H]:
    logits_k = codebook_heads[k](h)  (L_k values each, 216 in all), stop = stop_head(h) (a logit).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn


def level_offsets(levels: Sequence[int]) -> list[int]:
    """Start of each channel's codes in a flat table: [0, 8, 15, 21, 27, ...]."""
    return [sum(levels[:k]) for k in range(len(levels))]


class FrameEmbedder(nn.Module):
    def __init__(self, levels: Sequence[int], embed_dim: int, hidden: int) -> None:
        super().__init__()
        self.levels = tuple(levels)
        self.audio_embeddings = nn.ModuleList([nn.Embedding(level, embed_dim) for level in self.levels])
        self.audio_embed_proj = nn.Sequential(
            nn.Linear(len(self.levels) * embed_dim, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.LayerNorm(hidden, eps=1e-5, elementwise_affine=False),
        )
        self.audio_embed_scale = nn.Parameter(torch.ones(1), requires_grad=False)
        # Offsets into one flat table make the 32 lookups a single gather (no Python loop per step).
        self.register_buffer("_offsets", torch.tensor(level_offsets(self.levels), dtype=torch.long), persistent=False)

    def flat_table(self) -> torch.Tensor:
        """All 32 embedding tables stacked: [sum(L), E]."""
        return torch.cat([emb.weight for emb in self.audio_embeddings], dim=0)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [..., 32] int64 -> [..., H]."""
        flat = F.embedding(codes + self._offsets, self.flat_table())  # [..., 32, E]
        u = flat.flatten(-2)
        return self.audio_embed_proj(u) * self.audio_embed_scale


class AudioHeads(nn.Module):
    def __init__(self, levels: Sequence[int], hidden: int) -> None:
        super().__init__()
        self.levels = tuple(levels)
        self.codebook_heads = nn.ModuleList([nn.Linear(hidden, level) for level in self.levels])
        self.stop_head = nn.Linear(hidden, 1)
        self.max_level = max(self.levels)
        # Map from the fused [216] logits to a padded [32, max_level] grid; padding gets -inf.
        index, valid = [], []
        start = 0
        for level in self.levels:
            index.append([start + min(j, level - 1) for j in range(self.max_level)])
            valid.append([j < level for j in range(self.max_level)])
            start += level
        self.register_buffer("_grid_index", torch.tensor(index, dtype=torch.long), persistent=False)
        self.register_buffer("_grid_valid", torch.tensor(valid, dtype=torch.bool), persistent=False)

    def fused_weight(self) -> tuple[torch.Tensor, torch.Tensor]:
        weight = torch.cat([head.weight for head in self.codebook_heads], dim=0)
        bias = torch.cat([head.bias for head in self.codebook_heads], dim=0)
        return weight, bias

    def code_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [B, H] -> logits [B, 32, max_level] float32 with -inf where j >= L_k."""
        weight, bias = self.fused_weight()
        fused = F.linear(hidden, weight, bias).float()  # [B, 216]
        grid = fused[:, self._grid_index]  # [B, 32, max_level]
        return grid.masked_fill(~self._grid_valid, float("-inf"))

    def stop_logit(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [B, H] -> [B] float32 stop logits (sigmoid gives the stop probability)."""
        return self.stop_head(hidden).float().squeeze(-1)
