"""voices/cloning.py: a clip becomes a stored voice; a failure at any step stores nothing."""

from __future__ import annotations

import asyncio
import io
import math
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from tests.voices.conftest import StoreFactory, make_record
from tests.voices.standins import EnergyEncoder, QueryPoolCompressor, energy_codes
from voices.audio_input import load_reference_clip
from voices.cloning import ClipLimits, VoiceCloner
from voices.errors import (
    ClipTooLargeError,
    ClipTooShortError,
    CorruptClipError,
    InvalidVoiceError,
    VoiceCloningError,
    VoiceExistsError,
    VoiceIncompatibleError,
)
from voices.store import VoiceStore


def cloner_for(store: VoiceStore, **kw) -> VoiceCloner:
    return VoiceCloner(kw.pop("encoder", EnergyEncoder()), kw.pop("compress", QueryPoolCompressor()),
                       "fp-1", store, **kw)


async def test_clone_stores_metadata_prefix_and_reference_codes(make_store: StoreFactory, ref_audio_dir: Path) -> None:
    store, replica = make_store(), make_store()
    compress = QueryPoolCompressor()
    cloner = cloner_for(store, compress=compress, user_id="user-7")
    clip = (ref_audio_dir / "audio_en.wav").read_bytes()
    voice = await cloner.clone(clip, "audio_en.wav", "audio/wav", "Emma", "en", description="clear",
                               gender="feminine", accent="american", base_voice_id="ignored")
    assert (voice.name, voice.language, voice.description, voice.gender, voice.accent) == \
        ("Emma", "en", "clear", "feminine", "american")
    assert (voice.is_owner, voice.access, voice.visibility, voice.builtin) == (True, "private", "owner", False)
    assert voice.model_fingerprint == "fp-1" and voice.to_metadata_dict()["user_id"] == "user-7"
    assert [loc.locale for loc in voice.locales] == ["en"]

    # the stored codes are the encoder's codes of the loaded clip, transposed to [T, 32]
    pcm = load_reference_clip(clip)
    expected_codes = (await EnergyEncoder().encode(pcm)).T
    record = await replica.get_record(voice.id)
    assert record.voice == voice
    assert record.ref_codes.shape == (math.ceil(len(pcm) / 1024), 32) and record.ref_codes.dtype == torch.int16
    assert torch.equal(record.ref_codes.long(), expected_codes)
    # ... and the prefix is the compressor's output on them, computed once
    prompt = await replica.get_prompt(voice.id)
    assert prompt.prefix.shape == (8, 16)
    assert torch.allclose(prompt.prefix, compress(expected_codes), atol=0, rtol=0)
    assert compress.calls == 2  # the clone, and our check above


async def test_same_clip_gives_the_same_prefix_under_new_ids(make_store: StoreFactory, ref_audio_dir: Path) -> None:
    store = make_store()
    cloner = cloner_for(store)
    clip = (ref_audio_dir / "linda.wav").read_bytes()
    a = await cloner.clone(clip, "linda.wav", None, "A", "en")
    b = await cloner.clone(clip, "linda.wav", None, "B", "en")
    assert a.id != b.id
    assert torch.equal((await store.get_prompt(a.id)).prefix, (await store.get_prompt(b.id)).prefix)


def wav(seconds: float, rate: int = 22050) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buf = io.BytesIO()
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate, format="WAV")
    return buf.getvalue()


class BrokenEncoder(EnergyEncoder):
    def __init__(self, result) -> None:
        super().__init__()
        self.result = result

    async def encode(self, audio: np.ndarray) -> torch.Tensor:
        self.calls += 1
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


FAILURES = [
    ("clip too short", {}, wav(1.0), ClipTooShortError, "1.00 s long"),
    ("corrupt clip", {}, b"not audio" * 10, CorruptClipError, "declared as wav"),
    ("encoder raises", {"encoder": BrokenEncoder(RuntimeError("GPU fell off"))}, wav(4.0),
     VoiceCloningError, "encoding the reference clip failed: GPU fell off"),
    ("encoder shape", {"encoder": BrokenEncoder(torch.zeros(8, 40, dtype=torch.long))}, wav(4.0),
     VoiceCloningError, r"encoder returned \(\(8, 40\), torch.int64\); expected integer codes \[32, T>0\]"),
    ("encoder range", {"encoder": BrokenEncoder(torch.full((32, 5), 70000))}, wav(4.0),
     VoiceCloningError, "outside the int16 range"),
    ("compress raises", {"compress": lambda codes: 1 / 0}, wav(4.0),
     VoiceCloningError, "compressing the reference codes failed: division by zero"),
    ("compress nan", {"compress": lambda codes: torch.full((8, 16), float("nan"))}, wav(4.0),
     VoiceCloningError, "non-finite"),
    ("compress shape", {"compress": lambda codes: torch.zeros(8)}, wav(4.0),
     VoiceCloningError, r"expected a float prefix \[K, hidden\]"),
    ("oversize", {"limits": ClipLimits(max_bytes=1000)}, wav(4.0), ClipTooLargeError, "the limit is 1000 bytes"),
]


@pytest.mark.parametrize("kwargs, clip, error, message", [pytest.param(*f[1:], id=f[0]) for f in FAILURES])
async def test_failure_at_any_step_stores_nothing(make_store: StoreFactory, kwargs, clip, error, message) -> None:
    store = make_store()
    await store.put(make_record("existing"))
    cloner = cloner_for(store, **kwargs)
    with pytest.raises(error, match=message):
        await cloner.clone(clip, "clip.wav", "audio/wav", "New", "en")
    assert await store.count() == 1
    assert [v.id for v in (await store.list()).data] == ["existing"]


async def test_bad_metadata_fails_before_any_audio_work(make_store: StoreFactory) -> None:
    store = make_store()
    encoder = EnergyEncoder()
    cloner = cloner_for(store, encoder=encoder)
    with pytest.raises(InvalidVoiceError, match="gender must be one of"):
        await cloner.clone(wav(4.0), "a.wav", None, "Name", "en", gender="male")
    with pytest.raises(InvalidVoiceError, match="voice name must be a non-empty string"):
        await cloner.clone(wav(4.0), "a.wav", None, "", "en")
    assert encoder.calls == 0 and await store.count() == 0


async def test_taken_id_stores_nothing_new(make_store: StoreFactory) -> None:
    store = make_store()
    await store.put(make_record("fixed", name="original"))
    with pytest.raises(VoiceExistsError):
        await cloner_for(store).clone(wav(4.0), "a.wav", None, "Other", "en", voice_id="fixed")
    assert (await store.get("fixed")).name == "original"
    assert await store.count() == 1


async def test_trimmed_to_max_ref_seconds(make_store: StoreFactory) -> None:
    store = make_store()
    cloner = cloner_for(store, limits=ClipLimits(max_ref_seconds=4.0))
    voice = await cloner.clone(wav(10.0, rate=44100), "long.wav", None, "Long", "en")
    record = await store.get_record(voice.id)
    assert record.ref_codes.shape[0] == math.ceil(4.0 * 22050 / 1024)


async def test_recompute_for_a_new_checkpoint_refreshes_every_replica(make_store: StoreFactory) -> None:
    store, replica = make_store(), make_store()
    old = cloner_for(store, compress=QueryPoolCompressor(seed=0))
    voice = await old.clone(wav(4.0), "a.wav", None, "Keep", "en", description="same")
    await store.update(voice.id, name="Renamed")
    old_prefix = (await replica.get_prompt(voice.id)).prefix  # cached on the replica

    new_compress = QueryPoolCompressor(seed=1)
    new = VoiceCloner(EnergyEncoder(), new_compress, "fp-2", store)
    updated = await new.recompute(voice.id)
    assert (updated.model_fingerprint, updated.name, updated.description) == ("fp-2", "Renamed", "same")
    record = await store.get_record(voice.id)
    assert torch.equal(record.prefix, new_compress(record.ref_codes.long()))
    prompt = await replica.get_prompt(voice.id)  # the generation changed: the replica refetches
    assert prompt.model_fingerprint == "fp-2" and not torch.equal(prompt.prefix, old_prefix)
    assert torch.equal(prompt.prefix, record.prefix)
    assert (await new.recompute(voice.id)) == updated  # already current: nothing to do

    await store.put(make_record("no-codes", with_codes=False))
    with pytest.raises(VoiceIncompatibleError, match="no stored reference codes"):
        await new.recompute("no-codes")


class BlockingEncoder(EnergyEncoder):
    """An encoder with a blocking ``encode_blocking``, as NanoCodecEncoder has: it holds its thread
    until ``gate`` is set (a long clip on a busy machine)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.entered, self.finished = threading.Event(), threading.Event(), threading.Event()
        self.threads: list[str] = []

    def encode_blocking(self, audio: np.ndarray) -> torch.Tensor:
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        try:
            assert self.gate.wait(30), "never released"
            return energy_codes(audio)
        finally:
            self.finished.set()


async def test_blocking_steps_run_on_the_clone_executor(make_store: StoreFactory) -> None:
    """Decode, encode and compress run on the cloner's executor (``max_concurrent`` threads of its
    own), never on the event loop's default executor, where the TTS routes encode audio."""
    from voices.cloning import MAX_CONCURRENT_CLONES

    store = make_store()
    encoder, compress_threads = BlockingEncoder(), []
    compress = QueryPoolCompressor()

    def compress_here(codes: torch.Tensor) -> torch.Tensor:
        compress_threads.append(threading.current_thread().name)
        return compress(codes)

    encoder.gate.set()
    cloner = cloner_for(store, encoder=encoder, compress=compress_here)
    voice = await cloner.clone(wav(4.0), "a.wav", None, "V", "en")
    record = await store.get_record(voice.id)
    assert torch.equal(record.ref_codes.long(), energy_codes(load_reference_clip(wav(4.0))).T)
    assert [t.split("_")[0] for t in encoder.threads + compress_threads] == ["voice-clone"] * 2
    assert cloner.max_concurrent == cloner.executor._max_workers == MAX_CONCURRENT_CLONES
    cloner.close()


async def test_a_cancelled_clone_waits_for_its_running_step_and_starts_no_other(make_store: StoreFactory) -> None:
    """A thread cannot be interrupted: a cancelled clone (its client left) returns only once the
    step running in its thread ended, so whoever holds a place for it holds it until then, and no
    later step (compress, store) runs."""
    store = make_store()
    encoder, compress = BlockingEncoder(), QueryPoolCompressor()
    cloner = cloner_for(store, encoder=encoder, compress=compress)
    task = asyncio.create_task(cloner.clone(wav(4.0), "a.wav", None, "Gone", "en"))
    try:
        assert await asyncio.to_thread(encoder.entered.wait, 10), "the clone never reached its encode"
        task.cancel()
        await asyncio.sleep(0.3)
        assert not task.done()  # its encode still runs in its thread: the cancel waits for it
        task.cancel()  # a second cancel changes nothing
        await asyncio.sleep(0.1)
        assert not task.done()
    finally:
        encoder.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert encoder.finished.is_set() and compress.calls == 0 and await store.count() == 0
