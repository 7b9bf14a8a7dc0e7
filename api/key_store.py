"""API keys kept in Redis, shared by every gateway replica (beside the keys in the configuration).

Keys are stored as SHA-256 hex digests in one set, so a Redis dump reveals no usable key:

    store = RedisKeyStore.from_url(redis_url)
    await store.add(key); await store.contains(key); await store.remove(key)

``gepard keys add|remove|list`` manages them from the command line (``REDIS_URL`` names the server).
The gateway passes ``contains`` to ``Authenticator(key_lookup=...)``: a credential that is neither a
configured key nor an access token is looked up here; a Redis failure becomes a 503.
"""

from __future__ import annotations

import hashlib

import redis.asyncio as aioredis

DEFAULT_SET_KEY = "{gepard}:api_keys"


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class RedisKeyStore:
    """Owns its client when built with ``from_url``."""

    def __init__(self, client: aioredis.Redis, set_key: str = DEFAULT_SET_KEY, owns_client: bool = False) -> None:
        self._client = client
        self._set_key = set_key
        self._owns_client = owns_client

    @classmethod
    def from_url(cls, url: str, set_key: str = DEFAULT_SET_KEY) -> "RedisKeyStore":
        client = aioredis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=1.0)
        return cls(client, set_key, owns_client=True)

    async def contains(self, key: str) -> bool:
        return bool(await self._client.sismember(self._set_key, key_digest(key)))

    async def add(self, key: str) -> bool:
        if len(key) < 16:
            raise ValueError("an API key must be at least 16 characters")
        return bool(await self._client.sadd(self._set_key, key_digest(key)))

    async def remove(self, key: str) -> bool:
        return bool(await self._client.srem(self._set_key, key_digest(key)))

    async def count(self) -> int:
        return int(await self._client.scard(self._set_key))

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()
