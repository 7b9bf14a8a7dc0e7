"""DrainGate: while the gateway drains, new HTTP requests and WebSocket upgrades get 503.

The listening socket stays open during a drain (api/lifecycle.py), so a request that arrives then
gets a precise answer (503 ``service_unavailable`` with ``Retry-After``, ``Connection: close``; in
OpenAI's error shape on ``/v1/``) instead
of a refused or dropped connection, and the client's retry goes through the load balancer to a
replica that is ready. Probes and scrapes keep working: ``/``, ``/health``, ``/ready`` (which says
"draining") and ``/metrics`` pass.

A response that the drain timeout cuts after it started (``DrainCutError`` out of a ``/tts/bytes``
body, which has no in-band error channel) is an error after the response started like any other:
one WARNING line, counted, and the connection dropped (api/late_errors.py).
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from api.errors import error_response, new_request_id

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
            await self.app(scope, receive, send)
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
