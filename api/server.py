"""``gepard serve``: settings from the environment and flags, then uvicorn (TLS optional, same port)."""

from __future__ import annotations

import argparse
import dataclasses
import logging

import uvicorn

from api.app import build_app
from api.logging_setup import configure_logging
from api.settings import Settings, SettingsError
from engine.checkpoint import resolve_model_dir
from engine.errors import CheckpointError

logger = logging.getLogger(__name__)


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
    configure_logging(settings.log_level, settings.log_format)
    try:
        # find the checkpoint before starting the server, so a missing model is one clear line
        model_dir = resolve_model_dir(settings.model)
    except CheckpointError as exc:
        print(f"gepard serve: {exc}")
        return 2
    settings = dataclasses.replace(settings, model=str(model_dir))
    scheme = "https" if settings.tls_certfile else "http"
    logger.info("serving on %s://%s:%d (model %s, backend %s)", scheme, settings.host, settings.port, settings.model, settings.backend)
    uvicorn.run(
        build_app(settings),
        host=settings.host,
        port=settings.port,
        ssl_certfile=str(settings.tls_certfile) if settings.tls_certfile else None,
        ssl_keyfile=str(settings.tls_keyfile) if settings.tls_keyfile else None,
        log_config=None,
        ws="websockets",
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        timeout_graceful_shutdown=10,
    )
    return 0
