"""GET / (the SDKs' get_status), GET /health (readiness), GET /metrics (Prometheus)."""

from __future__ import annotations

import asyncio
from importlib.metadata import PackageNotFoundError, version

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.metrics import CONTENT_TYPE_LATEST
from api.routes._common import runtime_of

try:
    VERSION = version("gepard-server")
except PackageNotFoundError:  # running from a source tree
    VERSION = "0.1.0"


async def status(request: Request) -> Response:
    return JSONResponse({"ok": True, "version": VERSION})


async def health(request: Request) -> Response:
    rt = runtime_of(request)
    checks: dict[str, str] = {}
    for name, check in (("engine", rt.engine.check_health), ("voices", rt.voices.check_health)):
        try:
            await check()
            checks[name] = "ok"
        except Exception as exc:  # reported, not raised: this is the health endpoint
            checks[name] = f"{type(exc).__name__}: {exc}"
    ok = all(v == "ok" for v in checks.values())
    body = {"ok": ok, "checks": checks, "generations_in_flight": rt.service.in_flight}
    return JSONResponse(body, status_code=200 if ok else 503)


async def metrics(request: Request) -> Response:
    rt = runtime_of(request)
    rt.metrics.generations.set(rt.service.in_flight)
    rt.metrics.engine_requests.set(rt.engine.num_requests)
    rt.metrics.refresh_engine(rt.engine.stats())  # running / waiting / KV-cache gauges: the engine's scheduler now
    # this handler runs on the server's event loop, so all_tasks() sees its tasks (itself included)
    rt.metrics.event_loop_tasks.set(len(asyncio.all_tasks()))
    admission = rt.service.admission
    rt.metrics.saturation.set(admission.saturation())
    rt.metrics.capacity.set(admission.meter.capacity() or 0.0)
    rt.metrics.streams_open.set(admission.open_streams)
    return Response(rt.metrics.render(), media_type=CONTENT_TYPE_LATEST)
