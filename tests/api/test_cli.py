"""The ``gepard`` command: synth writes a WAV of the expected length, serve fails clearly offline (and
on a port in use, before anything loads), a signal during start-up stops it, and a serving gateway
redacts credentials from its log and bounds request heads."""

import asyncio
import contextlib
import importlib.util
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import AsyncIterator

import numpy as np
import pytest
import soundfile as sf
from starlette.applications import Starlette

from api import cli, settings
from api.cli import build_parser, main
from api.server import GracefulServer, uvicorn_config
from api.settings import Settings
from codec_worker.errors import CodecFormatError
from tests.api.live import REPO
from tests.ports import free_port
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
    assert "1 segment(s), 1.11 s at 22050 Hz" in capsys.readouterr().out


def test_synth_reads_the_text_as_the_server_does(tiny_ckpt_dir, tmp_path, capsys):
    """Normalisation ("$5" is "five dollars": the same frames at temperature 0), one engine request a
    sentence (the tiny checkpoint stops each after 24 frames), and a break's silence; --raw sends the
    text as written in one request, as the reference runner does."""
    common = ["--model", str(tiny_ckpt_dir), "--seed", "3", "--temperature", "0"]
    written, said, raw = tmp_path / "written.wav", tmp_path / "said.wav", tmp_path / "raw.wav"
    assert main(["synth", 'It costs $5. <break time="1s"/>Dr. Smith agreed.', "-o", str(written), *common]) == 0
    assert "3 segment(s)" in capsys.readouterr().out  # the two sentences and the break between them
    assert main(["synth", 'It costs five dollars. <break time="1s"/>Doctor Smith agreed.', "-o", str(said),
                 *common]) == 0
    a, _ = sf.read(str(written), dtype="float32")
    b, _ = sf.read(str(said), dtype="float32")
    assert a.shape == (2 * FRAMES * 1024 + 22050,) and np.array_equal(a, b)
    assert not a[FRAMES * 1024:FRAMES * 1024 + 22050].any()  # the break, after the first sentence
    assert main(["synth", "It costs $5. Dr. Smith agreed.", "--raw", "-o", str(raw), *common]) == 0
    assert sf.info(str(raw)).frames == FRAMES * 1024  # one request, stopped after 24 frames
    assert f"{FRAMES} frames (stop)" in capsys.readouterr().out
    spanish = tmp_path / "es.wav"
    assert main(["synth", "Cuesta 5 €.", "--language", "es", "-o", str(spanish), *common]) == 0
    assert main(["synth", "Cuesta cinco euros.", "--language", "es", "-o", str(said), *common]) == 0
    assert np.array_equal(sf.read(str(spanish), dtype="float32")[0], sf.read(str(said), dtype="float32")[0])


@pytest.mark.parametrize("text, error", [
    ("...", "nothing to say"),
    ('Hi <break time="99s"/>', "longer than the 10 s a break may last"),
])
def test_synth_refuses_a_text_the_server_would_refuse(tiny_ckpt_dir, tmp_path, capsys, text, error):
    assert main(["synth", text, "-o", str(tmp_path / "x.wav"), "--model", str(tiny_ckpt_dir)]) == 2
    assert error in capsys.readouterr().err
    assert not (tmp_path / "x.wav").exists()


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


# -- bad arguments: one line and exit 2, before any model loads ------------------------------------


@pytest.mark.parametrize("extra, error", [
    (["--voice", "/nope.wav"], "--voice /nope.wav: No such file or directory"),
    (["--voice", str(REPO / "README.md")], "reference clip 'README.md' has an unsupported audio format"),
    (["-o", "/nonexistent-dir/x.wav"], "-o /nonexistent-dir/x.wav: directory /nonexistent-dir does not exist"),
    (["-o", "{tmp}/x.mp3"], "-o {tmp}/x.mp3: the suffix must name a 16-bit PCM audio format (.wav, .flac, ...)"),
    (["-o", "{tmp}/x.txt"], "-o {tmp}/x.txt: the suffix must name a 16-bit PCM audio format"),
    (["-o", "{tmp}/x"], "-o {tmp}/x: the suffix must name a 16-bit PCM audio format"),
    (["-o", "{tmp}/dir.wav"], "-o {tmp}/dir.wav: is a directory"),
])
def test_synth_refuses_bad_files_before_loading_the_model(tmp_path, capsys, extra, error):
    (tmp_path / "dir.wav").mkdir()
    # the model does not exist: each refusal must come first, not after a load (or a whole synthesis)
    argv = ["synth", "Hello.", "-o", str(tmp_path / "x.wav"), "--model", str(tmp_path / "no-model"), *extra]
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gepard synth: error: " + error.replace("{tmp}", str(tmp_path))), err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("argv, error", [
    (["--log-level", "foo", "tiny", "x"], "argument --log-level: invalid choice: 'FOO'"),
    (["synth", "Hi.", "-o", "x.wav", "--dtype", "foo"], "argument --dtype: invalid choice: 'foo'"),
    (["synth", "Hi.", "-o", "x.wav", "--device", "gpu"], "argument --device: 'gpu' is not a device"),
    (["synth", "Hi.", "-o", "x.wav", "--device", "cuda:99"], "argument --device: 'cuda:99' is not available"),
    (["serve", "--dtype", "int8"], "argument --dtype: invalid choice: 'int8'"),
])
def test_bad_options_are_usage_errors(argv, error, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # were an option let through, what it writes lands here
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and error in capsys.readouterr().err


def test_option_spellings_still_accepted():
    args = build_parser().parse_args(["--log-level", "debug", "synth", "Hi.", "-o", "x.wav", "--dtype", "bf16",
                                      "--device", "cpu"])
    assert (args.log_level, args.dtype, args.device) == ("DEBUG", "bf16", "cpu")
    assert cli.DTYPES == settings.DTYPES and cli.LOG_LEVELS == settings.LOG_LEVELS  # spelled out, not imported


def test_serve_refuses_what_it_could_not_start_with_one_line_naming_the_variable(tiny_ckpt_dir, tmp_path):
    """Each refused in the settings, in seconds, rather than a traceback, a load first, or (the data
    directory) a server that stays "starting" for ever. The four run side by side."""
    a_file = tmp_path / "file.pem"
    a_file.write_text("not a certificate")
    base = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
            "GEPARD_MODEL": str(tiny_ckpt_dir), "GEPARD_BACKEND": "torch", "GEPARD_DATA_DIR": str(tmp_path / "data")}
    cases = {
        "GEPARD_DATA_DIR": {"GEPARD_DATA_DIR": str(a_file)},
        "GEPARD_TLS_CERTFILE and GEPARD_TLS_KEYFILE": {"GEPARD_TLS_CERTFILE": str(a_file), "GEPARD_TLS_KEYFILE": str(a_file)},
        "GEPARD_CODEC": {"GEPARD_CODEC": "/nope.nemo"},
        "GEPARD_DEVICE": {"GEPARD_DEVICE": "cuda:99"},
    }
    procs = {name: subprocess.Popen([sys.executable, "-m", "api.cli", "serve", "--port", "1"], cwd=REPO,
                                    env={**base, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name, env in cases.items()}
    try:
        for name, proc in procs.items():
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 2, (name, out[-3000:])
            assert out.count("\n") == 1 and out.startswith(f"gepard serve: invalid settings: {name}: "), (name, out)
    finally:
        for proc in procs.values():
            proc.kill()


def test_a_start_up_failure_is_one_line_and_exit_3(caplog):
    """An engine or codec that fails to load while the app starts: one line naming the error, not
    Starlette's traceback in one log record (a 2,000-character line in JSON logs)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        raise CodecFormatError("/x/codec.nemo is not a .nemo archive\n(a tar file)")
        yield

    caplog.set_level(logging.DEBUG)
    settings = Settings.from_env({"GEPARD_PORT": "1"})
    server = GracefulServer(uvicorn_config(settings, Starlette(lifespan=lifespan)))
    with pytest.raises(SystemExit) as info:  # uvicorn's start-up failure: `gepard serve` exits 3
        server.run()
    assert info.value.code == 3 and not server.started
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        "start-up failed: CodecFormatError: /x/codec.nemo is not a .nemo archive (a tar file)",
        "Application startup failed. Exiting."]
    assert not any(r.exc_info for r in errors)
    # the traceback is still there for whoever asks for DEBUG
    assert any(r.levelno == logging.DEBUG and r.exc_info and r.getMessage() == "start-up failed" for r in caplog.records)


def test_serve_says_a_port_in_use_at_once(tiny_ckpt_dir, tmp_path):
    """The address is bound before anything loads: a port in use is one line and exit 2 in the
    seconds the settings take, not uvicorn's error after the model and codec have loaded (~47 s on
    the tiny checkpoint, minutes on real weights)."""
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "GEPARD_MODEL": str(tiny_ckpt_dir), "GEPARD_BACKEND": "torch", "GEPARD_DEVICE": "cpu",
           "GEPARD_DATA_DIR": str(tmp_path / "data")}
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "api.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout == (f"gepard serve: cannot listen on 127.0.0.1:{port}: Address already in use "
                           "(set GEPARD_HOST/GEPARD_PORT or --host/--port)\n")
    assert "Waiting for application startup" not in proc.stderr  # nothing loaded


def test_a_signal_during_start_up_stops_it_and_closes_what_it_opened(caplog):
    """A signal while the app starts cancels the start-up: what the lifespan opened is closed and
    the server returns at once, not once everything has loaded (33 s on real weights with torch,
    67 s with vLLM, however many Ctrl-Cs)."""
    opened, closed = threading.Event(), threading.Event()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        opened.set()
        try:
            await asyncio.sleep(60)  # a load under way
            yield
        finally:
            closed.set()

    caplog.set_level(logging.INFO)
    settings = Settings.from_env({})
    server = GracefulServer(uvicorn_config(settings, Starlette(lifespan=lifespan), host="127.0.0.1", port=free_port()))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    assert opened.wait(30)
    stop_at = time.monotonic()
    server.handle_exit(signal.SIGTERM, None)
    thread.join(timeout=10)
    assert not thread.is_alive() and time.monotonic() - stop_at < 5
    assert closed.is_set() and server.stopped_during_startup and not server.started
    messages = [r.getMessage() for r in caplog.records if r.name == "api.server"]
    assert messages[-1] == "start-up stopped" and messages[-2].startswith("SIGTERM during start-up: stopping it")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # a stop on purpose is no error


async def test_open_runtime_cancelled_while_the_engine_loads_closes_the_engine(monkeypatch, tmp_path):
    """The engine loads in a thread nothing can stop: cancelled meanwhile (a signal during start-up),
    open_runtime waits for the engine and closes it, so nothing it started (vLLM's engine processes,
    the torch backend's worker thread) outlives the start-up."""
    from api import app as app_module

    closed: list[bool] = []

    class Engine:
        async def aclose(self) -> None:
            closed.append(True)

    def load() -> Engine:
        time.sleep(0.3)
        return Engine()

    async def create_engine(options: object) -> Engine:
        return await asyncio.get_running_loop().run_in_executor(None, load)

    monkeypatch.setattr(app_module, "create_engine", create_engine)
    task = asyncio.create_task(app_module.open_runtime(Settings(model=str(tmp_path), data_dir=tmp_path / "data")))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed == [True]


@pytest.mark.skipif(importlib.util.find_spec("nemo") is None, reason="needs NeMo (a codec load that takes seconds)")
def test_serve_stopped_while_the_codec_loads_exits_at_once(tiny_ckpt_dir, tmp_path):
    """`gepard serve` given SIGTERM while the codec loads (NeMo's import: ~15-25 s here): the engine
    is closed and the process exits 0 at once, without waiting for the load (a worker thread nothing
    can stop)."""
    log_path = tmp_path / "server.log"
    env = {**os.environ, "GEPARD_MODEL": str(tiny_ckpt_dir), "GEPARD_BACKEND": "torch", "GEPARD_DEVICE": "cpu",
           "GEPARD_CODEC_IMPL": "nemo", "GEPARD_DATA_DIR": str(tmp_path / "data"),
           "GEPARD_REDIS_URL": "", "REDIS_URL": "",
           "GEPARD_HOST": "127.0.0.1", "GEPARD_PORT": str(free_port())}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "api.cli", "serve"], cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "torch backend:" not in log_path.read_text():  # the engine is up; the codec loads next
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.05)
        stop_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert time.monotonic() - stop_at < 10  # not the ~15-25 s the codec load takes
        text = log_path.read_text()
        assert "SIGTERM during start-up: stopping it" in text and "start-up stopped" in text
        assert "codec loaded" not in text and "Traceback" not in text, text[-3000:]
    finally:
        proc.kill()


async def test_cfg_by_default_with_one_fast_path_slot_refuses_to_start(tiny_ckpt_dir, tmp_path):
    """GEPARD_CFG_SCALE above 1 makes every request use CFG, which takes two of the torch fast path's KV
    cache slots; with GEPARD_MAX_CONCURRENT_GENERATIONS=1 it has one, so every request would get a 400:
    start-up fails with one line naming both variables (the engine loaded for it is closed)."""
    from api.app import open_runtime
    from api.settings import SettingsError

    settings = Settings(model=str(tiny_ckpt_dir), backend="torch", device="cpu", dtype="float32", torch_path="fast",
                        data_dir=tmp_path / "data", cfg_scale=2.0, max_concurrent_generations=1,
                        max_streams=1)
    with pytest.raises(SettingsError) as failed:
        await open_runtime(settings)
    message = str(failed.value)
    assert message.startswith("invalid settings: GEPARD_CFG_SCALE=2 makes every request use classifier-free "
                              "guidance"), message
    assert "torch fast path has 1" in message and "GEPARD_MAX_CONCURRENT_GENERATIONS of 2" in message
    assert "\n" not in message
