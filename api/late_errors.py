"""LateErrorMiddleware: an error after an HTTP response started is one WARNING line, counted, and
the connection dropped.

Once a ``/tts/bytes`` or ``/v1/audio/speech`` body has started, its status line is gone and the
route has no in-band channel left (the SSE routes end with an error event instead:
api/routes/_common.py ``primed``). An error there that api.errors maps is expected, not a bug: an
engine failure (500 ``generation_failed``), the drain timeout's cut (503 ``service_unavailable``),
a later segment refused (429). Starlette wraps it in "Caught handled exception, but response
already started", which would reach the catch-all as an unexpected error (two tracebacks: ours and
uvicorn's). Here it:

- is one WARNING line with the request id, the error_code and the error's class (nothing else
  logs it);
- is counted in ``gepard_errors_total`` under its route and that error_code;
- drops the connection without the body's last chunk, so the client sees an incomplete body (an
  error), never a short file that looks whole. The drop goes through ``ABORT_EXTENSION``, which
  our HTTP protocol offers (api/http_protocol.py); under a server without it the app just returns.

Anything else (a bug: 500 ``internal_error``) goes on to the catch-all as before, which logs its
traceback and counts it (api/app.py).
"""

from __future__ import annotations

import logging
from typing import Optional

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import describe_error, is_mapped
from api.metrics import route_label

logger = logging.getLogger(__name__)

#: ASGI extension in each request's ``scope["extensions"]`` (api/http_protocol.py): ``{"abort": f}``,
#: where ``f()`` drops the connection now. An app that returns in the middle of a response leaves
#: the drop to uvicorn, which logs it as an ERROR; after ``f()`` uvicorn sees a client that is gone.
ABORT_EXTENSION = "gepard.http.abort"


class LateErrorMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:
            error = _mapped_error(exc) if started else None
            if error is None:
                raise
            _report(scope, error)
            await _drop_connection(scope, receive)


def _mapped_error(exc: BaseException) -> Optional[BaseException]:
    """The error api.errors maps that ``exc`` is or carries; None for anything else."""
    if isinstance(exc, BaseExceptionGroup):
        errors = [_mapped_error(e) for e in exc.exceptions]
        return errors[0] if all(errors) else None
    # Starlette's exception middleware turns a handled error raised after the response started
    # into RuntimeError("Caught handled exception, but response already started") from it
    if isinstance(exc, RuntimeError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc if is_mapped(exc) else None


def _report(scope: Scope, error: BaseException) -> None:
    request_id = (scope.get("state") or {}).get("request_id") or "-"
    route = route_label(scope)
    info = describe_error(error, request_id, log=False)  # this line is its only one
    # the class names the failure as api.errors' own lines do ("failed: GenerationError: ...")
    logger.warning("request %s failed after its response started: %s %s: %s: %s (dropping the connection)",
                   request_id, info.status_code, info.error_code, type(error).__name__, info.message)
    runtime = getattr(scope["app"].state, "runtime", None) if "app" in scope else None
    if runtime is not None:
        runtime.metrics.error(route, error)


async def _drop_connection(scope: Scope, receive: Receive) -> None:
    abort = scope.get("extensions", {}).get(ABORT_EXTENSION)
    if abort is None:
        return  # the server drops a connection whose app returned mid-body (and may log it)
    abort["abort"]()
    # The server learns of the closed connection at a later turn of the event loop (two under
    # TLS); once receive() says so, it takes the unfinished response for a client that is gone.
    while (await receive())["type"] != "http.disconnect":
        pass
