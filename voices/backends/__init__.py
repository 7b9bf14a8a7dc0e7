"""Concrete voice stores: ``RedisVoiceStore`` (shared by replicas) and ``LocalVoiceStore``
(embedded SQLite default). ``open_voice_store`` picks one from configuration."""

from __future__ import annotations

import os
from typing import Any, Optional

from voices.backends.local_store import LocalVoiceStore, map_sqlite_errors
from voices.backends.redis_store import RedisVoiceStore, map_redis_errors
from voices.store import VoiceStore

__all__ = ["LocalVoiceStore", "RedisVoiceStore", "map_redis_errors", "map_sqlite_errors", "open_voice_store"]


def open_voice_store(redis_url: Optional[str], data_dir: str | os.PathLike[str], **kwargs: Any) -> VoiceStore:
    """``RedisVoiceStore.from_url(redis_url)`` when a URL is configured (``REDIS_URL``), else
    ``LocalVoiceStore(data_dir)``. Keyword arguments go to either (cache size, ...)."""
    if redis_url:
        return RedisVoiceStore.from_url(redis_url, **kwargs)
    return LocalVoiceStore(data_dir, **kwargs)
