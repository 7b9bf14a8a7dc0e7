"""uvicorn's ``websockets-sansio`` WebSocket protocol, with two fixes the gateway needs.

1. Denial responses count as answers. The routes refuse an upgrade with a proper HTTP response
   (401 for a bad key, 503 while draining), sent through the ASGI ``websocket.http.response``
   extension. uvicorn 0.5x's sans-I/O protocol sends that response but never marks the handshake as
   answered, so every refused upgrade also logged "ASGI callable returned without completing
   handshake." at ERROR level: one false error per bad key.

2. A peer that reads nothing cannot hold a connection forever. uvicorn waits for its write buffer
   to drain before it writes anything, a close frame included, and ends a connection with
   ``transport.close()``, which also waits for the buffer. A client that stays connected but stops
   reading never drains it, so the gateway's close (after the send timeout, at the drain's cut, when
   idle) waited forever, and so did the handler and the drain behind it; a keepalive or close-handshake
   timeout left the socket open too. Here a close waits for the buffer at most ``close_wait_s`` and
   then drops the connection (``transport.abort()``: what the peer never read is discarded, and the
   app sees its disconnect at once); the close handshake's timeout and the keepalive timeout drop it
   likewise instead of waiting.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

__all__ = ["GatewayWebSocketProtocol"]


class GatewayWebSocketProtocol(WebSocketsSansIOProtocol):
    #: How long a close waits for a full write buffer to drain before the connection is dropped.
    close_wait_s: float = 10.0

    async def send(self, message: Any) -> None:
        if message["type"] == "websocket.close" and self.handshake_complete and not self.writable.is_set():
            try:
                async with asyncio.timeout(self.close_wait_s):
                    await self.writable.wait()
            except TimeoutError:
                self.logger.info("WebSocket peer read nothing for %.0f s while the server closed: dropping it",
                                 self.close_wait_s)
                self.close_sent = True
                self.transport.abort()  # connection_lost follows: the app's receive() gets its disconnect
                return
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            self.handshake_complete = True  # the denial response went out: the handshake is answered
        if message["type"] == "websocket.close" and self.close_timer is not None:
            # uvicorn's close-handshake timeout calls transport.close(), which waits for a buffer the
            # peer may never read: drop the connection instead
            self.close_timer.cancel()
            self.close_timer = self.loop.call_later(self.close_timeout, self._drop)

    def keepalive_timeout(self) -> None:
        super().keepalive_timeout()  # writes a 1011 close frame, then transport.close()
        self._drop()  # no pong within the ping timeout: nothing more will be read

    def _drop(self) -> None:
        self.close_timer = None
        if not self.disconnected:
            self.transport.abort()
