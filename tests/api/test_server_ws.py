"""The WebSocket implementation ``uvicorn_config`` picks (``websockets-sansio``): no deprecation
warning, keepalive pings still end a peer that stopped answering, a peer that answers stays, and
permessage-deflate is accepted only when ``GEPARD_WS_COMPRESSION`` asks for it.

The production intervals (20 s) are shortened on the same config object for the test; everything
else is the configuration ``gepard serve`` runs. The 1009 close for frames past
``WS_MAX_FRAME_BYTES`` is checked on the live gateway in tests/api/routes/test_hostile_inputs.py.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import threading
import time
import warnings
from typing import Iterator

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.sync.client import connect

from api.server import uvicorn_config
from api.settings import Settings
from tests.ports import free_port


async def deny(ws: WebSocket) -> None:  # as the routes refuse a bad key (401) or a draining server (503)
    await ws.send_denial_response(JSONResponse({"error_code": "invalid_credentials"}, status_code=401))


async def echo(ws: WebSocket) -> None:
    await ws.accept()
    try:
        while True:
            await ws.send_text(await ws.receive_text())
    except WebSocketDisconnect:
        pass


@contextlib.contextmanager
def echo_serving(settings: Settings) -> Iterator[int]:
    """The echo app on the production uvicorn config for ``settings``, with short keepalive pings."""
    config = uvicorn_config(settings, app=Starlette(routes=[WebSocketRoute("/ws", echo), WebSocketRoute("/deny", deny)]),
                            host="127.0.0.1", port=free_port())
    config.ws_ping_interval, config.ws_ping_timeout = 0.2, 0.3
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "echo server did not start"
        time.sleep(0.02)
    try:
        yield config.port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def echo_server():
    with echo_serving(Settings()) as port:
        yield port


def test_the_configured_implementation_loads_without_a_deprecation_warning():
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    config = uvicorn_config(Settings(), app=Starlette())
    assert issubclass(config.ws, WebSocketsSansIOProtocol)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config.load()
    assert not [w for w in caught if "deprecated" in str(w.message).lower()], [str(w.message) for w in caught]
    assert issubclass(config.ws_protocol_class, WebSocketsSansIOProtocol)


def test_a_peer_that_never_answers_pings_is_closed(echo_server):
    key = base64.b64encode(os.urandom(16)).decode()
    with socket.create_connection(("127.0.0.1", echo_server), timeout=10) as sock:
        sock.sendall((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        received = b""
        while True:  # read (and never answer) until the server gives up on us
            piece = sock.recv(4096)
            if not piece:
                break
            received += piece
    assert received.startswith(b"HTTP/1.1 101")
    assert b"\x89" in received  # at least one ping frame (opcode 0x9) reached us before the close


def test_a_peer_that_answers_pings_stays_connected(echo_server):
    with connect(f"ws://127.0.0.1:{echo_server}/ws", open_timeout=10) as ws:  # answers pings itself
        time.sleep(1.0)  # several ping intervals and timeouts
        ws.send("still here")
        assert ws.recv(timeout=10) == "still here"


def test_a_refused_upgrade_gets_its_status_and_logs_no_error(echo_server, caplog):
    from websockets.exceptions import InvalidStatus

    with caplog.at_level("INFO", logger="uvicorn.error"):
        with pytest.raises(InvalidStatus) as refused:
            connect(f"ws://127.0.0.1:{echo_server}/deny", open_timeout=10)
        time.sleep(0.2)  # the server logs after the app returns
    assert refused.value.response.status_code == 401
    assert b"invalid_credentials" in refused.value.response.body
    assert not [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]


@pytest.mark.parametrize("compression", [False, True], ids=["default", "GEPARD_WS_COMPRESSION"])
def test_permessage_deflate_is_accepted_only_when_configured(compression):
    # the websockets client offers permessage-deflate by default, as the Cartesia SDK and pipecat do
    # through it; uvicorn alone would accept the offer and deflate every chunk on the event loop
    with echo_serving(Settings(ws_compression=compression)) as port:
        with connect(f"ws://127.0.0.1:{port}/ws", open_timeout=10) as ws:
            assert "permessage-deflate" in ws.request.headers["Sec-WebSocket-Extensions"]
            accepted = ws.response.headers.get("Sec-WebSocket-Extensions", "")
            assert ("permessage-deflate" in accepted) is compression, accepted
            text = "UklGRiQAAABXQVZF" * 4096  # base64 audio, as a chunk carries it
            ws.send(text)
            assert ws.recv(timeout=10) == text
