"""Fixtures for the voices tests: a session Redis, and a store factory over both backends."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import AsyncIterator, Callable, Iterator, Optional

import pytest
import torch

from tests.voices.redis_server import RedisServer
from voices.backends import LocalVoiceStore, RedisVoiceStore
from voices.models import Voice, VoiceRecord
from voices.store import VoiceStore

from tests.conftest import REF_AUDIO_DIR  # noqa: E402  (the clips carried in tests/data)
HIDDEN = 16  # tiny stand-in for Gepard's 1024


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer.start()
    yield server
    server.stop()


@pytest.fixture
def ref_audio_dir() -> Path:
    if not (REF_AUDIO_DIR / "audio_en.wav").is_file():
        pytest.skip(f"reference audio not found in {REF_AUDIO_DIR} (set GEPARD_REF_AUDIO_DIR)")
    return REF_AUDIO_DIR


StoreFactory = Callable[..., VoiceStore]


@pytest.fixture(params=["local", pytest.param("redis", marks=pytest.mark.redis)])
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """``make_store(**kwargs)`` opens another store on the same backing data: call it twice to get
    two replicas of one deployment (same SQLite file / same Redis namespace)."""
    stores: list[VoiceStore] = []
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        namespace = f"test:{uuid.uuid4().hex[:12]}"

        def factory(**kwargs) -> VoiceStore:
            store = RedisVoiceStore.from_url(server.url, namespace=namespace, **kwargs)
            stores.append(store)
            return store
    else:
        def factory(**kwargs) -> VoiceStore:
            store = LocalVoiceStore(tmp_path / "data", **kwargs)
            stores.append(store)
            return store

    factory.backend = request.param  # type: ignore[attr-defined]
    yield factory
    for store in stores:
        await store.aclose()


@pytest.fixture
async def store(make_store: StoreFactory) -> VoiceStore:
    return make_store()


def make_record(voice_id: Optional[str] = None, *, name: str = "voice", created_at: str = "2026-08-14T10:00:00Z",
                seed: int = 0, with_codes: bool = True, **fields) -> VoiceRecord:
    """A record with a seeded random prefix [8, HIDDEN] float32 and codes [12, 32] int16."""
    gen = torch.Generator().manual_seed(seed)
    voice = Voice(id=voice_id or str(uuid.uuid4()), name=name, language=fields.pop("language", "en"),
                  created_at=created_at, model_fingerprint=fields.pop("model_fingerprint", "fp-test"), **fields)
    codes = torch.randint(0, 8, (12, 32), generator=gen, dtype=torch.int16) if with_codes else None
    return VoiceRecord(voice=voice, prefix=torch.randn(8, HIDDEN, generator=gen), ref_codes=codes)
