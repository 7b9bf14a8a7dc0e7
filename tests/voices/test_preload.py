"""voices/preload.py: a directory of clips becomes builtin voices, once per clip and checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.voices.conftest import StoreFactory
from tests.voices.standins import EnergyEncoder, QueryPoolCompressor
from voices.cloning import VoiceCloner
from voices.errors import ReadOnlyVoiceError
from voices.preload import preload_voice_id, preload_voices


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
    assert linda.id == preload_voice_id((clip_dir / "linda.wav").read_bytes(), "fp-1")
    calls = encoder.calls

    restarted = make_store()  # a restart, or a second replica
    second = await preload_voices(clip_dir, VoiceCloner(encoder, QueryPoolCompressor(), "fp-1", restarted))
    assert second.created == [] and sorted(v.id for v in second.existing) == sorted(v.id for v in first.created)
    assert encoder.calls == calls  # nothing re-encoded
    assert await restarted.count() == 2
    with pytest.raises(ReadOnlyVoiceError):
        await restarted.delete(linda.id)

    # a new checkpoint needs new prefixes, so the same clips get new ids
    third = await preload_voices(clip_dir, VoiceCloner(encoder, QueryPoolCompressor(), "fp-2", restarted))
    assert len(third.created) == 2 and not {v.id for v in third.created} & {v.id for v in first.created}


async def test_bad_sidecar_and_missing_directory(make_store: StoreFactory, clip_dir: Path, tmp_path: Path) -> None:
    (clip_dir / "audio_en.json").write_text(json.dumps({"colour": "blue"}))
    report = await preload_voices(clip_dir, VoiceCloner(EnergyEncoder(), QueryPoolCompressor(), "fp", make_store()))
    assert "audio_en.json: expected an object with" in report.failed["audio_en.wav"]
    assert [v.name for v in report.created] == ["Linda"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        await preload_voices(tmp_path / "nope", VoiceCloner(EnergyEncoder(), QueryPoolCompressor(), "fp", make_store()))
