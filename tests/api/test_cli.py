"""The ``gepard`` command: synth writes a WAV of the expected length, serve fails clearly offline, and a
serving gateway redacts credentials from its log and bounds request heads."""

import re
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


def test_serve_logs_no_credentials_and_bounds_headers(tiny_ckpt_dir, tmp_path):
    """`gepard serve` end to end: its log (configure_logging) carries no key or token, whatever
    form they came in, and its uvicorn (api.server.uvicorn_config) refuses a 100 KB header."""
    import socket

    import httpx
    from websockets.sync.client import connect

    from tests.api.live import ServerProcess

    key = "sk_cli_serve_5Hq0Wm2Tz7"
    env = {"GEPARD_MODEL": str(tiny_ckpt_dir), "GEPARD_BACKEND": "torch", "GEPARD_DEVICE": "cpu",
           "GEPARD_DTYPE": "float32", "GEPARD_API_KEYS": key, "GEPARD_DATA_DIR": str(tmp_path / "data"),
           "GEPARD_LOG_LEVEL": "DEBUG", "GEPARD_REDIS_URL": "", "REDIS_URL": ""}
    server = ServerProcess.start(env, tmp_path / "server.log")
    try:
        token = httpx.post(server.url + "/access-token", json={}, headers={"X-API-Key": key}, timeout=30).json()["token"]
        ws_url = f"ws://127.0.0.1:{server.port}/tts/websocket"
        for query in (f"api_key={key}", f"access_token={token}"):
            with connect(f"{ws_url}?{query}"):
                pass
        assert httpx.get(server.url + "/voices", params={"api_key": key + "x"}, timeout=30).status_code == 401
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            try:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n")
            except OSError:  # refused and closed while we were still sending: the answer is queued
                pass
            assert sock.recv(64).startswith(b"HTTP/1.1 431 ")
    finally:
        server.stop()
    log = (tmp_path / "server.log").read_text()
    assert "WebSocket /tts/websocket?api_key=[REDACTED]" in log and "access_token=[REDACTED]" in log
    assert key not in log and token not in log and token.split(".")[2] not in log
    # the serving process froze its start-up heap (api/heap.py) once warm, before it said ready
    frozen = re.search(r"garbage collector: (\d+) objects from start-up frozen", log)
    assert frozen and int(frozen.group(1)) > 100_000, log[-3000:]
    assert frozen.start() < log.index("ready: warm-up done")
