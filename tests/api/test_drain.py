"""Readiness and drain on a real `gepard serve` process (api/lifecycle.py, api/server.py).

SIGTERM with work in flight: /ready turns 503 at once, new requests, upgrades and contexts get
503 service_unavailable with retry advice, a running context and an SSE stream finish, idle
sockets close with 1012, and the process exits 0. At the drain timeout a context still open gets
one in-band error, never silence. SIGHUP drains as SIGTERM does; a second signal makes the cut at
once. Start-up: /ready is 503 until warm-up has gone through, which waits for the voice store, and
says why with an ERROR every WARM_UP_ERROR_EVERY_S while it cannot.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from api.app import DEFAULT_VOICE_ID
from tests.api.live import ServerProcess
from tests.api.routes.ws_helpers import gen, recv, send
from tests.ports import free_port
from tests.voices.redis_server import RedisServer

pytestmark = pytest.mark.slow

RAW = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}


def serve_env(model_dir: Path, data_dir: Path, **extra: str) -> dict[str, str]:
    return {"GEPARD_MODEL": str(model_dir), "GEPARD_BACKEND": "torch", "GEPARD_DEVICE": "cpu",
            "GEPARD_DTYPE": "float32", "GEPARD_DATA_DIR": str(data_dir), "GEPARD_REDIS_URL": "", "REDIS_URL": "",
            "GEPARD_ADMIT_MAX_SATURATION": "0", **extra}


def wait_ready_state(url: str, status: int, timeout_s: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        r = httpx.get(url + "/ready", timeout=5)
        if r.status_code == status:
            return r.json()
        assert time.monotonic() < deadline, f"/ready stayed {r.status_code}: {r.text}"
        time.sleep(0.05)


async def until_closed(ws) -> int:
    """Read (and drop) messages until the server closes the socket; its close code."""
    with pytest.raises(ConnectionClosed) as info:
        while True:
            await asyncio.wait_for(ws.recv(), 15)
    return info.value.rcvd.code if info.value.rcvd else -1


async def read_context(ws, context_id: str, timeout_s: float = 30.0) -> list[dict]:
    out: list[dict] = []
    deadline = time.monotonic() + timeout_s
    while not out or out[-1]["type"] not in ("done", "error"):
        msg = await recv(ws, max(deadline - time.monotonic(), 0.01))
        if msg["context_id"] == context_id:
            out.append(msg)
    return out


def test_sigterm_lets_running_work_finish_and_refuses_new_work(tiny_ckpt_dir, tmp_path):
    server = ServerProcess.start(serve_env(tiny_ckpt_dir, tmp_path / "data", GEPARD_DRAIN_TIMEOUT_S="30"),
                                 tmp_path / "server.log")
    ws_url = f"ws://127.0.0.1:{server.port}/tts/websocket"
    assert httpx.get(server.url + "/ready", timeout=5).json() == {
        "ready": True, "phase": "ready", "checks": {"engine": "ok", "voices": "ok"}}
    # ~4 s of speaking on the tiny checkpoint here: still running long after the checks below (~0.2 s)
    long_text = " ".join(f"Sentence number {i} is here." for i in range(12))
    sse_events: list[str] = []
    sse_done_at: list[float] = []

    def sse_request() -> None:  # a long /tts/sse stream, read to its end
        body = {"model_id": "sonic-3", "transcript": long_text, "voice": {"mode": "id", "id": DEFAULT_VOICE_ID},
                "output_format": RAW}
        with httpx.stream("POST", server.url + "/tts/sse", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    sse_events.append(json.loads(line[6:])["type"])
        sse_done_at.append(time.monotonic())

    async def scenario() -> float:
        async with connect(ws_url) as busy, connect(ws_url) as idle:
            await send(busy, gen("long", "Hello there.", DEFAULT_VOICE_ID, output_format=RAW))
            first = await recv(busy)
            assert first["type"] == "chunk"
            # a context opened for later and never given text: no stream, so it holds nothing open
            await send(idle, gen("later", "", DEFAULT_VOICE_ID, output_format=RAW, flush=True))
            assert (await recv(idle))["type"] == "flush_done"
            sse = threading.Thread(target=sse_request)
            sse.start()
            while not sse_events:
                await asyncio.sleep(0.02)
            sigterm_at = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            body = await asyncio.to_thread(wait_ready_state, server.url, 503)
            assert body["phase"] == "draining" and body["ready"] is False
            assert httpx.get(server.url + "/health", timeout=5).status_code == 200  # still alive

            # an idle socket (its only context never admitted) is closed with 1012 (service restart) so
            # its client reconnects elsewhere
            assert await until_closed(idle) == 1012
            # new work is refused with 503 and retry advice: HTTP, upgrades, contexts on open sockets
            r = httpx.post(server.url + "/tts/bytes", timeout=10, json={
                "model_id": "sonic-3", "transcript": "Hi.", "voice": {"mode": "id", "id": DEFAULT_VOICE_ID},
                "output_format": RAW})
            assert (r.status_code, r.json()["error_code"], r.headers["retry-after"]) == (503, "service_unavailable", "1")
            r = httpx.post(server.url + "/v1/audio/speech", timeout=10, json={"model": "tts-1", "input": "Hi.",
                                                                              "voice": "alloy"})
            assert (r.status_code, r.json()["error"]["type"], r.json()["error"]["code"]) == (
                503, "server_error", "service_unavailable")
            with pytest.raises(InvalidStatus) as refused:
                async with connect(ws_url):
                    pass
            assert refused.value.response.status_code == 503
            await send(busy, gen("new", "Are you there?", DEFAULT_VOICE_ID, output_format=RAW))
            (error,) = await read_context(busy, "new")
            assert (error["type"], error["status_code"], error["error_code"]) == ("error", 503, "service_unavailable")
            await send(busy, gen("new-empty", "", DEFAULT_VOICE_ID, output_format=RAW))  # opened empty: refused too
            (error,) = await read_context(busy, "new-empty")
            assert (error["type"], error["status_code"], error["error_code"]) == ("error", 503, "service_unavailable")

            # the running context still takes text and finishes with all its audio and done
            await send(busy, gen("long", "And here is more text to speak.", DEFAULT_VOICE_ID, output_format=RAW))
            await send(busy, gen("long", "", DEFAULT_VOICE_ID, output_format=RAW, cont=False))
            rest = await read_context(busy, "long")
            assert [m["type"] for m in rest][-1] == "done"
            assert sum(m["type"] == "chunk" for m in rest) >= 1
            # with nothing left working, the socket is closed with 1012
            assert await until_closed(busy) == 1012
            await asyncio.to_thread(sse.join, 60)
            return sigterm_at

    try:
        sigterm_at = asyncio.run(scenario())
        # the SSE stream was cut by nothing: it was still running at SIGTERM and ended with done
        assert sse_done_at and sse_done_at[0] > sigterm_at
        assert sse_events[-1] == "done" and "error" not in sse_events and sse_events.count("chunk") > 1
        assert server.process.wait(timeout=30) == 0
        log = server.log_path.read_text()
        assert "SIGTERM: draining before shutdown" in log and "(clean)" in log
    finally:
        server.stop()


def test_drain_timeout_cuts_an_open_context_with_an_in_band_error(tiny_ckpt_dir, tmp_path):
    server = ServerProcess.start(serve_env(tiny_ckpt_dir, tmp_path / "data", GEPARD_DRAIN_TIMEOUT_S="1.5"),
                                 tmp_path / "server.log")

    async def scenario() -> None:
        async with connect(f"ws://127.0.0.1:{server.port}/tts/websocket") as ws:
            # a context that never closes (an agent that keeps it open for its next sentence)
            await send(ws, gen("open", "Hello there.", DEFAULT_VOICE_ID, output_format=RAW))
            assert (await recv(ws))["type"] == "chunk"
            t0 = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            messages = await read_context(ws, "open", timeout_s=20)
            error = messages[-1]
            assert (error["type"], error["status_code"], error["error_code"]) == ("error", 503, "service_unavailable")
            assert "GEPARD_DRAIN_TIMEOUT_S" in error["message"]
            assert time.monotonic() - t0 >= 1.4  # it had the whole drain timeout
            assert await until_closed(ws) == 1012

    try:
        asyncio.run(scenario())
        assert server.process.wait(timeout=30) == 0
        assert "drain timeout after 1.5 s: cutting 1 stream(s)" in server.log_path.read_text()
    finally:
        server.stop()


def test_ready_waits_for_warm_up_and_the_voice_store(tiny_ckpt_dir, tmp_path):
    """/ready is 503 ("starting") while warm-up cannot go through (here: Redis is not up yet), and
    200 once it has; /health (liveness) is 200 all along."""
    port = free_port()
    env = serve_env(tiny_ckpt_dir, tmp_path / "data", GEPARD_REDIS_URL=f"redis://127.0.0.1:{port}/0")
    server = ServerProcess.start(env, tmp_path / "server.log", ready=False)
    redis = None
    try:
        r = httpx.get(server.url + "/ready", timeout=5)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        body = r.json()
        assert (body["ready"], body["phase"]) == (False, "starting")
        assert body["checks"]["voices"].startswith("VoiceStoreUnavailableError")
        assert "VoiceStoreUnavailableError" in body["warm_up"]
        assert httpx.get(server.url + "/health", timeout=5).status_code == 200
        redis = RedisServer.start(port=port)
        body = wait_ready_state(server.url, 200, timeout_s=20)
        assert body == {"ready": True, "phase": "ready", "checks": {"engine": "ok", "voices": "ok"}}
    finally:
        server.stop()
        if redis is not None:
            redis.stop()


def test_drain_timeout_cuts_http_streams_visibly(tiny_ckpt_dir, tmp_path):
    """At the drain timeout an SSE stream ends with an error event and a /tts/bytes body is aborted
    (an incomplete chunked body: the client gets an error, never a short file that looks whole)."""
    from tests.api.conftest import gateway_settings
    from tests.api.live import LiveServer

    settings = gateway_settings(tiny_ckpt_dir, tmp_path / "data", drain_timeout_s=0.5)
    long_text = " ".join(f"Sentence number {i} is here." for i in range(120))
    body = {"model_id": "sonic-3", "transcript": long_text, "voice": {"mode": "id", "id": DEFAULT_VOICE_ID},
            "output_format": RAW}
    with LiveServer(settings) as server:
        with httpx.Client(timeout=60) as client, \
                client.stream("POST", server.url + "/tts/sse", json=body) as sse, \
                client.stream("POST", server.url + "/tts/bytes", json=body) as raw:
            lines = sse.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            pieces = raw.iter_bytes()
            assert next(pieces)
            server.drain()
            events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
            assert events[-1]["type"] == "error" and events[-1]["error_code"] == "service_unavailable"
            assert "GEPARD_DRAIN_TIMEOUT_S" in events[-1]["message"]
            with pytest.raises(httpx.RemoteProtocolError):
                for _ in pieces:
                    pass
        server.thread.join(timeout=30)
        assert not server.thread.is_alive() and server.server.drained_clean is False


def test_sighup_drains_and_a_second_signal_cuts_at_once(tiny_ckpt_dir, tmp_path):
    """SIGHUP drains as SIGTERM does (left to its default, it killed the process at once: no drain,
    vLLM's engine processes left behind). A second signal, of any kind, makes the drain timeout's cut
    at once: an in-band error for a context, an error event for an SSE stream, an aborted /tts/bytes
    body; then the process exits 0 within seconds, with no traceback (it used to skip the cut: 1012
    with no error, HTTP streams cut by uvicorn 10 s later, CancelledError tracebacks)."""
    env = serve_env(tiny_ckpt_dir, tmp_path / "data", GEPARD_DRAIN_TIMEOUT_S="30", GEPARD_CODEC_IMPL="torch")
    server = ServerProcess.start(env, tmp_path / "server.log")
    long_text = " ".join(f"Sentence number {i} is here." for i in range(120))  # ~40 s of streaming here
    body = {"model_id": "sonic-3", "transcript": long_text, "voice": {"mode": "id", "id": DEFAULT_VOICE_ID},
            "output_format": RAW}
    streaming = {"sse": threading.Event(), "bytes": threading.Event()}
    sse_events: list[dict] = []
    bytes_end: list[str] = []

    def sse_request() -> None:
        with httpx.stream("POST", server.url + "/tts/sse", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    sse_events.append(json.loads(line[6:]))
                    streaming["sse"].set()

    def bytes_request() -> None:
        try:
            with httpx.stream("POST", server.url + "/tts/bytes", json=body, timeout=60) as r:
                for _ in r.iter_bytes():
                    streaming["bytes"].set()
            bytes_end.append("complete")
        except httpx.RemoteProtocolError:
            bytes_end.append("aborted")

    async def scenario() -> float:
        async with connect(f"ws://127.0.0.1:{server.port}/tts/websocket") as ws:
            await send(ws, gen("open", long_text, DEFAULT_VOICE_ID, output_format=RAW))
            assert (await recv(ws))["type"] == "chunk"
            threads = [threading.Thread(target=sse_request), threading.Thread(target=bytes_request)]
            for thread in threads:
                thread.start()
            for started in streaming.values():
                assert await asyncio.to_thread(started.wait, 30)
            server.process.send_signal(signal.SIGHUP)
            body = await asyncio.to_thread(wait_ready_state, server.url, 503)
            assert body["phase"] == "draining"
            await asyncio.sleep(0.3)
            assert not bytes_end and sse_events[-1]["type"] == "chunk"  # all three still streaming
            second_at = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            messages = await read_context(ws, "open", timeout_s=10)
            error = messages[-1]
            assert (error["type"], error["status_code"], error["error_code"]) == ("error", 503, "service_unavailable")
            assert "second signal (SIGTERM)" in error["message"]
            assert await until_closed(ws) == 1012
            for thread in threads:
                await asyncio.to_thread(thread.join, 10)
            return second_at

    try:
        second_at = asyncio.run(scenario())
        assert sse_events[-1]["type"] == "error" and sse_events[-1]["error_code"] == "service_unavailable"
        assert "second signal (SIGTERM)" in sse_events[-1]["message"]
        assert bytes_end == ["aborted"]
        assert server.process.wait(timeout=15) == 0
        assert time.monotonic() - second_at < 8  # not uvicorn's 10 s wait for the HTTP streams
        log = server.log_path.read_text()
        assert "SIGHUP: draining before shutdown" in log
        assert "a second signal (SIGTERM) during the drain: cutting 3 stream(s) now" in log
        assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
    finally:
        server.stop()


def test_the_server_takes_sighup_as_it_takes_sigterm():
    """While it serves, SIGHUP goes to the server's handler (the drain), as SIGTERM and SIGINT do;
    uvicorn handles only those two, so SIGHUP (a closed terminal, a supervisor) killed it at once."""
    from starlette.applications import Starlette

    from api.server import GracefulServer, uvicorn_config
    from api.settings import Settings

    server = GracefulServer(uvicorn_config(Settings.from_env({}), Starlette()))
    fallen_through: list[int] = []
    # stands in for the default action (death) while the test runs, and must be back afterwards
    fallback = lambda sig, frame: fallen_through.append(sig)  # noqa: E731
    previous = signal.signal(signal.SIGHUP, fallback)
    try:
        with server.capture_signals():
            assert signal.getsignal(signal.SIGHUP) == server.handle_exit
            os.kill(os.getpid(), signal.SIGHUP)
            deadline = time.monotonic() + 5
            while not (server.should_exit or fallen_through) and time.monotonic() < deadline:
                time.sleep(0.01)
        assert server.should_exit and not fallen_through  # not serving yet: it stops before it starts
        assert signal.getsignal(signal.SIGHUP) is fallback
    finally:
        signal.signal(signal.SIGHUP, previous)


async def test_warm_up_failing_is_an_error_every_period_naming_the_setting(monkeypatch, caplog, tmp_path):
    """While warm-up keeps failing (here the embedded store), the first failure is a WARNING and an
    ERROR naming GEPARD_DATA_DIR follows every WARM_UP_ERROR_EVERY_S (30 s; 0.2 s here) with the cause:
    a gateway that never turns ready says so, not once."""
    from types import SimpleNamespace

    from api import lifecycle
    from voices.errors import VoiceStoreUnavailableError

    monkeypatch.setattr(lifecycle, "WARM_UP_RETRY_S", 0.02)
    monkeypatch.setattr(lifecycle, "WARM_UP_ERROR_EVERY_S", 0.2, raising=False)

    class Voices:
        async def check_health(self) -> None:
            raise VoiceStoreUnavailableError("voice store unavailable during health check: disk I/O error")

    rt = SimpleNamespace(settings=SimpleNamespace(redis_url=None, data_dir=tmp_path / "data"), voices=Voices())
    caplog.set_level(logging.INFO, logger="api.lifecycle")
    task = asyncio.create_task(lifecycle.warm_up(rt, lifecycle.Lifecycle()))
    await asyncio.sleep(0.7)
    task.cancel()
    records = [r for r in caplog.records if r.name == "api.lifecycle"]
    assert records[0].levelno == logging.WARNING  # the store may just not be up yet
    errors = [r.getMessage() for r in records if r.levelno == logging.ERROR]
    assert 2 <= len(errors) <= 4, errors
    assert all(m.startswith(f"not ready: the embedded voice store in GEPARD_DATA_DIR ({tmp_path / 'data'}) fails "
                            "(warm-up failing for ") and m.endswith("disk I/O error") for m in errors), errors


def test_warm_up_says_redis_refuses_the_credentials_until_they_work(tiny_ckpt_dir, tmp_path, monkeypatch, caplog):
    """REDIS_URL with a wrong password: an ERROR saying Redis refuses the credentials in REDIS_URL
    (the password masked) from the first attempt, and again every WARM_UP_ERROR_EVERY_S (30 s; 0.5 s
    here) while /ready stays 503; it keeps retrying, so once Redis takes the password it turns ready.
    (It used to be one WARNING, then silence for ever.)"""
    from api import lifecycle
    from tests.api.conftest import gateway_settings
    from tests.api.live import LiveServer

    monkeypatch.setattr(lifecycle, "WARM_UP_RETRY_S", 0.1)
    monkeypatch.setattr(lifecycle, "WARM_UP_ERROR_EVERY_S", 0.5, raising=False)
    monkeypatch.delenv("GEPARD_REDIS_URL", raising=False)
    caplog.set_level(logging.INFO, logger="api.lifecycle")
    redis = RedisServer.start()

    def require_password(password: str, current: str = "") -> None:
        with socket.create_connection(("127.0.0.1", redis.port), timeout=5) as sock:
            if current:
                sock.sendall(f"AUTH {current}\r\n".encode())
                assert sock.recv(64).startswith(b"+OK")
            sock.sendall(f"CONFIG SET requirepass {password}\r\n".encode())
            assert sock.recv(64).startswith(b"+OK")

    server = None
    try:
        require_password("right-pass-4Kq")
        url = f"redis://:wrong-pass-7Zp@127.0.0.1:{redis.port}/0"
        server = LiveServer(gateway_settings(tiny_ckpt_dir, tmp_path / "data", redis_url=url, codec_impl="torch"))
        server.start(ready=False)
        deadline = time.monotonic() + 20
        while len(errors := [r for r in caplog.records
                             if r.name == "api.lifecycle" and r.levelno == logging.ERROR]) < 3:
            assert time.monotonic() < deadline, caplog.text[-3000:]
            time.sleep(0.05)
        expected = (f"not ready: Redis refuses the credentials in REDIS_URL (redis://:***@127.0.0.1:{redis.port}/0): "
                    "correct the user or password there (warm-up failing for ")
        assert all(r.getMessage().startswith(expected) for r in errors), errors[0].getMessage()
        assert "wrong-pass-7Zp" not in caplog.text
        assert httpx.get(server.url + "/ready", timeout=5).json()["phase"] == "starting"
        require_password("wrong-pass-7Zp", current="right-pass-4Kq")  # Redis now takes the URL's password
        wait_ready_state(server.url, 200, timeout_s=20)
    finally:
        if server is not None:
            server.stop()
        redis.stop()


def test_the_drain_waits_for_a_voice_clone_in_flight(tiny_ckpt_dir, tmp_path, caplog):
    """A clone accepted before the drain began is work the drain waits for, as an open stream is: it
    ends with its voice id and the drain is clean (the drain counted open streams only, so it ended at
    once and left the clone to uvicorn's shutdown, which cancels what is still running after 10 s).
    A clone that arrives during the drain gets the drain's 503."""
    from tests.api.conftest import gateway_settings
    from tests.api.live import LiveServer
    from tests.api.routes._voices_support import CLIP_22K, clone

    caplog.set_level(logging.INFO, logger="api.lifecycle")
    settings = gateway_settings(tiny_ckpt_dir, tmp_path / "data", drain_timeout_s=30)
    with LiveServer(settings) as server:
        cloner = server.runtime.cloner
        compress, compressing, compressed_at = cloner.compress, threading.Event(), []

        def slow_compress(codes):  # runs in a worker thread (voices.recompute.compress_codes)
            compressing.set()
            time.sleep(3.0)
            try:
                return compress(codes)
            finally:
                compressed_at.append(time.monotonic())

        cloner.compress = slow_compress
        answers: list[httpx.Response] = []
        cloning = threading.Thread(target=lambda: answers.append(clone(server.url, CLIP_22K.read_bytes(),
                                                                       name="cloned while draining")))
        cloning.start()
        assert compressing.wait(60), "the clone never reached its encoding"
        server.drain()
        wait_ready_state(server.url, 503)
        refused = clone(server.url, CLIP_22K.read_bytes(), name="too late")
        assert (refused.status_code, refused.json()["error_code"]) == (503, "service_unavailable")
        deadline = time.monotonic() + 60
        while server.server.drained_clean is None:
            assert time.monotonic() < deadline, "the drain never ended"
            time.sleep(0.01)
        drained_at = time.monotonic()
        cloning.join(timeout=60)
        server.thread.join(timeout=30)
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] and answer.json()["name"] == "cloned while draining"
    assert compressed_at and drained_at >= compressed_at[0]  # the drain ended after the clone's work
    assert server.server.drained_clean is True
    assert any(r.getMessage().startswith("draining: 0 open stream(s), 1 clone(s), ") for r in caplog.records)


async def test_a_drain_timeout_says_the_clones_left_are_left_to_the_shutdown(caplog):
    """At the drain timeout a clone still running cannot be cut in band (its answer is one JSON
    body): the drain is not clean, and its WARNING says the server's shutdown is left to end it."""
    from api.lifecycle import Lifecycle

    caplog.set_level(logging.INFO, logger="api.lifecycle")
    lifecycle = Lifecycle(drain_timeout_s=0.2)
    assert await lifecycle.drain(lambda: 0, lambda: 2) is False
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("drain timeout after 0.2 s: 2 voice clone(s) still running"), warning
    assert "cannot be cut in band" in warning and "shutdown" in warning, warning
