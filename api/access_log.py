"""AccessLogMiddleware: one INFO line per HTTP request and per WebSocket upgrade (never per frame).

    http POST /tts/bytes 401 3.2 ms (request 5f0c..., credential -)
    http GET /voices/{voice_id} 200 1.4 ms (request 9a41..., credential key:1a2b3c4d)
    ws GET /tts/websocket 101 2.0 ms (request 77d2..., credential token:3f9e0c1d2b4a5e6f)

- request: the response's ``x-request-id`` when it has one (what the client holds: every error
  body, every TTS response), else the request's id in ``scope["state"]``. The middleware puts a
  fresh id there first, so error handlers and the WebSocket route answer with it; a route that
  starts its own (``start_request``) replaces it, and the line follows. A socket's own lines
  (``ws <id> opened``, ``context <id>:<context_id> ...``) use the upgrade's id.
- route: the matched route's path template, chosen by the server (``/voices/{voice_id}``), never
  the query string (it may carry a credential); a path no route matches is shown cut to
  ``MAX_UNMATCHED_PATH_CHARS``.
- status: as sent; 500 when the app failed before answering (the server then answers 500), 499
  when the client left before any answer. An upgrade is logged when it is answered: 101
  accepted, its denial's status, or 403 for a close before accept.
- duration: from the request to the end of its response (a stream: all of it), or to the
  upgrade's answer.
- credential: the principal's ``credential_id`` (``key:<8 hex>``, ``token:<jti>``, ``anonymous``)
  that ``Authenticator.authenticate`` leaves in ``scope["state"]``; ``-`` when none was accepted.
  Never the credential itself.

A probe or scrape that succeeds (``QUIET_ROUTES``, status below 400) is logged at DEBUG: an
orchestrator asks every few seconds per replica, and those lines would bury the traffic's. A
failing one stays INFO.

uvicorn's own access log (``uvicorn.access``) stays at WARNING (api/logging_setup.py): it would log
every request a second time, with the client's raw path and query string.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import new_request_id

logger = logging.getLogger(__name__)

#: Longest piece of an unmatched path shown (the client chose it).
MAX_UNMATCHED_PATH_CHARS = 64
#: Routes whose successful requests are logged at DEBUG: probes, scrapes and the SDKs' status check.
QUIET_ROUTES = frozenset({"/", "/health", "/ready", "/metrics"})
_MAX_METHOD_CHARS = 16  # the longest standard method, PROPPATCH, is 9
_STATUS_SERVER_ERROR = 500
_STATUS_CLIENT_GONE = 499  # nginx's "client closed request": no answer was sent
_STATUS_WS_CLOSED_BEFORE_ACCEPT = 403  # what uvicorn answers to a close before accept


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state.setdefault("request_id", new_request_id())
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        else:
            await self._websocket(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        status: Optional[int] = None
        request_id: Optional[str] = None
        client_gone = False

        async def watched_receive() -> Message:
            nonlocal client_gone
            message = await receive()
            client_gone = client_gone or message["type"] == "http.disconnect"
            return message

        async def watched_send(message: Message) -> None:
            nonlocal status, request_id
            if message["type"] == "http.response.start":
                status = message["status"]
                request_id = _header(message, b"x-request-id")
            await send(message)

        try:
            await self.app(scope, watched_receive, watched_send)
        except BaseException:
            status = status or _STATUS_SERVER_ERROR
            raise
        finally:
            if status is None:
                status = _STATUS_CLIENT_GONE if client_gone else _STATUS_SERVER_ERROR
            _log("http", scope, status, started, request_id)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        answered = False

        async def watched_send(message: Message) -> None:
            nonlocal answered
            status = _upgrade_status(message) if not answered else None
            await send(message)
            if status is not None:
                answered = True
                _log("ws", scope, status, started, _header(message, b"x-request-id"))

        try:
            await self.app(scope, receive, watched_send)
        finally:
            if not answered:  # the app failed (or the client left) before the upgrade was answered
                _log("ws", scope, _STATUS_SERVER_ERROR, started, None)


def _upgrade_status(message: Message) -> Optional[int]:
    """The HTTP status a message gives the upgrade, if it answers it."""
    kind = message["type"]
    if kind == "websocket.accept":
        return 101
    if kind == "websocket.http.response.start":
        return int(message["status"])
    if kind == "websocket.close":
        return _STATUS_WS_CLOSED_BEFORE_ACCEPT
    return None


def _header(message: Message, name: bytes) -> Optional[str]:
    for key, value in message.get("headers") or ():
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _route(scope: Scope) -> str:
    """The matched route's template (server-chosen), else the raw path, bounded."""
    template = getattr(scope.get("route"), "path", None)
    if isinstance(template, str):
        return template
    path = str(scope.get("path", ""))
    if len(path) > MAX_UNMATCHED_PATH_CHARS:
        path = path[:MAX_UNMATCHED_PATH_CHARS] + f"...({len(path) - MAX_UNMATCHED_PATH_CHARS} more)"
    return path


def _log(kind: str, scope: Scope, status: int, started: float, request_id: Optional[str]) -> None:
    state = scope.get("state") or {}
    route = _route(scope)
    level = logging.DEBUG if status < 400 and route in QUIET_ROUTES else logging.INFO
    logger.log(level, "%s %s %s %d %.1f ms (request %s, credential %s)", kind,
               str(scope.get("method", "GET"))[:_MAX_METHOD_CHARS], route, status,
               (time.perf_counter() - started) * 1000.0, request_id or state.get("request_id", "-"),
               state.get("credential_id", "-"))
