"""Gateway fixtures (the tiny checkpoint with its codec and the session's live gateway are in
tests/conftest.py, so every test folder shares one of each)."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from typing import Iterator

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


@contextlib.contextmanager
def redis_key_gateway(model_dir: Path, data_dir: Path) -> Iterator[tuple["LiveServer", "RedisServer"]]:
    """A live gateway with auth on and its keys in a Redis of its own (``gepard keys add|remove``);
    key_cache_ttl_s=0, so a removed key fails at once (the default believes Redis for 2 s)."""
    from tests.api.live import LiveServer
    from tests.voices.redis_server import RedisServer

    redis = RedisServer.start()
    try:
        settings = gateway_settings(model_dir, data_dir, redis_url=redis.url, require_auth=True, key_cache_ttl_s=0)
        with LiveServer(settings) as server:
            yield server, redis
    finally:
        redis.stop()


@pytest.fixture
def context_id() -> str:
    return str(uuid.uuid4())
