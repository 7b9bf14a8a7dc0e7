"""voices/preload.py: a directory of clips becomes builtin voices, once per clip and checkpoint."""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from pathlib import Path

import pytest
import torch

from tests.voices.conftest import StoreFactory
from tests.voices.standins import EnergyEncoder, QueryPoolCompressor
from voices.cloning import VoiceCloner
from voices.errors import ReadOnlyVoiceError
from voices.preload import PRELOAD_NAMESPACE, preload_voice_id, preload_voices


@pytest.fixture
def clip_dir(tmp_path: Path, ref_audio_dir: Path) -> Path:
    root = tmp_path / "clips"
    root.mkdir()
    shutil.copy(ref_audio_dir / "audio_en.wav", root / "audio_en.wav")
    shutil.copy(ref_audio_dir / "linda.wav", root / "linda.wav")
    (root / "linda.json").write_text(json.dumps({"name": "Linda", "gender": "feminine", "description": "calm"}))
    (root / "broken.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVE" + bytes(64))
    (root / "README.txt").write_text("not a clip")
    return root


async def test_preload_is_idempotent_across_restarts(make_store: StoreFactory, clip_dir: Path) -> None:
    encoder = EnergyEncoder()
    first = await preload_voices(clip_dir, VoiceCloner(encoder, QueryPoolCompressor(), "fp-1", make_store()))
    assert sorted(v.name for v in first.created) == ["Linda", "audio_en"]
    assert list(first.failed) == ["broken.wav"] and "cannot be decoded" in first.failed["broken.wav"]
    linda = next(v for v in first.created if v.name == "Linda")
    assert (linda.gender, linda.description, linda.builtin, linda.is_owner, linda.access) == \
        ("feminine", "calm", True, False, "public")
    assert linda.id == preload_voice_id((clip_dir / "linda.wav").read_bytes())
    calls = encoder.calls

    restarted = make_store()  # a restart, or a second replica
    second = await preload_voices(clip_dir, VoiceCloner(encoder, QueryPoolCompressor(), "fp-1", restarted))
    assert second.created == [] and sorted(v.id for v in second.existing) == sorted(v.id for v in first.created)
    assert encoder.calls == calls  # nothing re-encoded
    assert await restarted.count() == 2
    with pytest.raises(ReadOnlyVoiceError):
        await restarted.delete(linda.id)


async def test_a_new_checkpoint_recomputes_the_preloaded_voices_under_their_ids(make_store: StoreFactory,
                                                                               clip_dir: Path) -> None:
    encoder = EnergyEncoder()
    first = await preload_voices(clip_dir, VoiceCloner(encoder, QueryPoolCompressor(seed=1), "fp-1", make_store()))
    calls = encoder.calls

    store = make_store()  # the restart on the new checkpoint
    compress = QueryPoolCompressor(hidden=24, seed=2)
    second = await preload_voices(clip_dir, VoiceCloner(encoder, compress, "fp-2", store))
    assert second.created == [] and second.removed == [] and encoder.calls == calls  # nothing re-encoded
    assert sorted(v.id for v in second.recomputed) == sorted(v.id for v in first.created)
    listed = (await store.list(limit=100)).data
    assert sorted(v.id for v in listed) == sorted(v.id for v in first.created)  # one voice per clip
    for voice in listed:
        record = await store.get_record(voice.id)
        assert voice.model_fingerprint == "fp-2" and voice.builtin
        assert torch.equal(record.prefix, compress(record.ref_codes.long()))
    third = await preload_voices(clip_dir, VoiceCloner(encoder, compress, "fp-2", make_store()))
    assert len(third.existing) == 2 and third.recomputed == []  # settled: a restart changes nothing


async def test_copies_under_the_old_per_checkpoint_ids_are_removed(make_store: StoreFactory, clip_dir: Path) -> None:
    store = make_store()
    linda = (clip_dir / "linda.wav").read_bytes()
    # what earlier versions left after a checkpoint change: one builtin copy per checkpoint
    cloner = VoiceCloner(EnergyEncoder(), QueryPoolCompressor(), "fp-1", store)
    old_id = str(uuid.uuid5(PRELOAD_NAMESPACE, f"{hashlib.sha256(linda).hexdigest()}:fp-1"))  # their id scheme
    await cloner.clone(linda, "linda.wav", None, "Linda", "en", voice_id=old_id, builtin=True)
    mine = await cloner.clone(linda, "linda.wav", None, "my own clone", "en")  # not a preload: kept

    report = await preload_voices(clip_dir, VoiceCloner(EnergyEncoder(), QueryPoolCompressor(), "fp-2", store))
    assert report.removed == [old_id]
    listed = {v.id: v.name for v in (await store.list(limit=100)).data}
    assert listed == {preload_voice_id(linda): "Linda", mine.id: "my own clone",
                      preload_voice_id((clip_dir / "audio_en.wav").read_bytes()): "audio_en"}


async def test_bad_sidecar_and_missing_directory(make_store: StoreFactory, clip_dir: Path, tmp_path: Path) -> None:
    (clip_dir / "audio_en.json").write_text(json.dumps({"colour": "blue"}))
    report = await preload_voices(clip_dir, VoiceCloner(EnergyEncoder(), QueryPoolCompressor(), "fp", make_store()))
    assert "audio_en.json: expected an object with" in report.failed["audio_en.wav"]
    assert [v.name for v in report.created] == ["Linda"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        await preload_voices(tmp_path / "nope", VoiceCloner(EnergyEncoder(), QueryPoolCompressor(), "fp", make_store()))
