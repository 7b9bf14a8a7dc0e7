"""``gepard serve``: settings from the environment and flags, then uvicorn (TLS optional, same port).

``uvicorn_config(settings)`` is the one place the server is configured; the test servers
(tests/api/live.py) use it too, so tests run what production runs:

    http       httptools with a bound on each request head (``GEPARD_MAX_HEADER_BYTES``, default
               64 KiB; over it: 431 ``headers_too_large``, connection closed; api/header_limit.py).
               Without httptools: h11, whose own head bound gets the same number.
    ws         uvicorn's ``websockets-sansio`` implementation (its legacy ``websockets`` one is deprecated),
               pinging every 20 s, closing after 20 s without pong, frames over 4 MiB closed with 1009
    TLS        ``GEPARD_TLS_CERTFILE`` / ``GEPARD_TLS_KEYFILE`` (https and wss on the same port)
    logging    ``log_config=None``: uvicorn's loggers propagate to the root handler that
               api.logging_setup installs (with its credential redaction)
    shutdown   10 s for open requests and sockets to finish
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from typing import Any, Optional, Union

import uvicorn

from api.logging_setup import configure_logging
from api.settings import Settings, SettingsError
from engine.checkpoint import resolve_model_dir
from engine.errors import CheckpointError

logger = logging.getLogger(__name__)

WS_PING_INTERVAL_S = 20.0
# The parser refuses messages over 1 MiB in band (413, the socket stays open); frames past this are
# not even read into memory (uvicorn's default is 16 MiB per socket): the socket closes with 1009.
WS_MAX_FRAME_BYTES = 4 << 20
WS_PING_TIMEOUT_S = 20.0
GRACEFUL_SHUTDOWN_S = 10


def http_protocol() -> Union[type, str]:
    """httptools bounded by api.header_limit, or h11 (bounded by uvicorn) where httptools is missing."""
    try:
        from api.header_limit import BoundedHttpToolsProtocol
    except ImportError:  # uvicorn without [standard]
        return "h11"
    return BoundedHttpToolsProtocol


def uvicorn_config(settings: Settings, app: Any = None, *, host: Optional[str] = None,
                   port: Optional[int] = None) -> uvicorn.Config:
    """The uvicorn configuration for ``settings`` (module docstring); ``app`` defaults to
    ``build_app(settings)``, ``host``/``port`` to the settings'."""
    if app is None:
        from api.app import build_app

        app = build_app(settings)
    return uvicorn.Config(
        app,
        host=settings.host if host is None else host,
        port=settings.port if port is None else port,
        http=http_protocol(),
        h11_max_incomplete_event_size=settings.max_header_bytes,
        ws="websockets-sansio",
        ws_max_size=WS_MAX_FRAME_BYTES,
        ws_ping_interval=WS_PING_INTERVAL_S,
        ws_ping_timeout=WS_PING_TIMEOUT_S,
        ssl_certfile=str(settings.tls_certfile) if settings.tls_certfile else None,
        ssl_keyfile=str(settings.tls_keyfile) if settings.tls_keyfile else None,
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )


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
    logger.info("serving on %s://%s:%d (model %s, backend %s)", scheme, settings.host, settings.port, settings.model, settings.backend)
    server = uvicorn.Server(uvicorn_config(settings))
    server.run()
    return 0 if server.started else 3  # 3: start-up failed (what uvicorn.run exits with)
