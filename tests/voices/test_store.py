"""Contract suite for voices/store.py, run against both backends (SQLite and a real Redis)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
import torch

from tests.voices.conftest import HIDDEN, StoreFactory, make_record
from voices.listing import DELETED_CURSOR_TTL_S
from voices.errors import (
    InvalidCursorError,
    InvalidVoiceError,
    ReadOnlyVoiceError,
    VoiceExistsError,
    VoiceNotFoundError,
)
from voices.listing import VoicePage
from voices.models import Voice, VoiceRecord
from voices.store import VoiceStore

BASE = datetime(2026, 8, 14, 9, 0, tzinfo=timezone.utc)


def at(seconds: float) -> str:
    return (BASE + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


async def put_many(store: VoiceStore, records: list[VoiceRecord], chunk: int = 25) -> None:
    for i in range(0, len(records), chunk):
        await asyncio.gather(*(store.put(r) for r in records[i:i + chunk]))


def ids(page: VoicePage) -> list[str]:
    return [v.id for v in page.data]


# ---------------------------------------------------------------------------- CRUD


async def test_put_then_get_returns_every_field(store: VoiceStore) -> None:
    record = make_record(name="Anna", description="warm alto", gender="feminine", accent="british",
                         country="GB", tagline="hi", locales=[{"locale": "en-GB", "is_native": True}])
    stored = await store.put(record)
    assert stored == record.voice
    got = await store.get(record.voice.id)
    assert got == record.voice
    api = got.to_api_dict()
    for required in ("id", "access", "created_at", "description", "is_owner", "language", "locales",
                     "name", "tagline", "visibility"):
        assert required in api
    assert api["locales"] == [{"locale": "en-GB", "is_native": True}]
    assert got.to_metadata_dict()["user_id"] == ""


async def test_get_prompt_and_record_round_trip_tensors(make_store: StoreFactory) -> None:
    writer, reader = make_store(), make_store()
    record = make_record(seed=3)
    await writer.put(record)
    prompt = await reader.get_prompt(record.voice.id)
    assert prompt.voice_id == record.voice.id
    assert prompt.model_fingerprint == "fp-test"
    assert prompt.prefix.dtype == torch.float32 and prompt.prefix.shape == (8, HIDDEN)
    assert torch.equal(prompt.prefix, record.prefix)
    full = await reader.get_record(record.voice.id)
    assert torch.equal(full.ref_codes, record.ref_codes) and full.ref_codes.dtype == torch.int16


async def test_bfloat16_prefix_is_served_as_float32(store: VoiceStore) -> None:
    record = make_record()
    record = VoiceRecord(record.voice, record.prefix.to(torch.bfloat16), None)
    await store.put(record)
    fresh = await store.get_record(record.voice.id)
    assert fresh.prefix.dtype == torch.bfloat16 and fresh.ref_codes is None
    prompt = await store.get_prompt(record.voice.id)
    assert prompt.prefix.dtype == torch.float32
    assert torch.equal(prompt.prefix, record.prefix.float())


async def test_put_of_taken_id_raises_and_keeps_the_first(store: VoiceStore) -> None:
    first = make_record("v-1", name="first")
    await store.put(first)
    with pytest.raises(VoiceExistsError, match="'v-1' already exists"):
        await store.put(make_record("v-1", name="second", seed=9))
    assert (await store.get("v-1")).name == "first"
    assert torch.equal((await store.get_prompt("v-1")).prefix, first.prefix)


async def test_unknown_voice_raises_not_found_naming_it(store: VoiceStore) -> None:
    for call in (store.get, store.get_prompt, store.get_record, store.delete):
        with pytest.raises(VoiceNotFoundError, match="voice 'nope' not found"):
            await call("nope")
    with pytest.raises(VoiceNotFoundError):
        await store.update("nope", name="x")


async def test_update_changes_fields_visible_to_other_replicas(make_store: StoreFactory) -> None:
    a, b = make_store(), make_store()
    record = make_record("v-up", name="old")
    await a.put(record)
    updated = await a.update("v-up", name="new", description="d", gender="gender_neutral", accent="scottish")
    assert (updated.name, updated.description, updated.gender, updated.accent) == ("new", "d", "gender_neutral", "scottish")
    assert updated.created_at == record.voice.created_at
    assert await b.get("v-up") == updated


async def test_a_new_reading_locale_reaches_every_replicas_prompt(make_store: StoreFactory) -> None:
    """The prompt carries the voice's reading locale, so changing the accent (or language, or
    locales) renews it here and on another replica that cached it; other fields keep it."""
    a, b = make_store(), make_store()
    await a.put(make_record("loc", language="es"))
    assert (await a.get_prompt("loc")).language == "es"
    cached = await b.get_prompt("loc")
    assert cached.language == "es"
    await a.update("loc", name="renamed", description="d")
    assert await b.get_prompt("loc") is cached  # the same prompt: nothing it carries changed
    await a.update("loc", accent="mexican")
    assert (await a.get_prompt("loc")).language == "es-MX"
    assert await prompt_language_within(b, "loc", 2.0) == "es-MX"
    await b.update("loc", language="es-ES")
    assert (await b.get_prompt("loc")).language == "es-ES"
    assert await prompt_language_within(a, "loc", 2.0) == "es-ES"


async def prompt_language_within(store: VoiceStore, voice_id: str, seconds: float) -> str:
    """The prompt's language once it is no longer the one first read, or after ``seconds``: on
    Redis a replica hears of a change by pub/sub, which lands a few milliseconds after it."""
    first = (await store.get_prompt(voice_id)).language
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (language := (await store.get_prompt(voice_id)).language) == first and loop.time() < deadline:
        await asyncio.sleep(0.01)
    return language


async def test_update_rejects_bad_fields_and_values(store: VoiceStore) -> None:
    await store.put(make_record("v-bad", name="kept"))
    with pytest.raises(InvalidVoiceError, match=r"cannot update field\(s\) \['created_at', 'id'\]"):
        await store.update("v-bad", id="x", created_at="2020-01-01T00:00:00Z")
    with pytest.raises(InvalidVoiceError, match="gender must be one of"):
        await store.update("v-bad", gender="male")
    with pytest.raises(InvalidVoiceError, match="name must be a non-empty string"):
        await store.update("v-bad", name="  ")
    assert (await store.get("v-bad")).name == "kept"


async def test_delete_removes_voice_and_prompt(store: VoiceStore) -> None:
    await store.put(make_record("v-del"))
    await store.get_prompt("v-del")  # cached
    await store.delete("v-del")
    with pytest.raises(VoiceNotFoundError):
        await store.get_prompt("v-del")
    with pytest.raises(VoiceNotFoundError):
        await store.get("v-del")
    with pytest.raises(VoiceNotFoundError):
        await store.delete("v-del")
    assert await store.count() == 0
    assert (await store.list()).data == []


async def test_count_includes_builtins(store: VoiceStore) -> None:
    store.register_builtin(make_record("default", name="Default", created_at=at(-1000)))
    await put_many(store, [make_record(name=f"n{i}") for i in range(4)])
    assert await store.count() == 5


# ---------------------------------------------------------------------------- pagination


async def test_pagination_forward_and_backward_over_250_voices(store: VoiceStore) -> None:
    # many voices share a timestamp, so only the (created_at, id) tie-break keeps the order total
    records = [make_record(f"v{i:03d}-{(i * 7919) % 1000:03d}", name=f"n{i}", created_at=at(i // 10), seed=i)
               for i in range(250)]
    await put_many(store, list(reversed(records)))
    expected = sorted((r.voice for r in records), key=lambda v: v.order_key)
    expected_ids = [v.id for v in expected]

    # forward, the way the SDK does it: starting_after=<last id> until a page is empty
    seen: list[str] = []
    page = await store.list(limit=7)
    while page.data:
        seen += ids(page)
        assert page.has_more == (len(seen) < 250)
        assert page.next_page == (page.data[-1].id if page.has_more else None)
        page = await store.list(limit=7, starting_after=page.data[-1].id)
        assert len(seen) <= 250, "pagination loops"
    assert seen == expected_ids
    assert page == VoicePage(data=[], has_more=False, next_page=None)

    # backward from the last voice: ending_before=<first id> until a page is empty
    back: list[str] = []
    page = await store.list(limit=9, ending_before=expected_ids[-1])
    while page.data:
        assert ids(page) == sorted(ids(page), key=expected_ids.index)  # each page in forward order
        back = ids(page) + back
        page = await store.list(limit=9, ending_before=page.data[0].id)
        assert len(back) <= 250, "pagination loops"
    assert back == expected_ids[:-1]

    # ending_before returns the page nearest the cursor
    near = await store.list(limit=3, ending_before=expected_ids[100])
    assert ids(near) == expected_ids[97:100] and near.has_more and near.next_page == expected_ids[97]
    first = await store.list(limit=100)
    assert ids(first) == expected_ids[:100] and first.has_more
    assert ids(await store.list(limit=5, starting_after=expected_ids[-1])) == []
    assert ids(await store.list(limit=5, ending_before=expected_ids[0])) == []


async def test_a_deleted_voice_still_works_as_a_page_cursor(make_store: StoreFactory) -> None:
    """An SDK walks pages with the last id of the page it holds; if that voice is deleted meanwhile
    (here on another replica), the walk goes on from where it stood instead of failing half-way
    with invalid_cursor."""
    store, other = make_store(), make_store()
    records = [make_record(f"w{i}", name=f"w{i}", created_at=at(i)) for i in range(6)]
    await put_many(store, records)
    page = await store.list(limit=2)
    assert ids(page) == ["w0", "w1"]
    await other.delete("w1")  # the cursor the walk is about to send
    assert ids(await store.list(limit=2, starting_after="w1")) == ["w2", "w3"]
    if make_store.backend == "redis":  # the place is kept for a while, not for good
        assert 0 < await other._client.ttl(other._gone_key("w1")) <= DELETED_CURSOR_TTL_S
    await other.delete("w4")
    assert ids(await store.list(limit=2, ending_before="w4")) == ["w2", "w3"]
    with pytest.raises(InvalidCursorError, match="starting_after='never-stored'"):
        await store.list(starting_after="never-stored")  # an id that never was still is an error
    await store.put(make_record("w1", name="again", created_at=at(10)))  # stored again: its new place counts
    assert ids(await store.list(limit=5, starting_after="w1")) == []
    assert ids(await store.list(limit=5, ending_before="w1"))[-1] == "w5"


async def test_list_parameter_errors(store: VoiceStore) -> None:
    await store.put(make_record("v-a"))
    with pytest.raises(InvalidCursorError, match="starting_after='ghost' is not the id of a voice"):
        await store.list(starting_after="ghost")
    with pytest.raises(InvalidCursorError, match="ending_before='ghost'"):
        await store.list(ending_before="ghost")
    with pytest.raises(InvalidVoiceError, match="not both"):
        await store.list(starting_after="v-a", ending_before="v-a")
    for bad in (0, 101, -1, 2.5, True):
        with pytest.raises(InvalidVoiceError, match="limit must be an integer from 1 to 100"):
            await store.list(limit=bad)
    with pytest.raises(InvalidVoiceError, match="gender filter"):
        await store.list(gender="male")
    assert ids(await store.list(starting_after="")) == ["v-a"]  # an empty cursor counts as absent


async def test_filters_and_search(store: VoiceStore) -> None:
    specs = [
        ("a", "Anna Smith", "Warm ALTO voice", "en-GB", "feminine", True),
        ("b", "Bob", "deep bass", "en", "masculine", True),
        ("c", "Carla", "bright", "es", "feminine", False),
        ("d", "Dee", "calm narrator, anna-like", "de", "gender_neutral", False),
        ("e-ANNA-id", "Eve", "", "en_US", None, True),
    ]
    await put_many(store, [make_record(i, name=n, description=d, language=lang, gender=g, is_owner=o,
                                       created_at=at(k)) for k, (i, n, d, lang, g, o) in enumerate(specs)])

    async def find(**kw) -> list[str]:
        return ids(await store.list(limit=100, **kw))

    assert await find(q="anna") == ["a", "d", "e-ANNA-id"]  # name, description and id, any case
    assert await find(q="ALTO") == ["a"]
    assert await find(q="zzz") == []
    assert await find(gender="feminine") == ["a", "c"]
    assert await find(is_owner=False) == ["c", "d"]
    assert await find(language="en") == ["a", "b", "e-ANNA-id"]
    assert await find(language="en-gb") == ["a"]
    assert await find(language="EN-US") == ["e-ANNA-id"]
    assert await find(q="anna", is_owner=True) == ["a", "e-ANNA-id"]
    # filtered pagination walks too
    page = await store.list(limit=1, language="en")
    walked = []
    while page.data:
        walked += ids(page)
        page = await store.list(limit=1, language="en", starting_after=page.data[-1].id)
    assert walked == ["a", "b", "e-ANNA-id"]
    back = await store.list(limit=2, language="en", ending_before="e-ANNA-id")
    assert ids(back) == ["a", "b"] and not back.has_more


async def test_filtered_pages_skip_many_non_matching_voices(store: VoiceStore) -> None:
    records = [make_record(f"x{i:03d}", name="plain", created_at=at(i)) for i in range(300)]
    records[5] = make_record("x005", name="needle one", created_at=at(5))
    records[290] = make_record("x290", name="needle two", created_at=at(290))
    await put_many(store, records, chunk=50)
    page = await store.list(limit=1, q="needle")
    assert ids(page) == ["x005"] and page.has_more
    page = await store.list(limit=1, q="needle", starting_after="x005")
    assert ids(page) == ["x290"] and not page.has_more


# ---------------------------------------------------------------------------- builtins


async def test_registered_builtin_is_listed_usable_and_read_only(store: VoiceStore) -> None:
    default = make_record("6ccbfb76-1fc6-48f7-b71d-91ac6298247b", name="Default", created_at=at(-10),
                          is_owner=False, access="public", visibility="all")
    voice = store.register_builtin(default)
    assert voice.builtin
    await put_many(store, [make_record(f"u{i}", created_at=at(i)) for i in range(3)])
    page = await store.list(limit=2)
    assert ids(page) == [default.voice.id, "u0"]  # oldest first, merged into the stored order
    assert ids(await store.list(limit=5, starting_after=default.voice.id)) == ["u0", "u1", "u2"]
    assert ids(await store.list(limit=5, ending_before="u0")) == [default.voice.id]
    assert ids(await store.list(q="default")) == [default.voice.id]
    assert ids(await store.list(is_owner=True)) == ["u0", "u1", "u2"]
    assert (await store.get(default.voice.id)).name == "Default"
    assert torch.equal((await store.get_prompt(default.voice.id)).prefix, default.prefix)
    with pytest.raises(ReadOnlyVoiceError, match="builtin voice and cannot be deleted"):
        await store.delete(default.voice.id)
    with pytest.raises(ReadOnlyVoiceError, match="cannot be updated"):
        await store.update(default.voice.id, name="mine")
    with pytest.raises(VoiceExistsError):
        await store.put(default)


async def test_stored_builtin_voice_needs_allow_builtin_to_delete(make_store: StoreFactory) -> None:
    a, b = make_store(), make_store()
    await a.put(make_record("pre", builtin=True))
    with pytest.raises(ReadOnlyVoiceError, match="'pre' is a builtin voice and cannot be deleted"):
        await b.delete("pre")
    with pytest.raises(ReadOnlyVoiceError, match="cannot be updated"):
        await b.update("pre", name="x")
    await b.delete("pre", allow_builtin=True)
    with pytest.raises(VoiceNotFoundError):
        await a.get("pre")


# ---------------------------------------------------------------------------- concurrency


async def test_concurrent_puts_and_deletes_are_safe(store: VoiceStore) -> None:
    records = [make_record(f"c{i:02d}", created_at=at(i % 3), seed=i) for i in range(40)]
    await asyncio.gather(*(store.put(r) for r in records))
    doomed = [r.voice.id for r in records[::2]]
    results = await asyncio.gather(
        *(store.delete(i) for i in doomed),
        *(store.delete(i) for i in doomed),  # each voice deleted twice at once: one wins
        *(store.get_prompt(r.voice.id) for r in records[1::2]),
        return_exceptions=True,
    )
    deletes = results[: 2 * len(doomed)]
    assert sum(r is None for r in deletes) == len(doomed)
    assert all(isinstance(r, VoiceNotFoundError) for r in deletes if r is not None)
    assert all(not isinstance(r, Exception) for r in results[2 * len(doomed):])
    remaining = [r.voice.id for r in records[1::2]]
    assert await store.count() == len(remaining)
    assert sorted(ids(await store.list(limit=100))) == sorted(remaining)
    for voice_id in doomed:
        with pytest.raises(VoiceNotFoundError):
            await store.get_prompt(voice_id)


async def test_concurrent_puts_of_one_id_store_exactly_one(store: VoiceStore) -> None:
    results = await asyncio.gather(*(store.put(make_record("same", seed=s)) for s in range(8)),
                                   return_exceptions=True)
    assert sum(isinstance(r, Voice) for r in results) == 1
    assert sum(isinstance(r, VoiceExistsError) for r in results) == 7
    assert await store.count() == 1


async def test_concurrent_updates_all_apply_to_the_latest_state(store: VoiceStore) -> None:
    await store.put(make_record("u"))
    fields = ["name", "description", "accent", "tagline", "country"]
    await asyncio.gather(*(store.update("u", **{f: f"{f}-value"}) for f in fields))
    voice = await store.get("u")
    assert [getattr(voice, f) for f in fields] == [f"{f}-value" for f in fields]


async def test_voice_deleted_on_one_replica_is_unusable_on_another(make_store: StoreFactory) -> None:
    a, b = make_store(), make_store()
    await a.put(make_record("shared", seed=1))
    assert "shared" not in b.cached_voice_ids()
    await b.get_prompt("shared")
    assert "shared" in b.cached_voice_ids()
    await a.delete("shared")
    with pytest.raises(VoiceNotFoundError):
        await b.get_prompt("shared")
    assert "shared" not in b.cached_voice_ids()
    # stored again under the same id with another prefix: the replica serves the new one
    await a.put(make_record("shared", seed=2))
    await b.get_prompt("shared")
    await a.delete("shared")
    replacement = make_record("shared", seed=3)
    await a.put(replacement)
    assert torch.equal((await b.get_prompt("shared")).prefix, replacement.prefix)


async def test_revalidate_after_trades_staleness_for_round_trips(make_store: StoreFactory) -> None:
    a, b = make_store(), make_store(revalidate_after_s=3600)
    await a.put(make_record("stale"))
    await b.get_prompt("stale")
    await a.delete("stale")
    # documented trade-off: within revalidate_after_s the cached prompt is trusted
    assert (await b.get_prompt("stale")).voice_id == "stale"
    with pytest.raises(VoiceNotFoundError):
        await b.get("stale")


# ---------------------------------------------------------------------------- cache and lifecycle


async def test_prompt_cache_is_a_bounded_lru(make_store: StoreFactory) -> None:
    writer, store = make_store(), make_store(prompt_cache_size=3)
    await put_many(writer, [make_record(f"l{i}", seed=i) for i in range(5)])
    for i in range(5):
        await store.get_prompt(f"l{i}")
    assert store.cached_voice_ids() == ["l2", "l3", "l4"]
    await store.get_prompt("l2")  # hit: becomes most recent
    await store.get_prompt("l0")  # miss: evicts the least recent (l3)
    assert store.cached_voice_ids() == ["l4", "l2", "l0"]
    info = store.cache_info()
    assert (info.size, info.max_size, info.hits, info.misses) == (3, 3, 1, 6)
    disabled = make_store(prompt_cache_size=0)
    await disabled.get_prompt("l1")
    assert disabled.cached_voice_ids() == []


async def test_closed_store_refuses_calls(make_store: StoreFactory) -> None:
    store = make_store()
    async with store:
        await store.check_health()
    await store.aclose()  # idempotent
    with pytest.raises(RuntimeError, match="voice store is closed"):
        await store.get("x")
    with pytest.raises(RuntimeError, match="voice store is closed"):
        await store.list()


async def test_a_deleted_voices_cursor_expires_and_its_row_goes(tmp_path, monkeypatch) -> None:
    """SQLite keeps a deleted voice's place DELETED_CURSOR_TTL_S; the next delete after that drops it."""
    import sqlite3
    import time as real_time
    import types

    from voices.backends import sqlite_ordered
    from voices.backends.local_store import LocalVoiceStore

    store = LocalVoiceStore(tmp_path)
    try:
        await put_many(store, [make_record(f"x{i}", created_at=at(i)) for i in range(3)])
        await store.delete("x0")
        later = types.SimpleNamespace(time=lambda: real_time.time() + DELETED_CURSOR_TTL_S + 1)
        monkeypatch.setattr(sqlite_ordered, "time", later)
        with pytest.raises(InvalidCursorError):
            await store.list(starting_after="x0")
        await store.delete("x1")
        rows = sqlite3.connect(store.path).execute("SELECT id FROM deleted_voices ORDER BY id").fetchall()
        assert rows == [("x1",)]
    finally:
        await store.aclose()
