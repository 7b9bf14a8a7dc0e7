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
from typing import Sequence

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


NOISE_BITS = 24
# The extreme 24-bit values map to these (float32) uniforms. (v + 0.5) / 2**24 is exact for every v
# except the largest, where float32 rounds 2**24 - 0.5 up to 2**24, i.e. u = 1.0 and Gumbel noise
# +inf (then NaN on a -inf padding cell, which argmax picks). The largest float32 below 1 keeps it
# finite and changes nothing for the other 2**24 - 1 values.
NOISE_MIN = 0.5 / (1 << NOISE_BITS)  # 2**-25
NOISE_MAX = 1.0 - 1.0 / (1 << NOISE_BITS)  # 1 - 2**-24, the largest float32 below 1


def noise_bits(seeds: torch.Tensor, steps: torch.Tensor, channels: int, levels: int) -> torch.Tensor:
    """The 24-bit hash values [B, channels, levels] int64 behind ``uniform_noise``."""
    device = seeds.device
    ch = torch.arange(channels, device=device, dtype=torch.int64).view(1, channels, 1)
    code = torch.arange(levels, device=device, dtype=torch.int64).view(1, 1, levels)
    key = (steps.view(-1, 1, 1).to(torch.int64) * channels + ch) * levels + code
    h = mix64(mix64(seeds.view(-1, 1, 1).to(torch.int64)) + key)
    return _shr(h, 64 - NOISE_BITS)


def bits_to_uniform(bits: torch.Tensor) -> torch.Tensor:
    """24-bit values -> float32 uniforms strictly inside (0, 1): [2**-25, 1 - 2**-24]."""
    return ((bits.to(torch.float32) + 0.5) / float(1 << NOISE_BITS)).clamp(NOISE_MIN, NOISE_MAX)


def uniform_noise(seeds: torch.Tensor, steps: torch.Tensor, channels: int, levels: int) -> torch.Tensor:
    """Uniform (0, 1) noise [B, channels, levels], a pure function of (seed, step, channel, code)."""
    return bits_to_uniform(noise_bits(seeds, steps, channels, levels))


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
    return gumbel_argmax(top_k_mask(logits, top_k), temperature, uniform_noise(seeds, steps, logits.shape[1], logits.shape[2]))


def gumbel_argmax(logits: torch.Tensor, temperature: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """argmax(logits / T + Gumbel(u)) per head; codes [B, C] int64, -1 for a head with no candidate.

    Only finite logits are candidates: a padding cell (-inf, code >= the channel's level count)
    or a cell masked by top-k can never win, whatever the noise or temperature (-inf + inf is NaN,
    and argmax picks NaN). A head with no finite logit at all (a broken forward pass) gets -1, which
    the caller's code-range check turns into a per-request error.
    """
    greedy = (temperature <= 0).view(-1, 1, 1)
    temp = torch.where(greedy, torch.ones_like(temperature.view(-1, 1, 1)), temperature.view(-1, 1, 1).to(logits.dtype))
    gumbel = -torch.log(-torch.log(u))
    scores = logits / temp + torch.where(greedy, torch.zeros_like(gumbel), gumbel)
    candidate = torch.isfinite(logits) & ~torch.isnan(scores)
    codes = torch.where(candidate, scores, float("-inf")).argmax(dim=-1)
    return torch.where(candidate.any(dim=-1), codes, -1)


def invalid_codes(codes: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """[B] bool: rows with a code outside [0, L_k) on some channel k; codes [B, C], levels [C].

    Checked before a frame is fed back: on the last channel such a code indexes past the audio
    embedding table, elsewhere it reaches the codec, which rejects it.
    """
    return ((codes < 0) | (codes >= levels.to(codes.device).view(1, -1))).any(dim=-1)


def describe_invalid_code(codes: torch.Tensor, levels: Sequence[int]) -> str:
    """The first bad code of one frame [C]: "sampled code 7 on channel 31 outside [0, 6)"."""
    for channel, (code, level) in enumerate(zip(codes.tolist(), levels)):
        if not 0 <= code < level:
            return f"sampled code {code} on channel {channel} outside [0, {level})"
    return "no invalid code"


def stop_decision(stop_logits: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """[B] bool: sigmoid(stop logit) > threshold (spec 4.1)."""
    return torch.sigmoid(stop_logits.float()) > threshold.to(torch.float32)


def seen_mask(history: torch.Tensor, levels: int) -> torch.Tensor:
    """history [B, W, C] int64 with -1 for empty slots -> [B, C, levels] bool 'seen in window'."""
    valid = history >= 0
    onehot = torch.nn.functional.one_hot(history.clamp(min=0), levels).bool() & valid.unsqueeze(-1)
    return onehot.any(dim=1)
