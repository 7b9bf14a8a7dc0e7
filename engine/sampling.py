"""Frame sampling shared by both backends: vectorised over rows, reproducible per request.

Per head and in float32 (spec 4.1): CFG combine -> repetition penalty -> / temperature -> top-k ->
sample. Sampling is Gumbel-max (``argmax(logits / T + g)``), which draws exactly from
``softmax(logits / T)``. The Gumbel noise comes from a counter-based hash of
(seed, frame index, channel, code) instead of a stateful generator, so a request's frames depend
only on its own seed and logits: the same seed gives the same frames whether the request runs alone
or in any batch, on either backend, with no per-request generator objects and no Python loop.
"""

from __future__ import annotations

import os

import torch

_MASK64 = (1 << 64) - 1


def _i64(value: int) -> int:
    """An unsigned 64-bit constant as the int64 torch stores (two's complement)."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN = _i64(0x9E3779B97F4A7C15)
_MIX1 = _i64(0xBF58476D1CE4E5B9)
_MIX2 = _i64(0x94D049BB133111EB)


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def mix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64 finaliser on int64 tensors (wrapping arithmetic)."""
    z = x + _GOLDEN
    z = (z ^ _shr(z, 30)) * _MIX1
    z = (z ^ _shr(z, 27)) * _MIX2
    return z ^ _shr(z, 31)


def new_seed() -> int:
    """A random 63-bit seed for requests that did not ask for one."""
    return int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)


def uniform_noise(seeds: torch.Tensor, steps: torch.Tensor, channels: int, levels: int) -> torch.Tensor:
    """Uniform (0, 1) noise [B, channels, levels], a pure function of (seed, step, channel, code)."""
    device = seeds.device
    ch = torch.arange(channels, device=device, dtype=torch.int64).view(1, channels, 1)
    code = torch.arange(levels, device=device, dtype=torch.int64).view(1, 1, levels)
    key = (steps.view(-1, 1, 1).to(torch.int64) * channels + ch) * levels + code
    h = mix64(mix64(seeds.view(-1, 1, 1).to(torch.int64)) + key)
    return (_shr(h, 40).to(torch.float32) + 0.5) / float(1 << 24)


def cfg_combine(cond: torch.Tensor, uncond: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """uncond + w * (cond - uncond) per row; logits [B, C, L], scale [B]."""
    w = scale.view(-1, 1, 1).to(cond.dtype)
    out = uncond + w * (cond - uncond)
    # keep padding columns at -inf (inf - inf would give nan)
    return torch.where(torch.isinf(cond), cond, out)


def repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """Penalise codes seen in the recent window: positive logits / p, negative logits * p.

    logits [B, C, L]; seen [B, C, L] bool; penalty [B] (1.0 = off).
    """
    p = penalty.view(-1, 1, 1).to(logits.dtype)
    penalised = torch.where(logits > 0, logits / p, logits * p)
    return torch.where(seen & (p != 1.0), penalised, logits)


def top_k_mask(logits: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Keep the k best codes of every head (k <= 0 keeps all); top_k [B] int64."""
    levels = logits.shape[-1]
    k = top_k.view(-1, 1, 1).to(torch.int64)
    ordered = logits.sort(dim=-1, descending=True).values
    kth = ordered.gather(-1, (k.clamp(1, levels) - 1).expand(-1, logits.shape[1], 1))
    masked = logits.masked_fill(logits < kth, float("-inf"))
    return torch.where((k > 0) & (k < levels), masked, logits)


def sample_codes(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
) -> torch.Tensor:
    """Sample one code per head: logits [B, C, L] float32 -> codes [B, C] int64.

    temperature [B] (<= 0 means greedy), top_k [B], seeds [B] int64, steps [B] int64 (frame index
    within the request, so every frame draws fresh noise).
    """
    logits = top_k_mask(logits, top_k)
    greedy = (temperature <= 0).view(-1, 1, 1)
    temp = torch.where(greedy, torch.ones_like(temperature.view(-1, 1, 1)), temperature.view(-1, 1, 1).to(logits.dtype))
    u = uniform_noise(seeds, steps, logits.shape[1], logits.shape[2])
    gumbel = -torch.log(-torch.log(u))
    scores = logits / temp + torch.where(greedy, torch.zeros_like(gumbel), gumbel)
    return scores.argmax(dim=-1)


def stop_decision(stop_logits: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """[B] bool: sigmoid(stop logit) > threshold (spec 4.1)."""
    return torch.sigmoid(stop_logits.float()) > threshold.to(torch.float32)


def seen_mask(history: torch.Tensor, levels: int) -> torch.Tensor:
    """history [B, W, C] int64 with -1 for empty slots -> [B, C, levels] bool 'seen in window'."""
    valid = history >= 0
    onehot = torch.nn.functional.one_hot(history.clamp(min=0), levels).bool() & valid.unsqueeze(-1)
    return onehot.any(dim=1)
