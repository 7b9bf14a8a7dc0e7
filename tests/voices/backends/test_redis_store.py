"""RedisVoiceStore specifics: outages, key layout, client ownership."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
import torch

from tests.voices.conftest import make_record
from tests.voices.redis_server import RedisServer
from voices.backends.redis_store import RedisVoiceStore, map_redis_errors
from voices.listing import DELETED_CURSOR_TTL_S
from voices.errors import VoiceNotFoundError, VoiceStoreError, VoiceStoreUnavailableError

pytestmark = pytest.mark.redis


@pytest.fixture
def own_redis():
    """A private server this test may stop."""
    server = RedisServer.start()
    yield server
    server.stop()


async def test_outage_fails_writes_and_lists_but_cached_prompts_keep_working(
        own_redis: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    store = RedisVoiceStore.from_url(own_redis.url, socket_timeout_s=0.5, connect_timeout_s=0.5, retries=1)
    try:
        store.register_builtin(make_record("default", name="Default"))
        hot = make_record("hot", seed=1)
        await store.put(hot)
        await store.put(make_record("cold", seed=2), )
        store._cache.evict("cold")  # only "hot" is cached now
        assert torch.equal((await store.get_prompt("hot")).prefix, hot.prefix)

        own_redis.stop()

        for call in (store.list(), store.put(make_record("new")), store.get("hot"), store.count(),
                     store.delete("hot"), store.update("hot", name="x"), store.check_health()):
            with pytest.raises(VoiceStoreUnavailableError, match="voice store unavailable") as info:
                await call
            assert info.value.retryable
        # cached and builtin prompts still resolve (one warning per outage); an uncached one cannot
        with caplog.at_level("WARNING", logger="voices.store"):
            for _ in range(3):
                assert torch.equal((await store.get_prompt("hot")).prefix, hot.prefix)
        assert [r.getMessage() for r in caplog.records if r.name == "voices.store"][0].startswith(
            "voice hot: store unavailable, serving cached prompts")
        assert len([r for r in caplog.records if r.name == "voices.store"]) == 1
        assert (await store.get_prompt("default")).voice_id == "default"
        with pytest.raises(VoiceStoreUnavailableError):
            await store.get_prompt("cold")
    finally:
        await store.aclose()


async def test_prompts_cached_before_the_listener_subscribed_survive_an_outage_that_follows(
        own_redis: RedisServer) -> None:
    """The invalidation listener starts at the first cache hit; its subscription used to clear the
    cache (messages missed before it), so an outage right after found nothing to serve: a gateway's
    WebSocket got 503 voice_store_unavailable for a voice its /tts/bytes had just spoken. Entries now
    stay and get a generation check at their next hit, which an outage answers with the cached prompt."""
    store = RedisVoiceStore.from_url(own_redis.url, socket_timeout_s=0.5, connect_timeout_s=0.5, retries=1)
    try:
        hot = make_record("hot", seed=1)
        await store.put(hot)
        await store.get_prompt("hot")  # a miss: fetched and cached
        await store.get_prompt("hot")  # a hit: starts the listener
        for _ in range(100):  # until it has subscribed
            if store._listening:
                break
            await asyncio.sleep(0.02)
        assert store._listening and store.cached_voice_ids() == ["hot"]

        own_redis.stop()
        for _ in range(3):
            assert torch.equal((await store.get_prompt("hot")).prefix, hot.prefix)
            await asyncio.sleep(0.3)  # the listener notices and retries meanwhile
    finally:
        await store.aclose()


async def test_a_delete_missed_while_unsubscribed_is_caught_by_the_check_after_the_subscription(
        redis_server: RedisServer) -> None:
    """Keeping entries across a (re)subscription must not serve a voice deleted while nobody listened."""
    a = RedisVoiceStore.from_url(redis_server.url, namespace="resub")
    b = RedisVoiceStore.from_url(redis_server.url, namespace="resub")
    try:
        await a.put(make_record("gone"))
        await b.get_prompt("gone")  # cached on b, whose listener has not started (no hit yet)
        await a.delete("gone")  # published while b listened to nothing
        b._cache_trusted()  # starts b's listener, as a hit would
        for _ in range(100):
            if b._listening:
                break
            await asyncio.sleep(0.02)
        assert b._listening and b.cached_voice_ids() == ["gone"]
        with pytest.raises(VoiceNotFoundError):  # kept across the subscription, but checked
            await b.get_prompt("gone")
    finally:
        await a.aclose()
        await b.aclose()


async def test_store_recovers_when_redis_comes_back(own_redis: RedisServer) -> None:
    store = RedisVoiceStore.from_url(own_redis.url, socket_timeout_s=0.5, connect_timeout_s=0.5, retries=1)
    try:
        await store.put(make_record("a"))
        port = own_redis.port
        own_redis.stop()
        with pytest.raises(VoiceStoreUnavailableError):
            await store.list()
        restarted = RedisServer.start(port=port)  # nothing persisted: an empty server
        try:
            assert (await store.list()).data == []
            await store.put(make_record("a"))
            assert (await store.get("a")).id == "a"
        finally:
            restarted.stop()
    finally:
        await store.aclose()


async def test_keys_share_one_hash_tag(redis_server: RedisServer) -> None:
    client = aioredis.Redis.from_url(redis_server.url)
    store = RedisVoiceStore(client, namespace="tagtest")
    try:
        await store.put(make_record("k1"))
        keys = sorted(k.decode() for k in await client.keys("*tagtest*"))
        assert keys == ["{tagtest}:gen", "{tagtest}:member", "{tagtest}:meta", "{tagtest}:order", "{tagtest}:tensors"]
        await store.delete("k1")
        # deletes leave nothing behind but the voice's place for cursors, which expires on its own
        assert await client.keys("*tagtest*") == [b"{tagtest}:gone:k1"]
        assert 0 < await client.ttl("{tagtest}:gone:k1") <= DELETED_CURSOR_TTL_S
    finally:
        await store.aclose()
        # borrowed client stays open after the store closes
        assert await client.ping()
        await client.aclose()


async def test_namespaces_are_isolated(redis_server: RedisServer) -> None:
    a = RedisVoiceStore.from_url(redis_server.url, namespace="ns-a")
    b = RedisVoiceStore.from_url(redis_server.url, namespace="ns-b")
    try:
        await a.put(make_record("only-a"))
        with pytest.raises(VoiceNotFoundError):
            await b.get("only-a")
        assert await b.count() == 0
    finally:
        await a.aclose()
        await b.aclose()
    with pytest.raises(ValueError, match="namespace"):
        RedisVoiceStore.from_url(redis_server.url, namespace="a{b}")


def test_map_redis_errors_classifies() -> None:
    import redis.exceptions as rexc

    with pytest.raises(VoiceStoreUnavailableError) as info:
        with map_redis_errors("a test"):
            raise rexc.ConnectionError("refused")
    assert isinstance(info.value.__cause__, rexc.ConnectionError)
    with pytest.raises(VoiceStoreUnavailableError):
        with map_redis_errors("a test"):
            raise rexc.ReadOnlyError("replica")
    with pytest.raises(VoiceStoreError) as other:
        with map_redis_errors("a test"):
            raise rexc.ResponseError("WRONGTYPE")
    assert not isinstance(other.value, VoiceStoreUnavailableError) and not other.value.retryable


async def test_scans_longer_than_one_script_call(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from voices.backends import redis_ordered

    monkeypatch.setattr(redis_ordered, "MAX_SCAN", 3)
    store = RedisVoiceStore.from_url(redis_server.url, namespace="scan-batches")
    try:
        for i in range(11):
            await store.put(make_record(f"s{i:02d}", created_at=f"2026-08-14T10:00:{i:02d}Z"))
        page = await store.list(limit=10)
        assert [v.id for v in page.data] == [f"s{i:02d}" for i in range(10)] and page.has_more
        back = await store.list(limit=10, ending_before="s10")
        assert [v.id for v in back.data] == [f"s{i:02d}" for i in range(10)] and not back.has_more
    finally:
        await store.aclose()


async def _hget_calls(client: aioredis.Redis) -> int:
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_hget", {}).get("calls", 0))


async def _until(predicate, timeout_s: float = 5.0) -> None:
    import asyncio
    import time

    deadline = time.monotonic() + timeout_s
    while not await predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_hot_voice_costs_no_round_trip_and_a_delete_elsewhere_evicts_it(redis_server: RedisServer) -> None:
    import uuid

    namespace = f"inv:{uuid.uuid4().hex[:8]}"
    a = RedisVoiceStore.from_url(redis_server.url, namespace=namespace)
    b = RedisVoiceStore.from_url(redis_server.url, namespace=namespace)
    probe = aioredis.Redis.from_url(redis_server.url)
    try:
        record = make_record(seed=3)
        await b.put(record)
        voice_id = record.voice.id
        await a.get_prompt(voice_id)  # first use starts the invalidation listener

        async def listening_and_cached() -> bool:
            await a.get_prompt(voice_id)  # reloads after the listener cleared the cache on subscribe
            return a._listening and a.cache_info().size == 1

        await _until(listening_and_cached)
        before = await _hget_calls(probe)
        for _ in range(20):
            assert torch.equal((await a.get_prompt(voice_id)).prefix, record.prefix)
        assert await _hget_calls(probe) == before  # 20 hits, not one read of Redis

        await b.delete(voice_id)  # replica B deletes: the script publishes the id

        async def refused() -> bool:
            try:
                await a.get_prompt(voice_id)
            except VoiceNotFoundError:
                return True
            return False

        await _until(refused, timeout_s=2.0)
    finally:
        await probe.aclose()
        await a.aclose()
        await b.aclose()


async def test_a_cancelled_close_is_cancelled_and_still_closes_the_connections(redis_server: RedisServer) -> None:
    """Closing waits for the invalidation listener to stop; a cancel that arrives meanwhile must not
    be swallowed (the caller would carry on as if it had not been cancelled), and the store's own
    client must be closed all the same."""
    import asyncio

    probe = aioredis.Redis.from_url(redis_server.url)
    store = RedisVoiceStore.from_url(redis_server.url, namespace="cancelled-close")
    try:
        await store.put(make_record("a"))
        await store.get_prompt("a")  # a cached prompt starts the listener (its own connection)
        for _ in range(100):
            if store._listening:
                break
            await asyncio.sleep(0.02)
        assert store._listening
        before = len(await probe.client_list())
        assert before >= 3  # the probe, the store's pool and its listener

        closer = asyncio.create_task(store.aclose())
        await asyncio.sleep(0)  # the close has begun and waits for the listener
        assert not closer.done()
        closer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closer
        for _ in range(100):  # the server drops the store's connections as they close
            if len(await probe.client_list()) == 1:
                break
            await asyncio.sleep(0.02)
        assert len(await probe.client_list()) == 1, await probe.client_list()
    finally:
        await store.aclose()
        await probe.aclose()


async def test_a_delete_elsewhere_that_lands_during_a_fetch_is_not_undone_by_caching_it(redis_server: RedisServer) -> None:
    """Replica A misses and fetches a voice; replica B deletes it while the fetch is out, and B's
    eviction reaches A before the fetch returns (it finds nothing to evict). A must not then cache
    what it fetched: with its listener connected, cache hits are trusted, so the deleted voice
    would speak on A for good."""
    import asyncio
    import uuid

    namespace = f"race:{uuid.uuid4().hex[:8]}"
    a = RedisVoiceStore.from_url(redis_server.url, namespace=namespace)
    b = RedisVoiceStore.from_url(redis_server.url, namespace=namespace)
    try:
        warm, record = make_record(seed=4), make_record(seed=5)
        await b.put(warm)
        await b.put(record)

        async def listening() -> bool:
            await a.get_prompt(warm.voice.id)  # the first use starts A's listener
            return a._listening

        await _until(listening)
        fetched, release = asyncio.Event(), asyncio.Event()
        fetch = a._fetch_record

        async def paused_fetch(voice_id: str):
            found = await fetch(voice_id)  # the record as it was, before B's delete
            fetched.set()
            await release.wait()
            return found

        evicted = asyncio.Event()
        evict = a._cache.evict

        def watched_evict(voice_id: str) -> None:
            evict(voice_id)
            if voice_id == record.voice.id:
                evicted.set()

        a._fetch_record = paused_fetch  # type: ignore[method-assign]
        a._cache.evict = watched_evict  # type: ignore[method-assign]
        use = asyncio.create_task(a.get_prompt(record.voice.id))
        await asyncio.wait_for(fetched.wait(), 5)
        await b.delete(record.voice.id)  # publishes the id; A's listener evicts (nothing cached yet)
        await asyncio.wait_for(evicted.wait(), 2)
        release.set()
        assert torch.equal((await use).prefix, record.prefix)  # that use began before the delete
        a._fetch_record = fetch  # type: ignore[method-assign]
        with pytest.raises(VoiceNotFoundError):
            await a.get_prompt(record.voice.id)
    finally:
        await a.aclose()
        await b.aclose()
