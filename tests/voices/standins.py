"""Small but real stand-ins for the codec encoder and the reference compressor, for tests.

``EnergyEncoder`` is a CodecEncoder: mono float32 @ 22050 Hz -> unfolded codes [32, T] int64,
one frame per 1024 samples, digits derived from each frame's energy and zero-crossing rate.
``QueryPoolCompressor`` maps ref_codes [T, 32] -> prefix [8, hidden] float32 with torch ops
(FSQ dequantise, a seeded projection, attention pooling by 8 learned-looking queries).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from codec_worker.fsq import channel_levels, dequantize
from codec_worker.interface import CodecEncoder

SAMPLES_PER_FRAME = 1024


class EnergyEncoder(CodecEncoder):
    sample_rate_hz = 22050

    def __init__(self) -> None:
        self.calls = 0

    async def encode(self, audio: np.ndarray) -> torch.Tensor:
        self.calls += 1
        return energy_codes(audio)


def energy_codes(audio: np.ndarray) -> torch.Tensor:
    """EnergyEncoder's codes [32, T] int64 for mono float32 ``audio`` (blocking; any thread)."""
    if audio.ndim != 1 or audio.dtype != np.float32:
        raise ValueError(f"expected mono float32 audio, got {audio.shape} {audio.dtype}")
    frames = math.ceil(len(audio) / SAMPLES_PER_FRAME)
    padded = np.zeros(frames * SAMPLES_PER_FRAME, np.float32)
    padded[: len(audio)] = audio
    x = torch.from_numpy(padded).reshape(frames, SAMPLES_PER_FRAME)  # [T, 1024]
    energy = (x.square().mean(dim=1) + 1e-10).log10().add(10).div(10).clamp(0, 1)  # [T] in [0, 1]
    zcr = (x[:, 1:].sign() != x[:, :-1].sign()).float().mean(dim=1)  # [T] in [0, 1]
    levels = torch.tensor(channel_levels(), dtype=torch.float32)  # [32]
    phase = torch.arange(32, dtype=torch.float32) / 32  # [32]
    mix = (energy[None, :] * (1 - phase[:, None]) + zcr[None, :] * phase[:, None])  # [32, T]
    return torch.minimum((mix * levels[:, None]).floor(), levels[:, None] - 1).long()  # [32, T]


class QueryPoolCompressor:
    def __init__(self, hidden: int = 16, num_queries: int = 8, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.proj = torch.randn(32, hidden, generator=gen) / math.sqrt(32)  # [32, hidden]
        self.queries = torch.randn(num_queries, hidden, generator=gen)  # [K, hidden]
        self.calls = 0

    def __call__(self, ref_codes: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if ref_codes.dim() != 2 or ref_codes.shape[1] != 32:
            raise ValueError(f"expected ref_codes [T, 32], got {tuple(ref_codes.shape)}")
        x = dequantize(ref_codes.T).T.float() @ self.proj  # [T, 32] -> [T, hidden]
        pos = torch.arange(x.shape[0], dtype=torch.float32)[:, None] / 100.0
        x = x + torch.sin(pos * torch.arange(1, x.shape[1] + 1))  # cheap positional signal
        attn = torch.softmax(self.queries @ x.T / math.sqrt(x.shape[1]), dim=-1)  # [K, T]
        return attn @ x  # [K, hidden]
