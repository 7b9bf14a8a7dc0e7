"""uvicorn's httptools protocol as the gateway runs it: request heads bounded (api.header_limit),
and a client that stops reading dropped after ``GEPARD_HTTP_SEND_TIMEOUT_S``.

uvicorn writes a response body and then waits for the socket's write buffer to drain before the
next piece (its ``FlowControl``), with no bound. A client of ``/tts/bytes`` or ``/tts/sse`` that
stays connected but reads nothing held its response there forever: its stream place, its engine
request and its codec stream with it. ``StalledReaderFlowControl`` bounds that wait: once the buffer
has not drained for the timeout, the connection is dropped (``transport.abort()``). To the app that
is a client that hung up: the response's disconnect listener stops the stream, which aborts the
engine request and frees the place, as for any hang-up (api/disconnects.py logs one INFO line).

The timeout travels on the uvicorn ``Config`` (``http_send_timeout_s``, set by
``api.server.uvicorn_config``), as the head bound does on ``h11_max_incomplete_event_size``.

Each request's scope also carries ``ABORT_EXTENSION``: the app's way to drop a connection whose
response cannot be finished (api/late_errors.py).
"""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.flow_control import FlowControl

from api.header_limit import BoundedHttpToolsProtocol
from api.late_errors import ABORT_EXTENSION

logger = logging.getLogger(__name__)

DEFAULT_SEND_TIMEOUT_S = 10.0

__all__ = ["GatewayHttpProtocol", "StalledReaderFlowControl"]


class StalledReaderFlowControl(FlowControl):
    """FlowControl whose wait for a full write buffer gives up after ``timeout_s``, dropping the
    connection (its ``connection_lost`` then tells the request it is over)."""

    def __init__(self, transport: asyncio.Transport, timeout_s: float, client: str) -> None:
        super().__init__(transport)
        self.timeout_s = timeout_s
        self.client = client

    async def drain(self) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                await super().drain()
        except TimeoutError:
            logger.info("%s: client read nothing for %.0f s: dropping the connection", self.client, self.timeout_s)
            self._transport.abort()
            await asyncio.sleep(0)  # connection_lost runs first: the response's next write sees the client gone


class GatewayHttpProtocol(BoundedHttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        timeout_s = getattr(self.config, "http_send_timeout_s", DEFAULT_SEND_TIMEOUT_S)
        client = "%s:%d" % self.client if self.client else "?"
        self.flow = StalledReaderFlowControl(transport, timeout_s, client)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # how a response that cannot be finished drops its connection (api/late_errors.py)
        extensions = self.scope.setdefault("extensions", {})  # type: ignore[typeddict-item]
        extensions[ABORT_EXTENSION] = {"abort": self.transport.abort}
