"""``RedisVoiceStore``: voices in Redis, shared by every gateway replica.

Layout (all keys share the hash tag ``{<namespace>}``, so they sit in one Redis Cluster slot and
the Lua scripts below may touch them together):

    {ns}:order     ZSET, every score 0, member "<created_at UTC, 27 chars> <id>" (lex order
                   = (created_at, id), the store's total order)
    {ns}:member    HASH id -> its member in {ns}:order
    {ns}:meta      HASH id -> msgpack Voice (small; read by get and list)
    {ns}:gen       HASH id -> generation token (~16 bytes; read to validate cached prompts)
    {ns}:tensors   HASH id -> msgpack prefix [K, hidden] + ref_codes [T, 32] (tens of KiB)
    {ns}:readonly  SET of ids stored with builtin=True
    {ns}:gone:<id> STRING: a deleted voice's old member in {ns}:order, for DELETED_CURSOR_TTL_S, so
                   its id still works as a page cursor (the key expires on its own)

Put, delete, update and each scan batch are single Lua scripts, so replicas never see half a
voice and concurrent writers cannot interleave. A cached prompt is validated by one ``HGET`` of
``{ns}:gen`` (see ``voices/store.py`` for the staleness trade-off while Redis is down).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Callable, Iterator, Optional

import redis.asyncio as aioredis
import redis.exceptions as rexc
import torch
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from voices.backends.redis_ordered import SCAN_SCRIPT, order_key_of, order_member, scan_ordered
from voices.errors import ReadOnlyVoiceError, VoiceNotFoundError, VoiceStoreError, VoiceStoreUnavailableError
from voices.listing import DELETED_CURSOR_TTL_S, OrderKey
from voices.models import Voice, VoiceRecord
from voices.serialization import decode_record, decode_voice, encode_tensors, encode_voice
from voices.store import DEFAULT_PROMPT_CACHE_SIZE, VoiceStore

logger = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "gepard:voices"
_UPDATE_ATTEMPTS = 16

_UNAVAILABLE = (
    rexc.ConnectionError,  # includes BusyLoadingError, AuthenticationError
    rexc.TimeoutError,
    rexc.ReadOnlyError,  # writing to a replica during fail-over
    rexc.TryAgainError,
    rexc.ClusterDownError,
    OSError,
    asyncio.TimeoutError,
)


@contextlib.contextmanager
def map_redis_errors(action: str = "a Redis call") -> Iterator[None]:
    """Re-raise redis-py errors as VoiceStoreError subclasses, ``from`` the original.

    Unreachable, timing-out, loading or read-only servers -> VoiceStoreUnavailableError
    (retryable); any other Redis error -> VoiceStoreError.
    """
    try:
        yield
    except VoiceStoreError:
        raise
    except _UNAVAILABLE as exc:
        raise VoiceStoreUnavailableError(f"voice store unavailable during {action}: Redis: {exc}") from exc
    except rexc.RedisError as exc:
        raise VoiceStoreError(f"Redis error during {action}: {exc}") from exc


# KEYS: order, member, meta, gen, tensors, readonly
# ARGV: id, order member, meta, generation, tensors, builtin ("1"/"0")
_PUT = """
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return 0 end
redis.call('ZADD', KEYS[1], 0, ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[4])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[5])
if ARGV[6] == '1' then redis.call('SADD', KEYS[6], ARGV[1]) end
return 1
"""

# KEYS: as _PUT, then {ns}:gone:<id>; ARGV: id, allow_builtin ("1"/"0"), invalidation channel, seconds
# the id stays a cursor. Returns 1 deleted, 0 absent, -1 read-only; a delete publishes the id so other
# replicas drop their cached prompt.
_DELETE = """
local member = redis.call('HGET', KEYS[2], ARGV[1])
if not member then return 0 end
if ARGV[2] ~= '1' and redis.call('SISMEMBER', KEYS[6], ARGV[1]) == 1 then return -1 end
redis.call('SET', KEYS[7], member, 'EX', tonumber(ARGV[4]))
redis.call('ZREM', KEYS[1], member)
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
redis.call('SREM', KEYS[6], ARGV[1])
redis.call('PUBLISH', ARGV[3], ARGV[1])
return 1
"""

# KEYS: meta, gen; ARGV: id, expected old meta, new meta, new generation ("": kept), invalidation
# channel (published with a new generation). Returns 1 done, 0 absent, -1 changed meanwhile.
_UPDATE = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
if current ~= ARGV[2] then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
  redis.call('PUBLISH', ARGV[5], ARGV[1])
end
return 1
"""

# KEYS: meta, gen, tensors; ARGV: id, expected old meta, new meta, new generation, new tensors,
# invalidation channel (published on success).
# Returns 1 done, 0 absent, -1 changed meanwhile.
_REPLACE_PREFIX = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
if current ~= ARGV[2] then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[5])
redis.call('PUBLISH', ARGV[6], ARGV[1])
return 1
"""


class RedisVoiceStore(VoiceStore):
    """Voice store on Redis; see the module docstring for the key layout.

    ``RedisVoiceStore(client)`` borrows ``client`` and leaves it open on ``aclose()``;
    ``RedisVoiceStore.from_url(url)`` creates its own client and pool and closes them.
    Several stores (replicas) may share one Redis and ``namespace``.
    """

    def __init__(self, client: aioredis.Redis, *, namespace: str = DEFAULT_NAMESPACE,
                 owns_client: bool = False, prompt_cache_size: int = DEFAULT_PROMPT_CACHE_SIZE,
                 revalidate_after_s: float = 0.0) -> None:
        super().__init__(prompt_cache_size=prompt_cache_size, revalidate_after_s=revalidate_after_s)
        if not namespace or "{" in namespace or "}" in namespace:
            raise ValueError(f"namespace must be non-empty and free of braces, got {namespace!r}")
        self._client = client
        self._owns_client = owns_client
        tag = "{" + namespace + "}"
        self._k_order = f"{tag}:order"
        self._k_member = f"{tag}:member"
        self._k_meta = f"{tag}:meta"
        self._k_gen = f"{tag}:gen"
        self._k_tensors = f"{tag}:tensors"
        self._k_readonly = f"{tag}:readonly"
        self._tag = tag
        self._channel = f"{tag}:invalidate"  # pub/sub: ids of voices deleted or re-prefixed
        from voices.backends.redis_dicts import RedisDictionaryStore  # it imports map_redis_errors from here

        self.dictionaries = RedisDictionaryStore(client, tag)  # same client and hash tag
        self._listener: Optional[asyncio.Task] = None
        self._listening = False
        self._stop_listening = False
        self._all_keys = [self._k_order, self._k_member, self._k_meta, self._k_gen,
                          self._k_tensors, self._k_readonly]
        self._put_script = client.register_script(_PUT)
        self._delete_script = client.register_script(_DELETE)
        self._update_script = client.register_script(_UPDATE)
        self._scan_script = client.register_script(SCAN_SCRIPT)
        self._replace_script = client.register_script(_REPLACE_PREFIX)
        logger.debug("redis voice store: namespace %s, owns client %s", namespace, owns_client)

    @classmethod
    def from_url(cls, url: str, *, namespace: str = DEFAULT_NAMESPACE,
                 socket_timeout_s: float = 2.0, connect_timeout_s: float = 1.0,
                 retries: int = 2, **kwargs: Any) -> "RedisVoiceStore":
        """A store that owns a new client (and its pool) for ``url``, e.g. ``redis://host:6379/0``.

        Timeouts are short and retries few: a voice lookup sits on the synthesis path, and an
        unreachable Redis should surface as VoiceStoreUnavailableError within a few seconds.
        """
        client = aioredis.Redis.from_url(
            url,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=connect_timeout_s,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries),
            health_check_interval=30,
        )
        return cls(client, namespace=namespace, owns_client=True, **kwargs)

    # ------------------------------------------------------------------ primitives

    async def _fetch_voice(self, voice_id: str) -> Optional[Voice]:
        with map_redis_errors(f"get of voice {voice_id!r}"):
            blob = await self._client.hget(self._k_meta, voice_id)
        return None if blob is None else decode_voice(blob)

    def _gone_key(self, voice_id: str) -> str:
        return f"{self._tag}:gone:{voice_id}"

    async def _deleted_order_key(self, voice_id: str) -> Optional[OrderKey]:
        with map_redis_errors(f"cursor of deleted voice {voice_id!r}"):
            member = await self._client.get(self._gone_key(voice_id))
        if member is None:
            return None
        return order_key_of(member)

    async def _fetch_record(self, voice_id: str) -> Optional[tuple[VoiceRecord, str]]:
        with map_redis_errors(f"fetch of voice {voice_id!r}"):
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hget(self._k_meta, voice_id)
                pipe.hget(self._k_gen, voice_id)
                pipe.hget(self._k_tensors, voice_id)
                meta, gen, tensors = await pipe.execute()
        if meta is None or gen is None or tensors is None:
            return None
        return decode_record(decode_voice(meta), tensors), gen.decode()

    async def _fetch_generation(self, voice_id: str) -> Optional[str]:
        with map_redis_errors(f"validation of cached voice {voice_id!r}"):
            gen = await self._client.hget(self._k_gen, voice_id)
        return None if gen is None else gen.decode()

    async def _insert(self, record: VoiceRecord, generation: str) -> bool:
        voice = record.voice
        args = [voice.id, order_member(voice.order_key), encode_voice(voice), generation,
                encode_tensors(record), "1" if voice.builtin else "0"]
        with map_redis_errors(f"put of voice {voice.id!r}"):
            return bool(await self._put_script(keys=self._all_keys, args=args))

    async def _update_voice(self, voice_id: str, apply: Callable[[Voice], Voice],
                            generation: Optional[str] = None) -> Voice:
        for _ in range(_UPDATE_ATTEMPTS):
            with map_redis_errors(f"update of voice {voice_id!r}"):
                old = await self._client.hget(self._k_meta, voice_id)
            if old is None:
                raise VoiceNotFoundError(voice_id)
            new = apply(decode_voice(old))
            with map_redis_errors(f"update of voice {voice_id!r}"):
                done = await self._update_script(
                    keys=[self._k_meta, self._k_gen],
                    args=[voice_id, old, encode_voice(new), generation or "", self._channel])
            if done == 1:
                return new
            if done == 0:
                raise VoiceNotFoundError(voice_id)
            # -1: another writer changed it between our read and write; read again
        raise VoiceStoreUnavailableError(
            f"update of voice {voice_id!r} kept conflicting with concurrent writers "
            f"({_UPDATE_ATTEMPTS} attempts); retry"
        )

    async def _replace_prefix(self, voice_id: str, apply: Callable[[Voice], Voice], prefix: torch.Tensor,
                              generation: str) -> VoiceRecord:
        action = f"prefix replacement of voice {voice_id!r}"
        for _ in range(_UPDATE_ATTEMPTS):
            with map_redis_errors(action):
                async with self._client.pipeline(transaction=True) as pipe:
                    pipe.hget(self._k_meta, voice_id)
                    pipe.hget(self._k_tensors, voice_id)
                    old_meta, old_tensors = await pipe.execute()
            if old_meta is None or old_tensors is None:
                raise VoiceNotFoundError(voice_id)
            old = decode_record(decode_voice(old_meta), old_tensors)
            new = VoiceRecord(voice=apply(old.voice), prefix=prefix, ref_codes=old.ref_codes)
            with map_redis_errors(action):
                done = await self._replace_script(
                    keys=[self._k_meta, self._k_gen, self._k_tensors],
                    args=[voice_id, old_meta, encode_voice(new.voice), generation, encode_tensors(new), self._channel])
            if done == 1:
                return new
            if done == 0:
                raise VoiceNotFoundError(voice_id)
        raise VoiceStoreUnavailableError(
            f"{action} kept conflicting with concurrent writers ({_UPDATE_ATTEMPTS} attempts); retry"
        )

    async def _remove(self, voice_id: str, allow_builtin: bool) -> None:
        with map_redis_errors(f"delete of voice {voice_id!r}"):
            done = await self._delete_script(keys=[*self._all_keys, self._gone_key(voice_id)],
                                             args=[voice_id, "1" if allow_builtin else "0", self._channel,
                                                   DELETED_CURSOR_TTL_S])
        if done == 0:
            raise VoiceNotFoundError(voice_id)
        if done == -1:
            raise ReadOnlyVoiceError(voice_id, "deleted")

    async def _scan(self, after: Optional[OrderKey], *, reverse: bool, count: int) -> list[Voice]:
        with map_redis_errors("list of voices"):
            return await scan_ordered(self._scan_script, self._k_order, self._k_meta, after, reverse=reverse,
                                      count=count, decode=decode_voice)

    async def _count(self) -> int:
        with map_redis_errors("count of voices"):
            return int(await self._client.zcard(self._k_order))

    async def _ping(self) -> None:
        with map_redis_errors("health check"):
            await self._client.ping()

    # ------------------------------------------------------------------ invalidations

    def _cache_trusted(self) -> bool:
        if self._listener is None and not self._stop_listening:
            self._listener = asyncio.get_running_loop().create_task(self._listen(), name="voice-invalidations")
        return self._listening

    async def _listen(self) -> None:
        """Evict cached prompts as other replicas delete or re-prefix voices; reconnect on errors."""
        backoff = 0.1
        while not self._stop_listening:
            pubsub = self._client.pubsub()
            try:
                await pubsub.subscribe(self._channel)
                await _subscription_confirmed(pubsub)
                # messages sent while we were not subscribed are lost: every cached prompt gets a
                # generation check at its next hit. Not a clear: a Redis outage right after would
                # leave nothing to serve, where a failed check serves the cached prompt.
                self._cache.distrust_all()
                self._listening = True
                backoff = 0.1
                # redis-py may swallow a cancellation inside get_message: the flag ends the loop too
                while not self._stop_listening:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None and message.get("type") == "message":
                        voice_id = message["data"].decode() if isinstance(message["data"], bytes) else str(message["data"])
                        self._cache.evict(voice_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis gone or the connection dropped: check every hit until back
                if self._listening:
                    logger.warning("voice invalidation channel lost (%s); validating cached voices per request", exc)
                self._listening = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            finally:
                self._listening = False
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    async def _close(self) -> None:
        self._stop_listening = True
        try:
            if self._listener is not None:
                self._listener.cancel()
                # asyncio.wait neither raises the listener's own cancellation nor swallows one aimed
                # at this close, as suppressing CancelledError around an await of the listener did
                # (the caller then carried on as if never cancelled). The listener may take up to its
                # get_message timeout to see the flag: redis-py can swallow the cancel in there.
                await asyncio.wait({self._listener}, timeout=3.0)
                self._listener = None
        finally:  # cancelled or not, the client this store opened is closed
            if self._owns_client:
                with contextlib.suppress(Exception):
                    await self._client.aclose()


#: How long a new subscription has to be confirmed before the listener counts it as failed.
SUBSCRIBE_CONFIRM_S = 2.0


async def _subscription_confirmed(pubsub: "aioredis.client.PubSub") -> None:
    """Wait for Redis's confirmation of the SUBSCRIBE just sent. Sending it proves nothing: on a
    pooled connection whose server has gone, the write succeeds and only the reply's read fails."""
    deadline = asyncio.get_running_loop().time() + SUBSCRIBE_CONFIRM_S
    while (left := deadline - asyncio.get_running_loop().time()) > 0:
        message = await pubsub.get_message(timeout=left)
        if message is not None and message.get("type") == "subscribe":
            return
    raise rexc.ConnectionError(f"no confirmation of the subscription within {SUBSCRIBE_CONFIRM_S:g} s")
