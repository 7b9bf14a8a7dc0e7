"""Gateway fixtures (the tiny checkpoint with its codec and the session's live gateway are in
tests/conftest.py, so every test folder shares one of each)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from api.settings import Settings

RAW_S16_16K = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}


def gateway_settings(model_dir: Path, data_dir: Path, **overrides) -> Settings:
    """Settings for a test gateway. Load-aware admission is off: functional tests run beside other
    load on a shared machine and must not be refused by it (tests/api/routes/test_admission.py
    turns it on where it is the subject)."""
    base = dict(model=str(model_dir), backend="torch", device="cpu", dtype="float32", data_dir=data_dir,
                redis_url=None, admit_max_saturation=0.0)
    base.update(overrides)
    return Settings(**base)


@pytest.fixture
def context_id() -> str:
    return str(uuid.uuid4())
