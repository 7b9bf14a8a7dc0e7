"""uvicorn's httptools protocol as the gateway runs it: request heads bounded (api.header_limit),
a client that stops reading dropped after ``GEPARD_HTTP_SEND_TIMEOUT_S``, and a client that stops
sending its request dropped after ``HEAD_TIMEOUT_S`` / ``BODY_IDLE_TIMEOUT_S``.

uvicorn writes a response body and then waits for the socket's write buffer to drain before the
next piece (its ``FlowControl``), with no bound. A client of ``/tts/bytes`` or ``/tts/sse`` that
stays connected but reads nothing held its response there forever: its stream place, its engine
request and its codec stream with it. ``StalledReaderFlowControl`` bounds that wait: once the buffer
has not drained for the timeout, the connection is dropped (``transport.abort()``). To the app that
is a client that hung up: the response's disconnect listener stops the stream, which aborts the
engine request and frees the place, as for any hang-up (api/disconnects.py logs one INFO line).

uvicorn bounds the time between requests only (``timeout_keep_alive``): a connection that sends
nothing, half a request head, or a body that never comes stayed open forever, and enough of them
(one client held 20,000) exhaust the process's file descriptors, after which no one is served.
Hence two deadlines, both counting the client's time only:

    head   a request head must be complete ``HEAD_TIMEOUT_S`` after the connection opened (after
           the TLS handshake), or after the previous response ended on a keep-alive connection.
           Past it, a client that sent part of a head gets 408 ``request_timeout`` in the API's
           error shape (like the 431 of api.header_limit); one that sent nothing is just closed.
    body   while a request body is being read, its next bytes must come within
           ``BODY_IDLE_TIMEOUT_S`` of the last ones (a slow but steady upload goes on). Past it
           the connection is dropped; to the route its body read ends as a client hang-up
           (``ClientDisconnect``, api/disconnects.py). Time the server itself holds the body back
           (reading paused while the app has not taken what it has, a pipelined request waiting its
           turn, an ``Expect: 100-continue`` not answered yet) does not count.

Each timed-out connection is one INFO line. Neither deadline runs once a request is all in (while
the app works on it or streams its response), nor after a WebSocket upgrade (the socket is then
api/ws_protocol.py's, with its own pings and timeouts).

The send timeout travels on the uvicorn ``Config`` (``http_send_timeout_s``, set by
``api.server.uvicorn_config``), as the head bound does on ``h11_max_incomplete_event_size``.

Each request's scope also carries ``ABORT_EXTENSION``: the app's way to drop a connection whose
response cannot be finished (api/late_errors.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.server import ServerState

from api.errors import RequestTimeoutError
from api.header_limit import BoundedHttpToolsProtocol
from api.late_errors import ABORT_EXTENSION

logger = logging.getLogger(__name__)

DEFAULT_SEND_TIMEOUT_S = 10.0
#: Seconds a client has to send a whole request head (request line and headers), from the
#: connection's start or from the end of the previous response on a keep-alive connection; past
#: it: 408 (or a plain close if nothing came), connection closed. Real clients send a head in one
#: write; this is for connections that never finish one (slowloris). Not a setting (yet): a
#: ``Config`` attribute ``http_head_timeout_s`` overrides it, as ``http_send_timeout_s`` does its own.
HEAD_TIMEOUT_S = 30.0
#: Seconds a request body may go without a byte while the server is reading it; past it the
#: connection is dropped. A slow but steady upload (a 20 MB clone clip over a poor uplink) keeps
#: going; a declared body that never comes does not hold a file descriptor and its buffers forever.
#: Overridden by a ``Config`` attribute ``http_body_idle_timeout_s``.
BODY_IDLE_TIMEOUT_S = 30.0

__all__ = ["BODY_IDLE_TIMEOUT_S", "GatewayHttpProtocol", "HEAD_TIMEOUT_S", "RequestTimeoutError",
           "StalledReaderFlowControl"]


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
    """The gateway's HTTP/1.1 protocol (module docstring). One timer per connection at most: the
    head deadline, the body's idle deadline, or the last grace of a close that cannot flush."""

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._timer: Optional[asyncio.TimerHandle] = None
        self._waiting_for: Optional[str] = None  # what the timer is for: "head", "body" or "close"
        self._head_begun = False  # the parser has seen the first byte of the request head it waits for
        self._body_open = False  # a request body is being received (its head is complete, its end is not)
        self._body_seen_at = 0.0  # loop time of its last bytes (or of its head's end)
        self._upgraded = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        timeout_s = getattr(self.config, "http_send_timeout_s", DEFAULT_SEND_TIMEOUT_S)
        self.flow = StalledReaderFlowControl(transport, timeout_s, self._client_name())
        self._await_head()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._cancel_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._body_open and self._timer is None and not self._upgraded:
            self._arm("body", self._body_idle_timeout_s())  # a body is coming: its idle deadline runs

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun = True
        # how a response that cannot be finished drops its connection (api/late_errors.py)
        extensions = self.scope.setdefault("extensions", {})  # type: ignore[typeddict-item]
        extensions[ABORT_EXTENSION] = {"abort": self.transport.abort}

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._head_begun = False
        self._cancel_timer()  # the head is in: from here the app's time is not the client's
        if not (self.parser.should_upgrade() and self._should_upgrade()):  # a WebSocket upgrade has no body
            self._body_open = True  # until on_message_complete, maybe within this very read
            self._body_seen_at = self.loop.time()

    def on_body(self, body: bytes) -> None:
        self._body_seen_at = self.loop.time()
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._body_open = False
        self._cancel_timer()
        if self.cycle is None or self.cycle.response_complete:
            self._await_head()  # answered before its body was all in: the next head is due

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._in_head and (self.cycle is None or self.cycle.response_complete):
            self._await_head()  # keep-alive: the next request's head is due (pipelined ones are in)

    def handle_websocket_upgrade(self) -> None:
        self._upgraded = True
        self._cancel_timer()  # the socket is the WebSocket protocol's from here (its own pings)
        super().handle_websocket_upgrade()

    # --- the deadlines --------------------------------------------------------------------------

    def _head_timeout_s(self) -> float:
        return getattr(self.config, "http_head_timeout_s", HEAD_TIMEOUT_S)

    def _body_idle_timeout_s(self) -> float:
        return getattr(self.config, "http_body_idle_timeout_s", BODY_IDLE_TIMEOUT_S)

    def _client_name(self) -> str:
        return "%s:%d" % self.client if self.client else "?"

    def _await_head(self) -> None:
        if self.transport is not None and not self.transport.is_closing() and not self._upgraded:
            self._arm("head", self._head_timeout_s())

    def _arm(self, what: str, delay_s: float) -> None:
        self._cancel_timer()
        self._waiting_for = what
        self._timer = self.loop.call_later(delay_s, self._deadline_passed)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._waiting_for = None

    def _deadline_passed(self) -> None:
        self._timer = None
        what, self._waiting_for = self._waiting_for, None
        if what == "close":  # the close below could not flush its answer: the client reads nothing
            self.transport.abort()
            return
        if self.transport.is_closing() or self._upgraded:
            return
        if what == "head":
            self._head_timed_out()
        elif what == "body" and self._body_open:
            self._body_idle(self.loop.time())

    def _head_timed_out(self) -> None:
        timeout_s = self._head_timeout_s()
        if not self._head_begun:
            logger.info("%s: no request within %g s: closing the connection", self._client_name(), timeout_s)
            self.transport.close()
        else:
            logger.info("%s: request head incomplete after %g s: 408, closing the connection",
                        self._client_name(), timeout_s)
            self._answer_and_close(RequestTimeoutError(
                f"the request line and headers did not arrive within {timeout_s:g} s; send the whole head at once"))
        if self.transport.get_write_buffer_size():  # close waits for the buffer to drain: bounded
            self._arm("close", getattr(self.config, "http_send_timeout_s", DEFAULT_SEND_TIMEOUT_S))

    def _body_idle(self, now: float) -> None:
        cycle = self.cycle
        if self.flow.read_paused or (cycle is not None and cycle.waiting_for_100_continue):
            self._body_seen_at = now  # the server holds the body back, not the client
        timeout_s = self._body_idle_timeout_s()
        left = self._body_seen_at + timeout_s - now
        if left > 0:
            self._arm("body", left)
            return
        method, path = self.scope.get("method", "?"), self.scope.get("path", "?")
        logger.info("%s: %s %s: no request body bytes for %g s: dropping the connection",
                    self._client_name(), method, path, timeout_s)
        self._refused = True  # nothing more is read
        self.transport.abort()  # connection_lost: the route's next body read is a client hang-up
