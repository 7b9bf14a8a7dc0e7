"""A bound on the size of a request head (request line + headers), for uvicorn's httptools parser.

httptools (what ``uvicorn[standard]`` runs) accepts a head of any size: a 10 MB header is
buffered and handed to the app. ``BoundedHttpToolsProtocol`` counts the raw bytes of each head
as they arrive and, once they pass ``max_bytes``, answers 431 in the API's error shape
(``headers_too_large``) and closes the connection, before parsing or buffering the bytes that
crossed the line. The bound is exact for the first request of a connection and for every
keep-alive request; a head that begins inside the chunk that ended the previous pipelined request
gets up to one socket read (at most 256 KiB) on top.

The limit is read from ``uvicorn.Config.h11_max_incomplete_event_size``, which is h11's own head
bound, so one setting bounds both implementations (``api.server.uvicorn_config`` sets it from
``GEPARD_MAX_HEADER_BYTES``). WebSocket upgrades are HTTP requests first, so they are bounded too.
"""

from __future__ import annotations

import asyncio
import http
import logging
from typing import Any, Optional

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from api.errors import ApiError, error_response, new_request_id

logger = logging.getLogger(__name__)

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
_HEAD_END = b"\r\n\r\n"


class HeadersTooLargeError(ApiError):
    status_code = 431
    default_error_code = "headers_too_large"
    title = "Request header fields too large"


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bound on each request head (module docstring)."""

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.max_head_bytes = config.h11_max_incomplete_event_size or DEFAULT_MAX_HEADER_BYTES
        self._in_head = True  # the next bytes belong to a request head
        self._head_bytes = 0
        self._tail = b""  # the last bytes of the head so far: a terminator may straddle two reads
        self._refused = False

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._in_head:
            seen = self._tail + data
            end = seen.find(_HEAD_END)
            if end < 0:
                self._head_bytes += len(data)
                self._tail = seen[-(len(_HEAD_END) - 1):]
            else:  # the head ends in this read; what follows is its body (or the next request)
                self._head_bytes += end + len(_HEAD_END) - len(self._tail)
                self._in_head = False
            if self._head_bytes > self.max_head_bytes:
                self._refuse()
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes, self._tail = True, 0, b""  # keep-alive: the next head starts

    def _refuse(self) -> None:
        self._refused = True
        client = "%s:%d" % self.client if self.client else "?"
        logger.warning("%s: request head over %d bytes refused (431)", client, self.max_head_bytes)
        self._answer_and_close(HeadersTooLargeError(
            f"the request line and headers are over {self.max_head_bytes} bytes; send fewer or smaller headers"))

    def _answer_and_close(self, error: ApiError) -> None:
        """Answer ``error`` in the API's error shape with ``connection: close``, and close the
        connection once that is written. Only while nothing of a response is on the wire (no route
        has this request). Counted like every error response, under the route label "other"."""
        self._refused = True  # nothing more is read
        request_id = new_request_id()
        response = error_response(error, request_id)
        runtime = getattr(getattr(self.config.app, "state", None), "runtime", None)
        if runtime is not None:
            runtime.metrics.error("other", error)
        status = http.HTTPStatus(response.status_code)
        head = [f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode("ascii")]
        head += [name + b": " + value + b"\r\n" for name, value in response.raw_headers]
        head.append(b"connection: close\r\n\r\n")
        self.transport.write(b"".join(head) + response.body)
        self.transport.close()  # after the write is flushed; nothing more is read
