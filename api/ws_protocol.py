"""uvicorn's ``websockets-sansio`` WebSocket protocol, with denial responses counted as answers.

The routes refuse an upgrade with a proper HTTP response (401 for a bad key, 503 while draining),
sent through the ASGI ``websocket.http.response`` extension. uvicorn 0.5x's sans-I/O protocol sends
that response but never marks the handshake as answered, so every refused upgrade also logged
"ASGI callable returned without completing handshake." at ERROR level: one false error per bad
key. A complete denial response is an answer to the handshake; this subclass records it as one.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

__all__ = ["GatewayWebSocketProtocol"]


class GatewayWebSocketProtocol(WebSocketsSansIOProtocol):
    async def send(self, message: Any) -> None:
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            self.handshake_complete = True  # the denial response went out: the handshake is answered
