"""Helpers shared by the HTTP routes."""

from __future__ import annotations

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
