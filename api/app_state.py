"""Access to the app's Runtime from a request or WebSocket (set by the lifespan)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import HTTPConnection

if TYPE_CHECKING:
    from api.app import Runtime


def runtime_of(conn: HTTPConnection) -> "Runtime":
    return conn.app.state.runtime
