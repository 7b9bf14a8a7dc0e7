"""NanoCodec's finite-scalar-quantisation code space, in the model's channel order.

NanoCodec 1.89 kbps has 8 groups; each group's packed token k in [0, 2016) is a little-endian
mixed-radix number over the levels L = [8, 7, 6, 6] (bases [1, 8, 56, 336]). Gepard predicts the
*unfolded* digits: channel ``4*g + d`` holds digit d of group g. The decoder consumes the
dequantised digits ``(c - L//2) / (L//2)`` as a [B, 32, T] float tensor.

    unfold: packed [..., 8, T] -> codes [..., 32, T]
    fold:   codes  [..., 32, T] -> packed [..., 8, T]
    dequantize: codes [..., 32, T] -> latents [..., 32, T] float32 in [-1, 1]
"""

from __future__ import annotations

from typing import Sequence

import torch

FSQ_LEVELS: tuple[int, ...] = (8, 7, 6, 6)
NUM_GROUPS = 8
NUM_CHANNELS = NUM_GROUPS * len(FSQ_LEVELS)  # 32
CODEBOOK_SIZE = 8 * 7 * 6 * 6  # 2016 packed codes per group


def channel_levels(levels: Sequence[int] = FSQ_LEVELS, num_groups: int = NUM_GROUPS) -> list[int]:
    """Levels of each of the 32 channels, in channel order: [8, 7, 6, 6] * 8."""
    return list(levels) * num_groups


def _bases(levels: Sequence[int]) -> list[int]:
    bases, acc = [], 1
    for level in levels:
        bases.append(acc)
        acc *= level
    return bases


def unfold(packed: torch.Tensor, levels: Sequence[int] = FSQ_LEVELS) -> torch.Tensor:
    """Packed group tokens [..., G, T] -> digit codes [..., G*len(levels), T] (int64)."""
    packed = packed.long()
    digits = [(packed // base) % level for base, level in zip(_bases(levels), levels)]
    # [..., G, D, T] -> [..., G*D, T] so that channel = D*g + d
    stacked = torch.stack(digits, dim=-2)
    return stacked.reshape(*packed.shape[:-2], packed.shape[-2] * len(levels), packed.shape[-1])


def fold(codes: torch.Tensor, levels: Sequence[int] = FSQ_LEVELS) -> torch.Tensor:
    """Digit codes [..., G*D, T] -> packed group tokens [..., G, T] (int64)."""
    d = len(levels)
    if codes.shape[-2] % d:
        raise ValueError(f"expected a channel count divisible by {d}, got shape {tuple(codes.shape)}")
    grouped = codes.long().reshape(*codes.shape[:-2], codes.shape[-2] // d, d, codes.shape[-1])
    packed = torch.zeros_like(grouped[..., 0, :])
    for i, base in enumerate(_bases(levels)):
        packed = packed + grouped[..., i, :] * base
    return packed


def dequantize(codes: torch.Tensor, levels: Sequence[int] = FSQ_LEVELS) -> torch.Tensor:
    """Digit codes [..., G*D, T] -> decoder latents [..., G*D, T] float32: (c - L//2) / (L//2)."""
    d = len(levels)
    half = torch.tensor([level // 2 for level in levels], dtype=torch.float32, device=codes.device)
    half = half.repeat(codes.shape[-2] // d).unsqueeze(-1)  # [G*D, 1]
    return (codes.float() - half) / half


def validate_codes(codes: torch.Tensor, levels: Sequence[int] = FSQ_LEVELS) -> None:
    """Raise ValueError naming the first channel whose codes fall outside [0, L)."""
    if codes.dim() < 2 or codes.shape[-2] != NUM_GROUPS * len(levels):
        raise ValueError(f"expected codes [{NUM_GROUPS * len(levels)}, T], got shape {tuple(codes.shape)}")
    limits = torch.tensor(channel_levels(levels), device=codes.device).unsqueeze(-1)
    bad = (codes < 0) | (codes >= limits)
    if bool(bad.any()):
        channel = int(bad.nonzero()[0][-2])
        raise ValueError(f"code out of range on channel {channel} (levels {channel_levels(levels)[channel]})")
