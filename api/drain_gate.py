"""DrainGate: while the gateway drains, new HTTP requests and WebSocket upgrades get 503.

The listening socket stays open during a drain (api/lifecycle.py), so a request that arrives then
gets a precise answer (503 ``service_unavailable`` with ``Retry-After``, ``Connection: close``; in
OpenAI's error shape on ``/v1/``) instead
of a refused or dropped connection, and the client's retry goes through the load balancer to a
replica that is ready. Probes and scrapes keep working: ``/``, ``/health``, ``/ready`` (which says
"draining") and ``/metrics`` pass.

A response that the drain timeout cuts after it started (``DrainCutError`` out of a ``/tts/bytes``
body, which has no in-band error channel) is one WARNING line here, and the connection is dropped
without the final chunk, so the client sees an incomplete body.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from api.errors import error_response, new_request_id
from api.lifecycle import DrainCutError

logger = logging.getLogger(__name__)

#: Answered while draining too: liveness, readiness, the SDKs' status call, Prometheus.
ALWAYS_OPEN = frozenset({"/", "/health", "/ready", "/metrics"})


class DrainGate:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in ALWAYS_OPEN:
            await self.app(scope, receive, send)
            return
        runtime = getattr(scope["app"].state, "runtime", None) if "app" in scope else None
        if runtime is None or not runtime.lifecycle.draining:
            await self._serve(scope, receive, send)
            return
        request_id = new_request_id()
        refusal = runtime.lifecycle.refusal()
        if str(scope.get("path", "")).startswith("/v1/"):  # OpenAI clients read OpenAI's error shape
            from api.routes.openai_speech import openai_error_response

            response = openai_error_response(refusal, request_id)
        else:
            response = error_response(refusal, request_id)
        response.headers["connection"] = "close"
        runtime.metrics.errors.labels("drain", "service_unavailable").inc()
        logger.info("refused %s %s while draining (request %s)", scope["type"], scope.get("path"), request_id)
        if scope["type"] == "http":
            await response(scope, receive, send)
            return
        websocket = WebSocket(scope, receive, send)
        if "websocket.http.response" in scope.get("extensions", {}):
            await websocket.send_denial_response(response)
        else:  # the server answers 403 to a close before accept
            await websocket.close(code=1012)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except BaseException as exc:
            if not (started and _only_drain_cuts(exc)):
                raise
            # returning without the last chunk makes uvicorn drop the connection mid-body
            logger.warning("response cut by the drain timeout: %s %s", scope.get("method"), scope.get("path"))


def _only_drain_cuts(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_drain_cuts(e) for e in exc.exceptions)
    # Starlette's exception middleware turns a handled error raised after the response started
    # into RuntimeError("Caught handled exception, but response already started") from it
    return isinstance(exc, DrainCutError) or isinstance(exc.__cause__, DrainCutError)
