"""Request heads are bounded (GEPARD_MAX_HEADER_BYTES, 64 KiB): a bigger one gets 431 in the error
shape and its connection is closed, on the live gateway that runs the production uvicorn
configuration (api.server.uvicorn_config), for HTTP requests and WebSocket upgrades alike."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from api.header_limit import BoundedHttpToolsProtocol
from api.http_protocol import GatewayHttpProtocol
from api.server import uvicorn_config
from api.settings import Settings, SettingsError
from api.ws_protocol import GatewayWebSocketProtocol

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
