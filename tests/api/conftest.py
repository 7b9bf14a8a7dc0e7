"""Gateway fixtures: a tiny checkpoint with its codec, and one live server shared by a session."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from api.app import DEFAULT_VOICE_ID
from api.settings import Settings
from tests.api.live import LiveServer

RAW_S16_16K = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}


@pytest.fixture(scope="session")
def tiny_ckpt_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random Gepard + NanoCodec; every request stops after 24 frames (24 * 1024 samples)."""
    from engine.tiny import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-ckpt"), size="tiny", seed=0, with_codec=True)


def gateway_settings(model_dir: Path, data_dir: Path, **overrides) -> Settings:
    """Settings for a test gateway. Load-aware admission is off: functional tests run beside other
    load on a shared machine and must not be refused by it (tests/api/routes/test_admission.py
    turns it on where it is the subject)."""
    base = dict(model=str(model_dir), backend="torch", device="cpu", dtype="float32", data_dir=data_dir,
                redis_url=None, admit_max_saturation=0.0)
    base.update(overrides)
    return Settings(**base)


@pytest.fixture(scope="session")
def gateway(tiny_ckpt_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """One real uvicorn server with the default settings (auth off, embedded voice store)."""
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("gateway-data"))
    with LiveServer(settings) as server:
        yield server


@pytest.fixture
def default_voice_id() -> str:
    return DEFAULT_VOICE_ID


@pytest.fixture
def context_id() -> str:
    return str(uuid.uuid4())
