"""API keys kept in Redis, shared by every gateway replica (beside the keys in the configuration).

Keys are stored as SHA-256 hex digests in one set, so a Redis dump reveals no usable key:

    store = RedisKeyStore.from_url(redis_url)
    await store.add(key); await store.contains(key); await store.remove(key)

``gepard keys add|remove|count`` manages them from the command line (``REDIS_URL`` names the server).
The gateway passes ``contains_digest`` to ``Authenticator(key_lookup=...)``: a credential of at
least 16 characters that is neither a configured key nor an access token is looked up here by its
digest, and so is the minting key of an access token (removing a key revokes its tokens); a Redis
failure becomes a 503.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from api.auth import MIN_LOOKUP_KEY_CHARS, key_digest
from api.settings import api_key_problem

__all__ = ["DEFAULT_SET_KEY", "MIN_KEY_CHARS", "RedisKeyStore", "key_digest"]

DEFAULT_SET_KEY = "{gepard}:api_keys"
#: Shorter keys are refused, which lets the gateway answer a short wrong key 401 without Redis.
MIN_KEY_CHARS = MIN_LOOKUP_KEY_CHARS


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
        return await self.contains_digest(key_digest(key))

    async def contains_digest(self, digest: str) -> bool:
        """Whether the key whose SHA-256 hex digest is ``digest`` is stored (the gateway's lookup)."""
        return bool(await self._client.sismember(self._set_key, digest))

    async def add(self, key: str) -> bool:
        if len(key) < MIN_KEY_CHARS:
            raise ValueError(f"an API key must be at least {MIN_KEY_CHARS} characters")
        problem = api_key_problem(key)  # as for GEPARD_API_KEYS: spaces around a key never match a header
        if problem is not None:
            raise ValueError(problem)
        return bool(await self._client.sadd(self._set_key, key_digest(key)))

    async def remove(self, key: str) -> bool:
        return bool(await self._client.srem(self._set_key, key_digest(key)))

    async def count(self) -> int:
        return int(await self._client.scard(self._set_key))

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()
