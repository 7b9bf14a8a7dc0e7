"""Readiness and drain: the gateway's phases and what each one lets in.

    starting  -> ready      warm-up done: the voice store answered and one short synthesis went
                            through the engine and the codec (``warm_up``)
    ready     -> draining   SIGTERM (``api.server.GracefulServer``) or ``Lifecycle.drain()``
    draining  -> stopped    every admitted stream ended, or the drain timeout cut the rest

``GET /ready`` is 200 only in ``ready`` (and while the engine is alive; a voice store outage after
warm-up is reported but does not fail it, see api/routes/health.py); load balancers and Kubernetes
send traffic by it. ``GET /health`` is liveness: it fails only when the
engine is dead, so a voice store outage does not get every replica restarted.

While draining:

- ``/ready`` answers 503 at once, so the load balancer stops sending new work here;
- new HTTP requests (all but ``/``, ``/health``, ``/ready`` and ``/metrics``) and new WebSocket
  upgrades get 503 ``service_unavailable`` with ``Retry-After`` (``api.drain_gate.DrainGate``), and
  new contexts on sockets already open get the same error in band (admission is closed);
- streams already admitted run to their end: admitted WebSocket contexts may still receive text (a
  context opened empty was never admitted: its first text, or a new context, gets the 503);
- a socket closes with 1012 (service restart) as soon as it has no admitted or closing context, so clients
  reconnect, through the load balancer, to a replica that is ready.

A voice clone accepted before the drain (``POST /voices/clone``, holding one of its places in
api/routes/voices.py) is work the drain waits for as well: it runs to its end and its client gets
the voice id.

At ``drain_timeout_s`` what is left is cut, never silently: a WebSocket context gets one in-band
``service_unavailable`` error naming the timeout (then its socket closes with 1012), an SSE stream an
``event: error`` frame, and a ``/tts/bytes`` body is aborted (an incomplete chunked body, which every
HTTP client reports as an error rather than a short file that looks complete). A second signal
(``Lifecycle.cut_now``) makes the same cut at once, its errors naming the signal. A clone still
running then cannot be cut in band (its answer is one JSON body): the WARNING says so, and uvicorn's
graceful shutdown (api/server.py) is left to end it.

Warm-up retries every second for as long as it fails (the voice store may come up after the
gateway): the first failure, and each new cause, is a WARNING; while it keeps failing an ERROR
every ``WARM_UP_ERROR_EVERY_S`` names the setting to check (``REDIS_URL``, or ``GEPARD_DATA_DIR``
for the embedded store) and the cause; Redis refusing the credentials is an ERROR from the first
attempt on.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import time
from typing import TYPE_CHECKING, Callable, Optional, Protocol
from urllib.parse import urlsplit, urlunsplit

from api.errors import ServiceUnavailableError

if TYPE_CHECKING:
    from api.app import Runtime

logger = logging.getLogger(__name__)

__all__ = ["DrainCutError", "DrainListener", "Lifecycle", "Phase", "warm_up"]

#: After the drain timeout has cut the streams left, how long their endings get to go out.
CUT_GRACE_S = 5.0
#: Between warm-up attempts (the voice store may come up after the gateway).
WARM_UP_RETRY_S = 1.0
#: While warm-up keeps failing, an ERROR this often (the gateway stays out of service meanwhile).
WARM_UP_ERROR_EVERY_S = 30.0
#: Frames the warm-up synthesis makes (~0.4 s of audio): enough to run every step of the path.
WARM_UP_FRAMES = 8
WARM_UP_TEXT = "Warming up."


class DrainCutError(ServiceUnavailableError):
    """503 ``service_unavailable``: the drain timeout ended this stream before it finished."""


class Phase(str, enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    STOPPED = "stopped"


class DrainListener(Protocol):
    """Something holding streams open that must hear of the drain (a WebSocket connection)."""

    def on_drain(self) -> None:
        """Take no new work; close once idle."""

    async def on_cut(self, error: DrainCutError) -> None:
        """End what is left now, telling the client ``error``."""


class Lifecycle:
    """The phase of one gateway and its drain (event-loop thread; ``phase`` may be read anywhere)."""

    def __init__(self, drain_timeout_s: float = 30.0) -> None:
        self.drain_timeout_s = drain_timeout_s
        self.phase = Phase.STARTING
        self.warm_up_problem: Optional[str] = None  # why the last warm-up attempt failed
        self._listeners: set[DrainListener] = set()
        self._on_ready: list[Callable[[], None]] = []
        self._on_drain: list[Callable[[], None]] = []
        self._on_cut: list[Callable[[DrainCutError], None]] = []
        self._drain_task: Optional[asyncio.Task[bool]] = None
        self._cut_now: Optional[str] = None  # why the drain cuts before its timeout (cut_now)
        self._cutting = False  # the drain has cut (or is cutting) what was left

    # -- phases ------------------------------------------------------------------------------------
    @property
    def draining(self) -> bool:
        return self.phase in (Phase.DRAINING, Phase.STOPPED)

    def mark_ready(self) -> None:
        if self.phase is Phase.STARTING:
            for callback in self._on_ready:  # before /ready says so: traffic may follow at once
                _call_ready(callback)
            self.phase = Phase.READY
            self.warm_up_problem = None
            logger.info("ready: warm-up done")

    def refusal(self) -> ServiceUnavailableError:
        """The error new work gets while draining (503, retry advice)."""
        return ServiceUnavailableError(
            "the server is shutting down (draining) and takes no new work; retry in 1 s, the load balancer "
            "sends it to a replica that is ready", retry_after_s=1.0)

    # -- listeners ---------------------------------------------------------------------------------
    def subscribe(self, listener: DrainListener) -> None:
        self._listeners.add(listener)
        if self.draining:
            listener.on_drain()

    def unsubscribe(self, listener: DrainListener) -> None:
        self._listeners.discard(listener)

    def on_ready(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the warm-up is done, just before the phase turns ``ready`` (at
        once when it already has)."""
        if self.phase is Phase.STARTING:
            self._on_ready.append(callback)
        elif self.phase is Phase.READY:
            _call_ready(callback)

    def on_drain(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` when the drain begins (e.g. to close admission with ``refusal``)."""
        self._on_drain.append(callback)

    # -- drain -------------------------------------------------------------------------------------
    def begin_drain(self) -> bool:
        """Enter ``draining`` (False when already there): refuse new work, close idle sockets."""
        if self.draining:
            return False
        self.phase = Phase.DRAINING
        for callback in self._on_drain:
            callback()
        for listener in list(self._listeners):
            listener.on_drain()
        return True

    def drain(self, open_streams: Callable[[], int],
              clones: Callable[[], int] = lambda: 0) -> "asyncio.Task[bool]":
        """Start (once) and return the drain task, which waits for ``open_streams()`` and
        ``clones()`` (voice clones in flight) to reach 0; its result is True when nothing had to be
        cut or left behind."""
        if self._drain_task is None:
            self._drain_task = asyncio.create_task(self._drain(open_streams, clones), name="gateway-drain")
        return self._drain_task

    async def _drain(self, open_streams: Callable[[], int], clones: Callable[[], int]) -> bool:
        self.begin_drain()
        started = time.monotonic()
        logger.info("draining: %d open stream(s), %d clone(s), %d socket(s); up to %g s for them to finish "
                    "(GEPARD_DRAIN_TIMEOUT_S)", open_streams(), clones(), len(self._listeners), self.drain_timeout_s)
        await _wait_for(lambda: open_streams() + clones() == 0 or self._cut_now is not None, self.drain_timeout_s)
        clean = open_streams() + clones() == 0
        outcome = "clean"
        if not clean:
            self._cutting = True
            left, cloning = open_streams(), clones()
            what = [f"cutting {left} stream(s){' now' if self._cut_now is not None else ''}"] if left else []
            if cloning:  # one JSON body each, no in-band error channel: the server's shutdown ends them
                what.append(f"{cloning} voice clone(s) still running cannot be cut in band and are left to the "
                            "server's graceful shutdown, which cancels any still running when it ends")
            outcome = " and ".join(x for x in ("streams cut" if left else "", "clones left" if cloning else "") if x)
            if self._cut_now is not None:
                error = DrainCutError(
                    "the server shut down before this stream finished: it was told to stop at once, by "
                    f"{self._cut_now} during the drain; send the unfinished text again on a new connection",
                    retry_after_s=1.0)
                logger.warning("%s during the drain: %s", self._cut_now, "; ".join(what))
            else:
                error = DrainCutError(
                    f"the server shut down before this stream finished: it was still open {self.drain_timeout_s:g} s "
                    "after the shutdown began (GEPARD_DRAIN_TIMEOUT_S); send the unfinished text again on a new "
                    "connection", retry_after_s=1.0)
                logger.warning("drain timeout after %g s: %s", self.drain_timeout_s, "; ".join(what))
            for callback in self._on_cut:
                callback(error)
            await asyncio.gather(*(listener.on_cut(error) for listener in list(self._listeners)),
                                 return_exceptions=True)
            await _wait_for(lambda: open_streams() == 0, CUT_GRACE_S)
        self.phase = Phase.STOPPED
        logger.info("drained in %.1f s (%s)", time.monotonic() - started, outcome)
        return clean

    def on_cut(self, callback: Callable[[DrainCutError], None]) -> None:
        """Call ``callback(error)`` when the drain timeout cuts the streams left (e.g. HTTP streams)."""
        self._on_cut.append(callback)

    def cut_now(self, cause: str) -> bool:
        """Cut what the drain still waits for now, as its timeout would, the errors naming ``cause``
        (e.g. "a second SIGTERM"). False when there is no drain waiting to be cut: none began, it
        already cut, or it is over."""
        if self._drain_task is None or self._drain_task.done() or self._cutting or self._cut_now is not None:
            return False
        self._cut_now = cause
        return True


async def _wait_for(condition: Callable[[], bool], timeout_s: float, poll_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(poll_s)
    return True


def _call_ready(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # a helper's failure must not keep a working gateway out of service
        logger.exception("a ready callback failed; the gateway turns ready all the same")


async def warm_up(rt: "Runtime", lifecycle: Lifecycle) -> None:
    """Make the gateway ready: wait for the voice store, then synthesise once through the whole
    path (engine prefill and steps, codec decode, resampling-free PCM), retrying every second until it
    works; a drain that begins meanwhile ends it."""
    from engine.requests import SamplingParams

    attempt = 0
    failing_since: Optional[float] = None
    last_error_at: Optional[float] = None
    while lifecycle.phase is Phase.STARTING:
        attempt += 1
        t0 = time.perf_counter()
        stage = "store"
        try:
            await rt.voices.check_health()
            stage = "synthesis"
            segment = rt.service.segment(WARM_UP_TEXT, "en")
            sampling = SamplingParams(max_frames=WARM_UP_FRAMES, seed=0)
            samples = 0
            async for pcm in rt.service.speak(segment, rt.engine.default_prefix(), sampling, f"warm-up-{attempt}"):
                samples += pcm.size
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            problem = f"{type(exc).__name__}: {exc}"
            now = time.monotonic()
            failing_since = now if failing_since is None else failing_since
            refused = stage == "store" and _credentials_refused(exc)
            if (now - (failing_since if last_error_at is None else last_error_at) >= WARM_UP_ERROR_EVERY_S
                    or (refused and last_error_at is None)):
                last_error_at = now
                logger.error("not ready: %s (warm-up failing for %.0f s, attempt %d, retrying every %g s): %s",
                             _what_fails(rt, stage, refused), now - failing_since, attempt, WARM_UP_RETRY_S, problem)
            elif problem != lifecycle.warm_up_problem:
                logger.warning("warm-up attempt %d failed (retrying every %g s): %s", attempt, WARM_UP_RETRY_S, problem)
            lifecycle.warm_up_problem = problem
            await asyncio.sleep(WARM_UP_RETRY_S)
            continue
        logger.info("warm-up: %d samples in %.2f s", samples, time.perf_counter() - t0)
        from api.segment_timing import warm_up_timing

        await warm_up_timing()
        lifecycle.mark_ready()


def _what_fails(rt: "Runtime", stage: str, refused: bool) -> str:
    """The part warm-up waits for, and the setting to check, for an ERROR line."""
    if stage != "store":
        return "the warm-up synthesis (engine and codec) fails"
    url = rt.settings.redis_url
    if url is None:
        return f"the embedded voice store in GEPARD_DATA_DIR ({rt.settings.data_dir}) fails"
    name = "GEPARD_REDIS_URL" if os.environ.get("GEPARD_REDIS_URL", "").strip() else "REDIS_URL"
    if refused:
        return f"Redis refuses the credentials in {name} ({_without_password(url)}): correct the user or password there"
    return f"the voice store in {name} ({_without_password(url)}) does not answer"


def _without_password(url: str) -> str:
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    except ValueError:  # not a URL settings would have taken; say nothing of it
        return "unparsable URL"


_REFUSED_CREDENTIALS = ("WRONGPASS", "NOAUTH", "invalid username-password")


def _credentials_refused(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is Redis refusing the credentials: redis-py's
    AuthenticationError, or the server's WRONGPASS / NOAUTH / "invalid username-password" answer."""
    try:
        from redis.exceptions import AuthenticationError, AuthenticationWrongNumberOfArgsError
        auth_errors: tuple[type[BaseException], ...] = (AuthenticationError, AuthenticationWrongNumberOfArgsError)
    except ImportError:  # the embedded store only
        auth_errors = ()
    seen: set[int] = set()
    error: Optional[BaseException] = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = str(error)
        if isinstance(error, auth_errors) or any(m in text for m in _REFUSED_CREDENTIALS):
            return True
        error = error.__cause__ or error.__context__
    return False
