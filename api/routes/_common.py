"""Helpers shared by the HTTP routes."""

from __future__ import annotations

from typing import AsyncIterator, Callable, Optional

from starlette.requests import Request

from api.app_state import runtime_of  # noqa: F401  (re-exported for routes)
from api.errors import RequestTooLargeError, new_request_id

MAX_JSON_BODY_BYTES = 1 << 20


def start_request(request: Request) -> str:
    request_id = new_request_id()
    request.state.request_id = request_id
    return request_id


async def read_body(request: Request, limit: int = MAX_JSON_BODY_BYTES) -> bytes:
    body = b""
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise RequestTooLargeError(f"request body is over {limit} bytes")
    return body


async def primed(
    body: AsyncIterator[bytes], on_error: Optional[Callable[[Exception], bytes]] = None
) -> AsyncIterator[bytes]:
    """Await ``body``'s first item now, so that errors until then become proper HTTP errors, and
    return a stream of all its items for a StreamingResponse.

    After the first item the status line is gone: ``on_error`` turns a later failure into a last
    in-band item (SSE); without it the failure propagates and the server aborts the connection.
    Closing the stream (client gone, or done) closes ``body``, which aborts its engine requests.
    """
    first = await body.__anext__()

    async def stream() -> AsyncIterator[bytes]:
        try:
            yield first
            async for item in body:
                yield item
        except Exception as exc:
            if on_error is None:
                raise
            yield on_error(exc)
        finally:
            await body.aclose()

    return stream()
