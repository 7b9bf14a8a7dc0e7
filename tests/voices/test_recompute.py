"""voices/recompute.py: a voice stored under another checkpoint gets this checkpoint's prefix at its
first use, once, for every replica; one without reference codes is refused with a precise error."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
import torch

from tests.voices.conftest import StoreFactory, make_record
from tests.voices.standins import QueryPoolCompressor
from voices.errors import VoiceIncompatibleError, VoiceNotFoundError
from voices.recompute import PrefixRecomputer
from voices.store import VoiceStore


class CountingReads:
    """Counts a store's full-record reads (the round trip a recompute needs and a hot voice must not)."""

    def __init__(self, store: VoiceStore) -> None:
        self.records = 0
        fetch = store._fetch_record

        async def counted(voice_id: str):
            self.records += 1
            return await fetch(voice_id)

        store._fetch_record = counted  # type: ignore[method-assign]


async def test_a_voice_of_another_checkpoint_is_recomputed_once_and_every_replica_reads_it(
        make_store: StoreFactory) -> None:
    store, replica = make_store(), make_store()
    old = make_record("v-old", model_fingerprint="fp-old", seed=1)  # prefix [8, 16] from "another model"
    await store.put(old)
    assert (await replica.get_prompt("v-old")).model_fingerprint == "fp-old"  # cached on the replica

    compress = QueryPoolCompressor(hidden=24, seed=5)  # this checkpoint: another hidden size too
    prompts = PrefixRecomputer(store, compress, "fp-new")
    expected = compress(old.ref_codes.long())  # [8, 24]
    compress.calls = 0
    got = await asyncio.gather(*(prompts.get_prompt("v-old") for _ in range(5)))
    assert compress.calls == 1  # five concurrent first uses share one recompute
    for prompt in got:
        assert (prompt.voice_id, prompt.model_fingerprint, prompt.prefix.shape) == ("v-old", "fp-new", (8, 24))
        assert torch.equal(prompt.prefix, expected)

    # stored, so the other replica and a later start read it from the store without recomputing
    record = await replica.get_record("v-old")
    assert record.voice.model_fingerprint == "fp-new" and torch.equal(record.prefix, expected)
    assert torch.equal(record.ref_codes, old.ref_codes) and record.voice.name == old.voice.name
    assert torch.equal((await replica.get_prompt("v-old")).prefix, expected)
    again = PrefixRecomputer(replica, compress, "fp-new")
    assert torch.equal((await again.get_prompt("v-old")).prefix, expected) and compress.calls == 1


async def test_a_voice_of_this_checkpoint_costs_no_extra_read(make_store: StoreFactory) -> None:
    store = make_store()
    record = make_record("v-same", model_fingerprint="fp-1")
    await store.put(record)
    compress = QueryPoolCompressor()
    prompts = PrefixRecomputer(store, compress, "fp-1")
    await prompts.get_prompt("v-same")  # fills the prompt cache
    reads = CountingReads(store)
    for _ in range(3):
        assert torch.equal((await prompts.get_prompt("v-same")).prefix, record.prefix)
    assert reads.records == 0 and compress.calls == 0


async def test_a_voice_without_reference_codes_is_refused_and_kept(make_store: StoreFactory, caplog) -> None:
    store = make_store()
    await store.put(make_record("no-codes", model_fingerprint="fp-old", with_codes=False))
    await store.put(make_record("unrecorded", model_fingerprint="", with_codes=False))
    prompts = PrefixRecomputer(store, QueryPoolCompressor(), "fp-new")
    with caplog.at_level(logging.WARNING, logger="voices.recompute"):
        for _ in range(3):
            with pytest.raises(VoiceIncompatibleError) as info:
                await prompts.get_prompt("no-codes")
    message = str(info.value)
    for part in ("'no-codes'", "[8, 16]", "'fp-old'", "'fp-new'", "no stored reference codes", "clone it again"):
        assert part in message, (part, message)
    warnings = [r for r in caplog.records if r.name == "voices.recompute"]
    assert [r.getMessage() for r in warnings] == [message]  # told once, not once per request
    with pytest.raises(VoiceIncompatibleError, match="a model that was not recorded"):
        await prompts.get_prompt("unrecorded")
    assert (await store.get("no-codes")).model_fingerprint == "fp-old"  # nothing stored or deleted
    with pytest.raises(VoiceNotFoundError):
        await prompts.get_prompt("missing")


async def test_a_caller_that_goes_away_does_not_cancel_the_recompute(make_store: StoreFactory) -> None:
    store = make_store()
    old = make_record("v-slow", model_fingerprint="fp-old")
    await store.put(old)
    started, release = threading.Event(), threading.Event()
    inner = QueryPoolCompressor(seed=3)

    def slow_compress(codes: torch.Tensor) -> torch.Tensor:  # runs in a worker thread
        started.set()
        release.wait(10)
        return inner(codes)

    prompts = PrefixRecomputer(store, slow_compress, "fp-new")
    first = asyncio.create_task(prompts.get_prompt("v-slow"))
    assert await asyncio.to_thread(started.wait, 10)
    first.cancel()  # its client hung up while the prefix was being computed
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await first
    for _ in range(200):  # the recompute goes on and stores its prefix for the next request
        if (await store.get("v-slow")).model_fingerprint == "fp-new":
            break
        await asyncio.sleep(0.05)
    prompt = await prompts.get_prompt("v-slow")
    assert prompt.model_fingerprint == "fp-new" and inner.calls == 1
    assert torch.equal(prompt.prefix, QueryPoolCompressor(seed=3)(old.ref_codes.long()))
