"""A client that goes away is one INFO line, not an ERROR traceback.

Clients hang up all the time: mid-body, while audio streams, with contexts still speaking. Left
alone, Starlette and uvicorn report some of these as unexpected errors (``ClientDisconnect`` from
a body read reaches the catch-all handler and uvicorn's "Exception in ASGI application"; a
WebSocket send after the peer vanished raises ``ClientDisconnected``/``RuntimeError`` in a
context's task). ``DisconnectMiddleware`` sits outside the routes and:

* HTTP: notes when the client is gone (``http.disconnect`` before the response completed, or a
  send that failed on the socket). If the app then ends, normally or with a disconnect error
  (``ClientDisconnect``, ``OSError``, anyio's closed/broken stream), that is one INFO line
  ``client disconnected: POST /tts/bytes (request <id>)``. Any other exception propagates as before.
* WebSocket: a send after the peer is gone raises ``WebSocketDisconnect(1006)``, the exception
  the routes already treat as "client gone" (Starlette raises it for the first failed send
  only), and a close after that is a no-op. ``api.connection`` logs the socket's one INFO line
  ("ws <id> closed by client"); a disconnect error escaping the app is one INFO line here.

``unless_client_leaves(request, work)`` is for the routes whose work ends in a side effect the
client learns of only from the response (a clone stored under a new id), or holds what others wait
for (a stream's first audio, awaited with its engine request and stream place taken:
api/routes/_common.py ``primed``): the work is cancelled when the client hangs up first, and
ClientDisconnect raised.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Optional, TypeVar

import anyio
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect, WebSocketDisconnected

logger = logging.getLogger(__name__)

#: What a route may raise because its client went away (judged only once the client is known gone,
#: except ClientDisconnect and WebSocketDisconnect, which say so themselves).
DISCONNECT_ERRORS: tuple[type[BaseException], ...] = (
    ClientDisconnect, WebSocketDisconnect, WebSocketDisconnected, OSError,
    anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream,
)
_SELF_EVIDENT = (ClientDisconnect, WebSocketDisconnect)


T = TypeVar("T")


async def unless_client_leaves(request: Request, work: Awaitable[T]) -> T:
    """``work``'s result, or ClientDisconnect with ``work`` cancelled when the client hangs up
    first. For a request whose body has been read: what arrives next is its ``http.disconnect``."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_client_gone(request))
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this handler is cancelled: neither task outlives it
        watch.cancel()
        if not task.done():
            task.cancel()
            # the work's own ending is judged below; a cancel of this handler meanwhile propagates
            # (suppressing CancelledError here would swallow it, then read an unfinished task)
            await asyncio.wait((task,))
    if task.cancelled():
        raise ClientDisconnect()
    return task.result()


async def _client_gone(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass  # the rest of a body nobody reads


def _is_disconnect(exc: BaseException, client_gone: bool) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_disconnect(e, client_gone) for e in exc.exceptions)
    if isinstance(exc, _SELF_EVIDENT):
        return True
    return client_gone and isinstance(exc, DISCONNECT_ERRORS)


class DisconnectMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    @staticmethod
    def _describe(scope: Scope) -> str:
        request_id: Optional[str] = (scope.get("state") or {}).get("request_id")
        what = f"{scope.get('method', 'WebSocket')} {scope.get('path', '?')}"
        return f"{what} (request {request_id})" if request_id else what

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        client_gone = False
        response_complete = False

        async def watched_receive() -> Message:
            nonlocal client_gone
            message = await receive()
            if message["type"] == "http.disconnect" and not response_complete:
                client_gone = True
            return message

        async def watched_send(message: Message) -> None:
            nonlocal client_gone, response_complete
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                response_complete = True  # first: a disconnect noticed from here on is a normal end
            try:
                await send(message)
            except OSError:
                client_gone = True
                raise

        try:
            await self.app(scope, watched_receive, watched_send)
        except BaseException as exc:
            if not _is_disconnect(exc, client_gone):
                raise
            client_gone = True
        if client_gone:
            logger.info("client disconnected: %s", self._describe(scope))

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone_code: Optional[int] = None  # the close code once the peer is known gone

        async def watched_receive() -> Message:
            nonlocal gone_code
            message = await receive()
            if message["type"] == "websocket.disconnect":
                gone_code = message.get("code", 1005)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal gone_code
            if gone_code is not None and message["type"] in ("websocket.send", "websocket.close"):
                if message["type"] == "websocket.close":
                    return  # nothing left to close
                raise WebSocketDisconnect(gone_code)
            try:
                await send(message)
            except OSError as exc:  # uvicorn's ClientDisconnected: the peer vanished mid-send
                gone_code = 1006
                raise WebSocketDisconnect(1006) from exc

        try:
            await self.app(scope, watched_receive, watched_send)
        except BaseException as exc:
            if gone_code is None or not _is_disconnect(exc, True):
                raise
            logger.info("client disconnected: %s (code %s)", self._describe(scope), gone_code)
