"""api.ws_protocol with a peer that reads nothing: the server's close, the close handshake's timeout
and the keepalive timeout drop the connection (``transport.abort()``) instead of waiting forever for
a write buffer the peer never drains (uvicorn's own ``transport.close()`` waits for it).

The protocol object is driven directly over a recording transport, so "the peer reads nothing" is
exact: the transport has said its buffer is full (``pause_writing``) and never says otherwise."""

from __future__ import annotations

import asyncio

from uvicorn.config import Config
from uvicorn.server import ServerState

from api.ws_protocol import GatewayWebSocketProtocol

UPGRADE = (b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = self.aborted = False
        self.protocol: GatewayWebSocketProtocol | None = None

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:  # a real one waits for the buffer to drain before connection_lost
        self.closed = True

    def abort(self) -> None:  # a real one drops the buffer and calls connection_lost soon
        self.aborted = True
        asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)


async def open_connection(app) -> tuple[GatewayWebSocketProtocol, RecordingTransport]:
    config = Config(app=app, ws=GatewayWebSocketProtocol, ws_ping_interval=None, log_config=None)
    config.load()
    proto = GatewayWebSocketProtocol(config, ServerState(), {})
    transport = RecordingTransport()
    transport.protocol = proto
    proto.connection_made(transport)
    proto.data_received(UPGRADE)
    for _ in range(100):
        if proto.handshake_complete:
            return proto, transport
        await asyncio.sleep(0.01)
    raise AssertionError("no handshake")


def closing_app(close_now: asyncio.Event, events: list):
    async def app(scope, receive, send):
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        await close_now.wait()
        await send({"type": "websocket.close", "code": 1008, "reason": "client stopped reading"})
        events.append("close returned")
        events.append((await receive())["type"])  # the app learns the connection is over
    return app


async def test_a_close_behind_a_full_buffer_drops_the_connection_after_its_wait(monkeypatch):
    monkeypatch.setattr(GatewayWebSocketProtocol, "close_wait_s", 0.2)
    close_now, events = asyncio.Event(), []
    proto, transport = await open_connection(closing_app(close_now, events))
    proto.pause_writing()  # the peer's unread data filled the buffer, and it stays full
    close_now.set()
    for _ in range(100):
        if len(events) == 2:
            break
        await asyncio.sleep(0.02)
    assert events == ["close returned", "websocket.disconnect"]
    assert transport.aborted and proto.disconnected


async def test_a_close_waits_for_a_buffer_that_drains_and_closes_normally(monkeypatch):
    monkeypatch.setattr(GatewayWebSocketProtocol, "close_wait_s", 5.0)
    close_now, events = asyncio.Event(), []
    proto, transport = await open_connection(closing_app(close_now, events))
    proto.pause_writing()
    close_now.set()
    await asyncio.sleep(0.1)
    assert events == [] and not transport.aborted  # still waiting for the peer to read
    before = len(transport.written)
    proto.resume_writing()  # a slow reader caught up
    for _ in range(100):
        if events:
            break
        await asyncio.sleep(0.02)
    assert events[:1] == ["close returned"] and not transport.aborted
    assert transport.written[before:][:1] == b"\x88"  # the close frame went out
    proto.close_timer.cancel()


async def test_the_close_handshakes_timeout_and_the_keepalive_timeout_drop_the_connection():
    close_now, events = asyncio.Event(), []
    proto, transport = await open_connection(closing_app(close_now, events))
    proto.close_timeout = 0.1  # the peer never answers the close frame
    close_now.set()
    for _ in range(100):
        if transport.aborted:
            break
        await asyncio.sleep(0.02)
    assert transport.aborted

    close_now, events = asyncio.Event(), []
    proto, transport = await open_connection(closing_app(close_now, events))
    proto.keepalive_timeout()  # no pong within the ping timeout
    assert transport.closed and transport.aborted
    await asyncio.sleep(0.05)
    assert proto.disconnected
    close_now.set()
