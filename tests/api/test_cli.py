"""The ``gepard`` command: synth writes a WAV of the expected length, serve fails clearly offline."""

import subprocess
import sys

import numpy as np
import soundfile as sf

from api.cli import main
from tests.conftest import REF_AUDIO_DIR

FRAMES = 24  # the tiny checkpoint's counter stops every request after 24 frames


def test_synth_writes_a_22khz_wav_of_the_generated_length(tiny_ckpt_dir, tmp_path, capsys):
    out = tmp_path / "hello.wav"
    assert main(["synth", "Hello there.", "-o", str(out), "--model", str(tiny_ckpt_dir), "--seed", "3"]) == 0
    info = sf.info(str(out))
    assert (info.samplerate, info.channels, info.subtype) == (22050, 1, "PCM_16")
    assert info.frames == FRAMES * 1024
    audio, _ = sf.read(str(out), dtype="float32")
    assert np.abs(audio).max() > 0.01  # not silence
    assert f"{FRAMES} frames" in capsys.readouterr().out


def test_synth_with_a_cloned_voice(tiny_ckpt_dir, tmp_path):
    plain, cloned = tmp_path / "plain.wav", tmp_path / "cloned.wav"
    common = ["--model", str(tiny_ckpt_dir), "--seed", "3", "--temperature", "0"]
    assert main(["synth", "Hello there.", "-o", str(plain), *common]) == 0
    # a 44.1 kHz clip: loaded, resampled to 22.05 kHz, trimmed, encoded, compressed to a prefix
    assert main(["synth", "Hello there.", "-o", str(cloned), "--voice", str(REF_AUDIO_DIR / "audio_en.wav"), *common]) == 0
    a, _ = sf.read(str(plain), dtype="float32")
    b, _ = sf.read(str(cloned), dtype="float32")
    assert a.shape == b.shape == (FRAMES * 1024,)
    assert not np.array_equal(a, b)  # the speaker prefix changed the frames


def test_synth_rejects_an_empty_text(tiny_ckpt_dir, tmp_path, capsys):
    assert main(["synth", "   ", "-o", str(tmp_path / "x.wav"), "--model", str(tiny_ckpt_dir)]) == 2
    assert "empty" in capsys.readouterr().err


def test_serve_without_a_reachable_model_says_what_to_set(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin", "GEPARD_DATA_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "api.cli", "serve", "--port", "1"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert "nineninesix/gepard-1.0" in proc.stdout and "GEPARD_MODEL" in proc.stdout
