"""The built-in unconditioned voice on a live gateway: listed with a stable id next to the default
voice, read-only, and spoken with no speaker prefix (audio unlike the default voice's, the same
for the same seed, on /tts/bytes and the WebSocket alike). ``gepard synth --voice none`` too."""

from __future__ import annotations

import uuid

import cartesia
import pytest
import soundfile as sf

from api.app import DEFAULT_VOICE_ID, UNCONDITIONED_VOICE_ID
from api.cli import main
from tests.api.routes._voices_support import tts_bytes, tts_ws


def test_listed_beside_the_default_voice_with_a_stable_id_and_read_only(gateway):
    assert UNCONDITIONED_VOICE_ID == str(uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/gepard-server/voices/unconditioned"))
    client = cartesia.Cartesia(api_key="unused", base_url=gateway.url, max_retries=0)
    listed = {v.id: v for v in client.voices.list(limit=100)}
    assert {DEFAULT_VOICE_ID, UNCONDITIONED_VOICE_ID} <= set(listed)
    voice = client.voices.get(UNCONDITIONED_VOICE_ID)
    assert voice.name == "Gepard (unconditioned)" and "No speaker prefix" in voice.description
    with pytest.raises(cartesia.PermissionDeniedError):
        client.voices.delete(UNCONDITIONED_VOICE_ID)


def test_it_speaks_without_a_prefix_unlike_the_default_voice(gateway):
    unconditioned = tts_bytes(gateway.url, UNCONDITIONED_VOICE_ID, seed=3)
    assert unconditioned.status_code == 200 and len(unconditioned.content) == 24 * 1024 * 2  # 24 frames
    assert unconditioned.content == tts_bytes(gateway.url, UNCONDITIONED_VOICE_ID, seed=3).content
    assert unconditioned.content != tts_bytes(gateway.url, DEFAULT_VOICE_ID, seed=3).content
    audio, events = tts_ws(gateway.ws_url, {"mode": "id", "id": UNCONDITIONED_VOICE_ID}, seed=3)
    assert events[-1]["type"] == "done" and audio == unconditioned.content


def test_synth_chooses_the_unconditioned_voice(tiny_ckpt_dir, tmp_path):
    common = ["--model", str(tiny_ckpt_dir), "--seed", "5", "--temperature", "0"]
    outs = {}
    for name, flags in [("default", []), ("none", ["--voice", "none"]), ("flag", ["--unconditioned"])]:
        out = tmp_path / f"{name}.wav"
        assert main(["synth", "Hello there.", "-o", str(out), *common, *flags]) == 0
        outs[name], _ = sf.read(str(out), dtype="int16")
    assert (outs["none"] == outs["flag"]).all()
    assert outs["none"].shape == outs["default"].shape and not (outs["none"] == outs["default"]).all()


def test_synth_refuses_a_clip_and_the_flag_together(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["synth", "Hi.", "-o", str(tmp_path / "x.wav"), "--voice", "ref.wav", "--unconditioned"])
    assert exit_info.value.code == 2 and "exclude each other" in capsys.readouterr().err
