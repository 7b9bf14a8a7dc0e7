"""Fixtures for the codec tests: one tiny random codec written and loaded once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from codec_worker import fsq


@pytest.fixture(scope="session")
def codec_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from codec_worker.tiny import write_random_codec

    return write_random_codec(tmp_path_factory.mktemp("codec") / "tiny.nemo", size="tiny", seed=0)


@pytest.fixture(scope="session")
def codec(codec_path: Path):
    from codec_worker.nanocodec import NanoCodec

    return NanoCodec.load(codec_path)


def random_codes(frames: int, batch: int | None = None, seed: int = 0) -> torch.Tensor:
    """Uniform random unfolded codes [32, frames] (or [batch, 32, frames]) int64."""
    generator = torch.Generator().manual_seed(seed)
    shape = (batch or 1, frames)
    codes = torch.stack([torch.randint(0, level, shape, generator=generator) for level in fsq.channel_levels()], dim=1)
    return codes if batch is not None else codes[0]
