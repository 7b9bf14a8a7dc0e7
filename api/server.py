"""``gepard serve``: settings from the environment and flags, then uvicorn (TLS optional, same port).

``uvicorn_config(settings)`` is the one place the server is configured; the test servers
(tests/api/live.py) use it too, so tests run what production runs:

    http       httptools with a bound on each request head (``GEPARD_MAX_HEADER_BYTES``, default
               64 KiB; over it: 431 ``headers_too_large``, connection closed; api/header_limit.py).
               Without httptools: h11, whose own head bound gets the same number. With httptools a
               head must also arrive whole within 30 s (408 ``request_timeout``) and a body may not
               pause for 30 s (dropped): api/http_protocol.py; h11 has neither deadline (a warning
               at start says so).
    ws         uvicorn's ``websockets-sansio`` implementation (its legacy ``websockets`` one is deprecated),
               refusals answered without a false error line (api/ws_protocol.py),
               pinging every 20 s, closing after 20 s without pong, frames over 4 MiB closed with 1009,
               permessage-deflate only with ``GEPARD_WS_COMPRESSION`` (uvicorn accepts it by default;
               deflating every audio chunk is the largest cost of the event loop, bench/loop_cost.py)
    TLS        ``GEPARD_TLS_CERTFILE`` / ``GEPARD_TLS_KEYFILE`` (https and wss on the same port)
    logging    ``log_config=None``: uvicorn's loggers propagate to the root handler that
               api.logging_setup installs (with its credential redaction)
    start-up   a failure while the app starts (the engine or codec does not load) is one line,
               ``start-up failed: CodecFormatError: ...`` (its traceback at DEBUG), then uvicorn's
               "Application startup failed", and the process exits 3 (``OneLineStartupFailure``)
    heap       once warm, just before ``/ready`` turns 200, the start-up heap is frozen out of the
               garbage collector's way (api/heap.py; ``serve`` only, not the in-process test servers)
    listening  ``serve`` binds the address before the model loads, so a port in use (or a host it
               cannot bind) is one line, ``gepard serve: cannot listen on ...``, and exit 2 within
               seconds; connections are taken (listen) once start-up is done, as before
    shutdown   SIGTERM, SIGINT or SIGHUP drains (``GracefulServer``, api/lifecycle.py): /ready turns
               503, new work gets 503, open streams get ``GEPARD_DRAIN_TIMEOUT_S`` to finish, the rest
               is cut with in-band errors, then uvicorn shuts down (10 s more for any other open
               request) and the process exits 0. A second signal (any of the three) makes that cut at
               once and the process exits 0 as soon as the cut streams have ended; one more skips
               uvicorn's wait for other requests.
    early stop a signal while the app starts cancels the start-up: an engine load under way (in a
               thread, it cannot be interrupted) ends first and the engine is closed, whatever else
               was opened is closed, and the process exits 0 without waiting for the rest (a codec
               load in its thread is left to the exit)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any, Iterator, Optional, Union

import uvicorn

from api.heap import freeze_startup_heap
from api.logging_setup import configure_logging
from api.settings import Settings, SettingsError
from api.ws_protocol import GatewayWebSocketProtocol
from engine.checkpoint import resolve_model_dir
from engine.errors import CheckpointError

if TYPE_CHECKING:
    from api.app import Runtime

logger = logging.getLogger(__name__)

WS_PING_INTERVAL_S = 20.0
# The parser refuses messages over 1 MiB in band (413, the socket stays open); frames past this are
# not even read into memory (uvicorn's default is 16 MiB per socket): the socket closes with 1009.
WS_MAX_FRAME_BYTES = 4 << 20
WS_PING_TIMEOUT_S = 20.0
GRACEFUL_SHUTDOWN_S = 10


def http_protocol() -> Union[type, str]:
    """httptools with its heads and stalled readers bounded (api.http_protocol), or h11 (heads bounded
    by uvicorn, stalled readers not) where httptools is missing."""
    try:
        from api.http_protocol import GatewayHttpProtocol
    except ImportError:  # uvicorn without [standard]
        # said at every start: an operator should not find this out from a stalled connection
        logger.warning("httptools is not installed (uvicorn[standard] brings it): serving HTTP with h11, which "
                       "bounds request heads but has no head, body or send deadlines: a client that stops sending or "
                       "reading keeps its connection, and a response's stream, until it hangs up")
        return "h11"
    return GatewayHttpProtocol


class OneLineStartupFailure:
    """The ASGI app, with a failed start-up (lifespan) reported as one line.

    Starlette reports an exception raised while the app starts to uvicorn as its whole traceback,
    which uvicorn logs as one record: a wall of frames in text logs, one 2,000-character escaped
    line in JSON logs, the cause at its very end. Here the report is the exception's type and
    message; the traceback is logged at DEBUG. A start-up cancelled (``GracefulServer`` stopping
    it on a signal) is reported by nothing here: the server logs why. Anything else passes through
    untouched, ``state`` (where the lifespan keeps the runtime) included.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lifespan_task: Optional["asyncio.Task[Any]"] = None  # the task running the lifespan

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        failed: Optional[dict[str, Any]] = None

        async def hold_failure(message: Any) -> None:
            nonlocal failed
            if message["type"] == "lifespan.startup.failed":
                failed = dict(message)  # sent below, once the exception that follows it is known
                return
            await send(message)

        self.lifespan_task = asyncio.current_task()
        try:
            await self.app(scope, receive, hold_failure)
        except asyncio.CancelledError:
            if failed is not None:
                failed.pop("message", None)  # uvicorn logs a message; a stop on purpose needs none
            raise
        except Exception as exc:
            if failed is not None:
                logger.debug("start-up failed", exc_info=exc)
                failed["message"] = "start-up failed: " + " ".join(f"{type(exc).__name__}: {exc}".split())
            raise
        finally:
            if failed is not None:  # uvicorn logs it, ends start-up, and stays quiet about the raise
                await send(failed)


def uvicorn_config(settings: Settings, app: Any = None, *, host: Optional[str] = None,
                   port: Optional[int] = None) -> uvicorn.Config:
    """The uvicorn configuration for ``settings`` (module docstring); ``app`` defaults to
    ``build_app(settings)``, ``host``/``port`` to the settings'."""
    if app is None:
        from api.app import build_app

        app = build_app(settings)
    config = uvicorn.Config(
        OneLineStartupFailure(app),
        host=settings.host if host is None else host,
        port=settings.port if port is None else port,
        http=http_protocol(),
        h11_max_incomplete_event_size=settings.max_header_bytes,
        ws=GatewayWebSocketProtocol,
        ws_max_size=WS_MAX_FRAME_BYTES,
        ws_per_message_deflate=settings.ws_compression,
        ws_ping_interval=WS_PING_INTERVAL_S,
        ws_ping_timeout=WS_PING_TIMEOUT_S,
        ssl_certfile=str(settings.tls_certfile) if settings.tls_certfile else None,
        ssl_keyfile=str(settings.tls_keyfile) if settings.tls_keyfile else None,
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    config.http_send_timeout_s = settings.http_send_timeout_s  # read by api.http_protocol (uvicorn has no such option)
    return config


class GracefulServer(uvicorn.Server):
    """uvicorn's server, draining the gateway on the first SIGTERM/SIGINT/SIGHUP before it shuts down.

    uvicorn alone stops at the first signal: it closes every WebSocket with 1012 at once, gives
    HTTP responses 10 s, and then re-raises the signal, so the process dies by it (and by SIGHUP,
    which it leaves alone, at once, leaving vLLM's engine processes behind). Here the first
    signal starts ``Runtime.drain()`` and the server keeps listening (new requests get a 503
    rather than a refused connection); when the drain is over, uvicorn's own shutdown runs and
    ``serve`` returns normally (exit 0). A second signal cuts what the drain waits for at once
    (``Lifecycle.cut_now``: the in-band errors of the drain timeout); a signal after the cut
    stops uvicorn's wait for other requests (its ``force_exit``). A signal during start-up
    cancels it (``stopped_during_startup``).
    """

    def __init__(self, config: uvicorn.Config, *, freeze_heap_when_ready: bool = False,
                 exit_when_startup_stopped: bool = False) -> None:
        super().__init__(config)
        # the process that serves freezes its start-up heap once ready (api/heap.py); a test
        # process that runs many gateways must not, hence off by default
        self.freeze_heap_when_ready = freeze_heap_when_ready
        # the process that serves exits at once (0) when a signal stopped its start-up: a codec load
        # may still run in a worker thread nothing can stop, which the interpreter would wait for
        self.exit_when_startup_stopped = exit_when_startup_stopped
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._drain: Optional["asyncio.Task[bool]"] = None
        self._starting: Optional["asyncio.Task[Any]"] = None  # the task in startup(), while there
        self.drained_clean: Optional[bool] = None  # the drain's result, once it ran
        self.stopped_during_startup = False  # a signal cancelled the start-up

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's handlers for SIGINT and SIGTERM, and the same for SIGHUP (left to its default,
        SIGHUP would kill the process with no drain and no engine shutdown)."""
        if threading.current_thread() is not threading.main_thread():
            with super().capture_signals():
                yield
            return
        original = signal.signal(signal.SIGHUP, self.handle_exit)
        try:
            with super().capture_signals():
                yield
        finally:
            signal.signal(signal.SIGHUP, original)

    async def startup(self, sockets: Any = None) -> None:
        self._starting = asyncio.current_task()
        try:
            await super().startup(sockets)
        except asyncio.CancelledError:
            if not self.stopped_during_startup or self._starting is None:
                raise
            self._starting.uncancel()  # cancelled by _stop_startup, and handled here
            lifespan_task = getattr(self.config.app, "lifespan_task", None)
            if lifespan_task is not None:  # the app closes what it opened (api/app.py)
                await asyncio.wait([lifespan_task])
            logger.info("start-up stopped")
            if self.exit_when_startup_stopped:  # what the app opened is closed (the engine too)
                logging.shutdown()
                os._exit(0)
            return
        finally:
            self._starting = None
        if sockets is not None and self.started:  # uvicorn logs the address only for sockets it bound
            self._log_started_message(sockets)
        runtime = self._runtime()
        if self.freeze_heap_when_ready and runtime is not None and not self.should_exit:
            runtime.lifecycle.on_ready(freeze_startup_heap)

    def handle_exit(self, sig: int, frame: Optional[FrameType]) -> None:
        # not recorded in _captured_signals: uvicorn would re-raise it after a clean shutdown
        if self._loop is None:
            self.should_exit = True  # not serving yet: stop before it starts
            return
        self._loop.call_soon_threadsafe(self._on_signal, signal.Signals(sig).name)

    def _on_signal(self, name: str) -> None:
        """A signal, on the event loop: stop the start-up, start the drain, cut it, or stop waiting."""
        if not self.started:
            self._stop_startup(name)
        elif self._drain is None:
            self._start_drain(name)
        elif (runtime := self._runtime()) is not None and runtime.lifecycle.cut_now(f"a second signal ({name})"):
            logger.info("%s, a second signal: cutting what is still open now", name)
        else:  # the drain already cut (or finished): uvicorn's shutdown is under way
            logger.info("%s, one more signal: stopping without waiting for open requests", name)
            self.should_exit = self.force_exit = True

    def _stop_startup(self, cause: str) -> None:
        self.should_exit = True  # at the latest, the server stops once started
        if self.stopped_during_startup:
            logger.info("%s: already stopping; waiting for an engine load under way to end", cause)
            return
        lifespan = getattr(self, "lifespan", None)
        lifespan_task = getattr(self.config.app, "lifespan_task", None)
        if (self._starting is None or lifespan is None or lifespan.startup_event.is_set()
                or lifespan_task is None or lifespan_task.done()):
            return  # start-up not begun, or the app has started: should_exit stops the server
        self.stopped_during_startup = True
        logger.info("%s during start-up: stopping it (an engine load under way ends first, to be closed; "
                    "whatever else was opened is closed)", cause)
        lifespan_task.cancel()
        self._starting.cancel()

    def begin_drain(self) -> None:
        """Start the drain as a signal would (thread-safe; tests call it)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._start_drain, "request")

    def _start_drain(self, cause: str) -> None:
        if self._drain is not None:
            return
        runtime = self._runtime()
        if runtime is None:
            self.should_exit = True
            return
        logger.info("%s: draining before shutdown", cause)
        self._drain = runtime.drain()
        self._drain.add_done_callback(self._drained)

    def _drained(self, task: "asyncio.Task[bool]") -> None:
        self.drained_clean = None if task.cancelled() or task.exception() else task.result()
        self.should_exit = True

    def _runtime(self) -> Optional["Runtime"]:
        """The gateway's runtime, once the app's lifespan has opened it."""
        return getattr(self.config.app.state, "runtime", None) if hasattr(self.config.app, "state") else None


def bind_socket(host: str, port: int) -> socket.socket:
    """The server's address, bound (not yet listening: until start-up is done, connections are
    refused as before). uvicorn's own ``Config.bind_socket`` does the same but logs "running on"
    already and exits on an error; here the error is the caller's ``OSError``."""
    host = host or "0.0.0.0"
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's create_server does
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def serve(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env(
            host=args.host, port=args.port, model=args.model, codec=args.codec,
            backend=getattr(args, "backend", None), device=None if args.device == "auto" else args.device,
            dtype=None if args.dtype == "auto" else args.dtype,
        )
    except SettingsError as exc:
        print(f"gepard serve: {exc}")
        return 2
    configure_logging(settings.log_level, settings.log_format, secrets=settings.api_keys)
    try:
        # find the checkpoint before starting the server, so a missing model is one clear line
        model_dir = resolve_model_dir(settings.model)
    except CheckpointError as exc:
        print(f"gepard serve: {exc}")
        return 2
    settings = dataclasses.replace(settings, model=str(model_dir))
    scheme = "https" if settings.tls_certfile else "http"
    try:
        # bound before anything loads (minutes on real weights), so a port in use is said at once
        sock = bind_socket(settings.host, settings.port)
    except OSError as exc:
        print(f"gepard serve: cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc} "
              "(set GEPARD_HOST/GEPARD_PORT or --host/--port)")
        return 2
    logger.info("serving on %s://%s:%d (model %s, backend %s)", scheme, settings.host, settings.port, settings.model, settings.backend)
    server = GracefulServer(uvicorn_config(settings), freeze_heap_when_ready=True, exit_when_startup_stopped=True)
    server.run(sockets=[sock])
    # 3: start-up failed (what uvicorn.run exits with); a signal that stopped the start-up is a clean stop
    return 0 if server.started or server.stopped_during_startup else 3
