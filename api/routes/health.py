"""GET / (the SDKs' get_status), GET /health (liveness), GET /ready (readiness), GET /metrics (Prometheus)."""

from __future__ import annotations

import asyncio
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.auth import check_metrics_token
from api.lifecycle import Phase
from api.metrics import CONTENT_TYPE_LATEST
from api.routes._common import runtime_of

if TYPE_CHECKING:
    from api.app import Runtime

#: the longest a probe waits for one check: well inside the shortest probe timeout shipped (3 s,
#: deploy/k8s readiness) and the image's health check (4 s)
CHECK_TIMEOUT_S = 1.0

try:
    VERSION = version("gepard-server")
except PackageNotFoundError:  # running from a source tree
    VERSION = "0.1.0"


async def status(request: Request) -> Response:
    return JSONResponse({"ok": True, "version": VERSION})


async def health(request: Request) -> Response:
    """Liveness: 503 only when the engine is dead (a restart is what helps). The voice store is
    reported but does not fail it: a Redis outage must not get every replica restarted (it fails
    ``/ready`` instead, and the routes that need the store answer 503 voice_store_unavailable)."""
    rt = runtime_of(request)
    checks = await _checks(rt)
    ok = checks["engine"] == "ok"
    body = {"ok": ok, "checks": checks, "generations_in_flight": rt.service.in_flight}
    return JSONResponse(body, status_code=200 if ok else 503)


async def ready(request: Request) -> Response:
    """Readiness: 200 once warmed up (which needed the voice store to answer) while not draining and
    the engine is alive.

    A voice store outage after that is reported in ``checks`` but does not fail readiness: every
    replica shares the store, so failing them all would take the whole service out of the load
    balancer, while the default voices and every voice in the prompt cache still speak and the
    routes that need the store answer 503 ``voice_store_unavailable`` on their own."""
    rt = runtime_of(request)
    lifecycle = rt.lifecycle
    checks = await _checks(rt)
    ok = lifecycle.phase is Phase.READY and checks["engine"] == "ok"
    body: dict[str, object] = {"ready": ok, "phase": lifecycle.phase.value, "checks": checks}
    if lifecycle.phase is Phase.STARTING and lifecycle.warm_up_problem:
        body["warm_up"] = lifecycle.warm_up_problem
    headers = {} if ok else {"retry-after": "1"}
    return JSONResponse(body, status_code=200 if ok else 503, headers=headers)


async def _checks(rt: "Runtime") -> dict[str, str]:
    """Each check's result, the checks run at once and each bounded by ``CHECK_TIMEOUT_S``: a store
    that hangs rather than refuses (a stopped Redis: 2 s per read, retried twice) must not hold a
    probe past its timeout, or every replica would turn unready and then be restarted for it."""
    names = ("engine", "voices")
    results = await asyncio.gather(*(_bounded(check) for check in (rt.engine.check_health, rt.voices.check_health)))
    return dict(zip(names, results))


async def _bounded(check: Callable[[], Awaitable[None]]) -> str:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            await check()
        return "ok"
    except TimeoutError:
        return f"TimeoutError: no answer within {CHECK_TIMEOUT_S:g} s"
    except Exception as exc:  # reported, not raised: this is the health endpoint
        return f"{type(exc).__name__}: {exc}"


async def metrics(request: Request) -> Response:
    """The Prometheus exposition; with GEPARD_METRICS_TOKEN set, only for a scrape that carries it."""
    rt = runtime_of(request)
    if rt.settings.metrics_token is not None:
        check_metrics_token(request, rt.settings.metrics_token)
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
