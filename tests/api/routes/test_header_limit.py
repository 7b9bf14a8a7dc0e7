"""Request heads are bounded (GEPARD_MAX_HEADER_BYTES, 64 KiB): a bigger one gets 431 in the error
shape and its connection is closed, on the live gateway that runs the production uvicorn
configuration (api.server.uvicorn_config), for HTTP requests and WebSocket upgrades alike.

Requests are bounded in time too (api/http_protocol.py): a head must be complete within
HEAD_TIMEOUT_S (408 if part of one came, a plain close if nothing did), a body must not stall for
BODY_IDLE_TIMEOUT_S (connection dropped), while slow but steady uploads, long streaming responses
and WebSockets are left alone. The tests shorten both deadlines to about a second."""

from __future__ import annotations

import json
import logging
import select
import socket
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from websockets.sync.client import connect

from api.header_limit import BoundedHttpToolsProtocol
from api.http_protocol import GatewayHttpProtocol
from api.server import uvicorn_config
from api.settings import Settings, SettingsError
from api.ws_protocol import GatewayWebSocketProtocol
from tests.api.routes._voices_support import CLIP_22K

LIMIT = Settings().max_header_bytes


def _exchange(port: int, head_start: bytes, header_bytes: int) -> tuple[bytes, int]:
    """Send ``head_start`` + one header of ``header_bytes`` (as far as the server lets us), then
    read until the server closes. Returns (what came back, bytes we managed to send)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sent = 0
    try:
        sock.sendall(head_start + b"X-Big: ")
        chunk = b"a" * 65536
        try:
            while sent < header_bytes:
                sent += sock.send(chunk[: header_bytes - sent])
            sock.sendall(b"\r\n\r\n")
        except OSError:  # the server refused and closed while we were still sending
            pass
        received = b""
        try:
            while True:
                data = sock.recv(65536)
                if not data:  # closed by the server: the connection does not stay busy
                    break
                received += data
        except ConnectionResetError:  # closed with our unread bytes pending; the answer came first
            pass
        return received, sent
    finally:
        sock.close()


def _assert_431(received: bytes) -> None:
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), received[:200]
    assert b"connection: close" in head.lower()
    error = json.loads(body)
    assert error["error_code"] == "headers_too_large" and str(LIMIT) in error["message"]
    assert set(error) == {"error_code", "title", "message", "request_id"}


@pytest.mark.parametrize("size", [100_000, 10_000_000])
def test_an_oversized_header_is_refused_and_the_server_goes_on(gateway, size):
    received, sent = _exchange(gateway.port, b"GET /voices HTTP/1.1\r\nHost: x\r\n", size)
    _assert_431(received)
    assert sent < size or size < 1_000_000  # a 10 MB header is cut off, not read to its end
    r = httpx.get(gateway.url + "/", timeout=30)
    assert r.status_code == 200 and r.json()["ok"] is True


def test_a_websocket_upgrade_is_bounded_too(gateway):
    upgrade = (b"GET /tts/websocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n")
    received, _ = _exchange(gateway.port, upgrade, 200_000)
    _assert_431(received)


def test_heads_under_the_limit_and_big_bodies_are_served(gateway):
    # a head just under the bound, a body far over it, and two pipelined requests in one write
    received, _ = _exchange(gateway.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n", LIMIT - 200)
    assert received.startswith(b"HTTP/1.1 200 "), received[:200]
    r = httpx.post(gateway.url + "/tts/bytes", content=b" " * (LIMIT * 4), timeout=30,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error_code"] != "headers_too_large"
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        received = b""
        while data := sock.recv(65536):
            received += data
    assert received.count(b"HTTP/1.1 200 OK") == 2


def test_the_server_configuration_comes_from_settings():
    config = uvicorn_config(Settings(max_header_bytes=8192, port=9001, http_send_timeout_s=7.5), app=object())
    assert issubclass(config.http, BoundedHttpToolsProtocol) and config.h11_max_incomplete_event_size == 8192
    assert config.http is GatewayHttpProtocol and config.http_send_timeout_s == 7.5
    assert (config.ws, config.ws_ping_interval, config.log_config, config.port) == (GatewayWebSocketProtocol, 20.0, None, 9001)
    with pytest.raises(SettingsError, match="GEPARD_MAX_HEADER_BYTES"):
        Settings.from_env({"GEPARD_MAX_HEADER_BYTES": "100"})
    assert Settings.from_env({"GEPARD_MAX_HEADER_BYTES": "131072"}).max_header_bytes == 131072


def test_without_httptools_the_server_runs_h11_and_says_what_it_lacks(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "api.http_protocol", None)  # its import now fails as without httptools
    with caplog.at_level(logging.WARNING, logger="api.server"):
        config = uvicorn_config(Settings(max_header_bytes=8192), app=object())
    assert config.http == "h11" and config.h11_max_incomplete_event_size == 8192  # heads still bounded
    assert "httptools is not installed" in caplog.text and "no head, body or send deadlines" in caplog.text


# --- deadlines: a client that does not send its request -------------------------------------------

HEAD_S = 1.0  # the deadlines the tests run with (30 s each in production)
BODY_S = 1.0
SLOW_HEAD = b"POST /tts/bytes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


@pytest.fixture
def short_deadlines(monkeypatch, caplog):
    import api.http_protocol

    monkeypatch.setattr(api.http_protocol, "HEAD_TIMEOUT_S", HEAD_S)
    monkeypatch.setattr(api.http_protocol, "BODY_IDLE_TIMEOUT_S", BODY_S)
    caplog.set_level(logging.INFO, logger="api.http_protocol")
    return caplog


def _open(port: int, data: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    if data:
        sock.sendall(data)
    return sock


def _until_closed(sock: socket.socket, within_s: float) -> bytes:
    """What the server sends before it closes the connection, which it must do within ``within_s``."""
    sock.settimeout(within_s)
    received = b""
    try:
        while data := sock.recv(65536):
            received += data
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"the connection is still open after {within_s} s (got {received[:200]!r})") from None
    finally:
        sock.close()
    return received


def _timeout_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "api.http_protocol" and r.levelno == logging.INFO]


def _content_length(received: bytes) -> int:
    head = received.partition(b"\r\n\r\n")[0].lower()
    return int(head.split(b"content-length: ")[1].split(b"\r\n")[0])


def _assert_408(received: bytes) -> None:
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), received[:200]
    assert b"connection: close" in head.lower()
    error = json.loads(body)
    assert error["error_code"] == "request_timeout" and f"within {HEAD_S:g} s" in error["message"]
    assert set(error) == {"error_code", "title", "message", "request_id"}


def test_a_connection_that_sends_nothing_is_closed(gateway, short_deadlines):
    t0 = time.monotonic()
    assert _until_closed(_open(gateway.port), HEAD_S + 5) == b""  # nothing to answer: just closed
    assert time.monotonic() - t0 >= HEAD_S * 0.9
    assert any("no request within" in line for line in _timeout_lines(short_deadlines))
    assert httpx.get(gateway.url + "/", timeout=30).status_code == 200


def test_a_request_head_not_complete_in_time_gets_408_and_is_closed(gateway, short_deadlines):
    rt = gateway.runtime
    before = rt.metrics.errors.labels("other", "request_timeout")._value.get()
    # half a head, then nothing
    _assert_408(_until_closed(_open(gateway.port, SLOW_HEAD), HEAD_S + 5))
    # a head dribbled a byte at a time (slowloris): the deadline counts from the start, not the last byte
    sock = _open(gateway.port)
    t0 = time.monotonic()
    for byte in SLOW_HEAD * 4:
        if select.select([sock], [], [], 0.05)[0]:  # the server answered (and closes): stop sending
            break
        sock.send(bytes([byte]))
    else:
        raise AssertionError(f"a head dribbled for {time.monotonic() - t0:.1f} s was never cut off")
    assert time.monotonic() - t0 < HEAD_S + 3
    _assert_408(_until_closed(sock, 5))
    # keep-alive: the next head is due HEAD_S after the previous response ended
    sock = _open(gateway.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    first = b""
    while b"\r\n\r\n" not in first or len(first.partition(b"\r\n\r\n")[2]) < _content_length(first):
        first += sock.recv(65536)
    assert first.startswith(b"HTTP/1.1 200 "), first[:200]
    time.sleep(HEAD_S * 0.3)
    sock.sendall(SLOW_HEAD)
    t0 = time.monotonic()
    _assert_408(_until_closed(sock, HEAD_S + 5))
    assert time.monotonic() - t0 < HEAD_S * 0.95  # counted from the response's end, not from the half head
    assert rt.metrics.errors.labels("other", "request_timeout")._value.get() == before + 3
    assert sum("request head incomplete" in line for line in _timeout_lines(short_deadlines)) == 3
    assert httpx.get(gateway.url + "/", timeout=30).status_code == 200


def test_a_stalled_request_body_is_dropped(gateway, short_deadlines):
    engine = gateway.runtime.engine
    sock = _open(gateway.port, SLOW_HEAD + b"Content-Length: 1000\r\n\r\n" + b'{"model_id": "sonic-3", ')
    t0 = time.monotonic()
    assert _until_closed(sock, BODY_S + 5) == b""  # no answer: to the route its client hung up
    assert time.monotonic() - t0 >= BODY_S * 0.9
    lines = [line for line in _timeout_lines(short_deadlines) if "no request body bytes" in line]
    assert len(lines) == 1 and "POST /tts/bytes" in lines[0]
    assert engine.num_running == 0
    assert httpx.get(gateway.url + "/", timeout=30).status_code == 200


def _multipart(clip: bytes, name: str) -> tuple[bytes, str]:
    request = httpx.Request("POST", "http://x/voices/clone", data={"name": name, "language": "en"},
                            files={"clip": ("linda.wav", clip, "audio/wav")})
    return request.read(), request.headers["content-type"]


def test_a_slow_but_steady_upload_is_served_while_a_stalled_one_is_dropped(gateway, short_deadlines):
    body, content_type = _multipart(CLIP_22K.read_bytes(), f"slow upload {uuid.uuid4().hex[:8]}")
    stalled = _open(gateway.port, b"POST /voices/clone HTTP/1.1\r\nHost: x\r\nContent-Type: " + content_type.encode()
                    + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:1000])
    pool = ThreadPoolExecutor(1)
    dropped = pool.submit(_until_closed, stalled, BODY_S + 5)

    def slowly():  # the body in ten pieces, each well within the idle deadline, all well past both
        yield b""
        pieces = 10
        step = -(-len(body) // pieces)
        for i in range(0, len(body), step):
            time.sleep(BODY_S * 0.4)
            yield body[i:i + step]

    t0 = time.monotonic()
    r = httpx.post(gateway.url + "/voices/clone", content=slowly(), timeout=60,
                   headers={"content-type": content_type, "content-length": str(len(body))})
    took = time.monotonic() - t0
    assert r.status_code == 200, r.text
    assert took > HEAD_S + BODY_S
    assert dropped.result() == b""  # the stalled one was dropped meanwhile, unanswered
    pool.shutdown()
    assert any("no request body bytes" in line and "/voices/clone" in line for line in _timeout_lines(short_deadlines))
    assert httpx.delete(f"{gateway.url}/voices/{r.json()['id']}", timeout=30).status_code == 204


def test_long_responses_and_websockets_outlive_the_deadlines(gateway, default_voice_id, short_deadlines, monkeypatch):
    import api.http_protocol

    monkeypatch.setattr(api.http_protocol, "HEAD_TIMEOUT_S", 0.3)
    monkeypatch.setattr(api.http_protocol, "BODY_IDLE_TIMEOUT_S", 0.3)
    idle = _open(gateway.port)  # opened beside the stream: closed while it goes on
    pool = ThreadPoolExecutor(1)
    closed = pool.submit(_until_closed, idle, 2.0)
    fmt = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 22050}
    sentences = 16
    text = " ".join(f"Sentence number {i} is here." for i in range(sentences))
    with connect(gateway.ws_url + "/tts/websocket", open_timeout=10) as ws:
        t0 = time.monotonic()
        with httpx.stream("POST", gateway.url + "/tts/bytes", timeout=60, json={
                "model_id": "sonic-3", "transcript": text, "voice": default_voice_id, "output_format": fmt}) as r:
            assert r.status_code == 200
            audio = b""
            for piece in r.iter_bytes():
                audio += piece
                time.sleep(0.02)
        took = time.monotonic() - t0
        # three deadlines long at least, or the stream shows nothing (8 sentences once took 0.98 s on CI)
        assert took > 3 * 0.3, f"the stream took {took:.2f} s: too short to show anything"
        assert len(audio) >= sentences * 22050 * 2 * 0.5  # every sentence's audio delivered
        assert closed.result() == b""  # closed during the stream, which went on
        pool.shutdown()
        # the WebSocket opened before the stream, quiet all along, still speaks
        ws.send(json.dumps({"context_id": "late", "model_id": "sonic-3", "transcript": "Hello there.",
                            "voice": default_voice_id, "output_format": fmt, "continue": False}))
        events = []
        while not (events and (events[-1].get("done") or events[-1].get("type") in ("done", "error"))):
            events.append(json.loads(ws.recv(timeout=60)))
        assert events[-1]["type"] == "done" and any(e["type"] == "chunk" for e in events)
