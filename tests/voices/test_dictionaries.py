"""Pronunciation dictionaries on both stores (SQLite, real Redis): CRUD, cursor pages, replicas that
share a backend, concurrent updates, and the entry checks (IPA refused, precise field paths)."""

from __future__ import annotations

import asyncio

import pytest

from voices.dictionaries import MAX_ITEM_CHARS, PronunciationItem, parse_items
from voices.errors import (
    InvalidCursorError,
    InvalidPronunciationDictError,
    IpaNotSupportedError,
    PronunciationDictNotFoundError,
    VoiceStoreError,
)

ITEMS = parse_items([{"text": "SQL", "alias": "sequel"}, {"text": "gif", "alias": "jif", "case_sensitive": True}])


async def test_create_get_update_delete_round_trip(make_store):
    store = make_store().dictionaries
    d = await store.create(name="tech", items=ITEMS, owner_id="key:1234abcd")
    assert d.id.startswith("pdict_") and d.pinned is False and d.owner_id == "key:1234abcd"
    assert await store.get(d.id) == d
    assert d.to_api_dict()["items"] == [{"text": "SQL", "alias": "sequel"},
                                         {"text": "gif", "alias": "jif", "case_sensitive": True}]

    renamed = await store.update(d.id, name="tech v2")
    assert (renamed.name, renamed.items) == ("tech v2", ITEMS)  # items untouched
    replaced = await store.update(d.id, items=[PronunciationItem("AWS", "A W S")])
    assert (replaced.name, [i.text for i in replaced.items]) == ("tech v2", ["AWS"])
    assert await store.get(d.id) == replaced

    await store.delete(d.id)
    for call in (store.get(d.id), store.delete(d.id), store.update(d.id, name="x")):
        with pytest.raises(PronunciationDictNotFoundError, match=d.id):
            await call


async def test_pages_follow_creation_order_with_both_cursors(make_store):
    store = make_store().dictionaries
    ids = [(await store.create(name=f"d{i}")).id for i in range(5)]
    first = await store.list(limit=2)
    assert [d.id for d in first.data] == ids[:2] and first.has_more and first.next_page == ids[1]
    walked, cursor = [], None
    while True:  # as the SDK pages: starting_after=<last id> until a page is empty
        page = await store.list(limit=2, starting_after=cursor)
        if not page.data:
            break
        walked += [d.id for d in page.data]
        cursor = page.data[-1].id
    assert walked == ids
    back = await store.list(limit=2, ending_before=ids[4])
    assert [d.id for d in back.data] == ids[2:4] and back.has_more and back.next_page == ids[2]
    assert (await store.list(limit=2, ending_before=ids[0])).data == []
    with pytest.raises(InvalidPronunciationDictError, match="starting_after='nope'"):
        await store.list(starting_after="nope")
    with pytest.raises(InvalidPronunciationDictError, match="limit"):
        await store.list(limit=0)


async def test_two_replicas_on_one_backend_see_the_same_dictionaries(make_store):
    a, b = make_store().dictionaries, make_store().dictionaries
    d = await a.create(name="shared", items=ITEMS)
    assert await b.get(d.id) == d
    await b.update(d.id, name="changed on b")
    assert (await a.get(d.id)).name == "changed on b"
    await b.delete(d.id)
    with pytest.raises(PronunciationDictNotFoundError):
        await a.get(d.id)


async def test_concurrent_updates_each_land_whole(make_store):
    store = make_store().dictionaries
    d = await store.create(name="race")
    names = [f"n{i}" for i in range(6)]
    results = await asyncio.gather(*(store.update(d.id, name=n) for n in names))
    assert sorted(r.name for r in results) == names
    assert (await store.get(d.id)).name in names and (await store.get(d.id)).items == ()


async def test_voices_and_dictionaries_do_not_see_each_other(make_store):
    store = make_store()
    before = await store.count()
    d = await store.dictionaries.create(name="apart")
    assert await store.count() == before
    with pytest.raises(VoiceStoreError):
        await store.get(d.id)


@pytest.mark.parametrize("alias", ["<<k|ɑ|ɹ|ˈ|t|i|ʒ|ə>>", "<<s|i|k|w|ə|l>>", "ˈsiːkwəl", "kɑɹtiʒə"])
def test_ipa_aliases_are_refused_with_the_entry_named(alias):
    with pytest.raises(IpaNotSupportedError) as err:
        parse_items([{"text": "fine", "alias": "fine"}, {"text": "Cartesia", "alias": alias}])
    assert err.value.field == "items[1].alias"
    assert "items[1].alias" in str(err.value) and "Cartesia" in str(err.value) and "IPA" in str(err.value)


@pytest.mark.parametrize("alias", ['<break time="1s"/>ak me', "<spell>XYZ</spell>", "fast <SPEED ratio='1.2'/>",
                                   "</ spell>"])
def test_aliases_holding_transcript_tags_are_refused_with_the_entry_named(alias):
    """An alias is spoken as written, inside text whose tags were already read: a tag in it was read
    out ("break time equals one s"). Such an alias is refused when the dictionary is written."""
    with pytest.raises(InvalidPronunciationDictError) as err:
        parse_items([{"text": "fine", "alias": "fine"}, {"text": "ASAP", "alias": alias}])
    assert err.value.field == "items[1].alias" and "transcript tags" in str(err.value)
    parse_items([{"text": "lt", "alias": "less < than"}, {"text": "b", "alias": "<b> bold"}])  # not tags: fine


@pytest.mark.parametrize("raw, message", [
    ("SQL", "items: expected a list, got a string"),
    (["SQL"], "items[0]: expected an object, got a string"),
    ([{"alias": "x"}], "items[0].text: field required"),
    ([{"text": "a", "alias": 3}], "items[0].alias: expected a string, got a number"),
    ([{"text": "  ", "alias": "x"}], "items[0].text: must not be empty"),
    ([{"text": "a", "alias": "b", "case_sensitive": "yes"}], "items[0].case_sensitive: expected true or false"),
    ([{"text": "a", "alias": "b", "phoneme": "x"}], "items[0]: unknown field(s) ['phoneme']"),
    ([{"text": "a" * (MAX_ITEM_CHARS + 1), "alias": "b"}], f"over the limit of {MAX_ITEM_CHARS}"),
    ([{"text": "nul\u0000", "alias": "b"}], "items[0].text: a control character (U+0000) at position 3"),
    ([{"text": "a", "alias": "b"}, {"text": "c", "alias": "\u009bx"}], "items[1].alias: a control character (U+009B)"),
    ([{"text": "a", "alias": "\udc00"}], "items[0].alias: an unpaired surrogate (U+DC00)"),
])
def test_bad_entries_get_a_precise_message(raw, message):
    with pytest.raises(InvalidPronunciationDictError) as err:
        parse_items(raw)
    assert message in str(err.value)
    assert not isinstance(err.value, IpaNotSupportedError)


async def test_names_are_checked(make_store):
    store = make_store().dictionaries
    for name, message in [("", "must not be empty"), (5, "expected a string"), ("x" * 300, "over the limit"),
                          ("a\u0000", "a control character"), ("\x1b[1m", "a control character")]:
        with pytest.raises(InvalidPronunciationDictError, match=message):
            await store.create(name=name)  # type: ignore[arg-type]


async def test_concurrent_updates_on_one_replica_all_land(make_store):
    """PATCHes racing on one replica take turns instead of exhausting each other's compare-and-set
    attempts (the audit saw 21 of 40 fail on Redis, 24 of 40 on SQLite, with a 400)."""
    store = make_store().dictionaries
    d = await store.create(name="busy", items=[PronunciationItem("a", "b")])
    results = await asyncio.gather(*(store.update(d.id, items=[PronunciationItem("word", f"alias-{i}")])
                                     for i in range(40)), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, failures[:3]
    assert (await store.get(d.id)).items[0].alias.startswith("alias-")


async def test_an_update_that_keeps_losing_its_compare_and_set_is_a_retryable_unavailable():
    """Only other replicas' writers can make it lose now; if they always win it is the store being
    busy (503 with retry advice), not a bad request (400, which the SDKs never retry)."""
    from voices.dictionaries import MemoryDictionaryStore
    from voices.errors import VoiceStoreUnavailableError

    class AlwaysOvertaken(MemoryDictionaryStore):
        async def _replace(self, old, new) -> bool:
            return False

    store = AlwaysOvertaken()
    d = await store.create(name="contended")
    with pytest.raises(VoiceStoreUnavailableError, match="kept changing under this update"):
        await store.update(d.id, name="mine")
    assert VoiceStoreUnavailableError.retryable


@pytest.mark.parametrize("on", ["backend", "memory"])
async def test_a_deleted_dictionary_still_works_as_a_page_cursor(make_store, on):
    """As for voices: an SDK walk whose cursor was deleted meanwhile (here on another replica) goes
    on from where it stood instead of failing half-way; an id that never was is still an error."""
    from voices.dictionaries import MemoryDictionaryStore

    store = make_store().dictionaries if on == "backend" else MemoryDictionaryStore()
    other = make_store().dictionaries if on == "backend" else store
    ids = [(await store.create(name=f"d{i}")).id for i in range(6)]
    assert [d.id for d in (await store.list(limit=2)).data] == ids[:2]
    await other.delete(ids[1])
    assert [d.id for d in (await store.list(limit=2, starting_after=ids[1])).data] == ids[2:4]
    await other.delete(ids[4])
    assert [d.id for d in (await store.list(limit=2, ending_before=ids[4])).data] == ids[2:4]
    with pytest.raises(InvalidCursorError, match="starting_after='never-made'"):  # 400 invalid_cursor, as for voices
        await store.list(starting_after="never-made")
