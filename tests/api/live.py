"""Real servers for gateway tests: the app on uvicorn on loopback, in a thread or a subprocess.

Both run the production server configuration (``api.server.uvicorn_config``).

    with LiveServer(settings) as server:      # in-process thread; server.url, server.ws_url
        ...
    proc = ServerProcess.start(env)           # `python -m api.cli serve` as its own process
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import httpx
import uvicorn

from api.app import build_app
from api.lifecycle import Phase
from api.server import GracefulServer, uvicorn_config
from api.settings import Settings
from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]


class LiveServer:
    """``build_app(settings)`` served by uvicorn in a background thread (its own event loop), with
    the production configuration; ``ssl`` (cert, key) overrides the settings' TLS files."""

    def __init__(self, settings: Settings, ssl: Optional[tuple[str, str]] = None) -> None:
        self.port = settings.port if settings.port not in (0, 8000) else free_port()
        if ssl:
            settings = dataclasses.replace(settings, tls_certfile=ssl[0], tls_keyfile=ssl[1])
        self.settings = settings
        config = uvicorn_config(settings, build_app(settings), host="127.0.0.1", port=self.port)
        self.server = GracefulServer(config)
        self.scheme = "https" if settings.tls_certfile else "http"
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}", daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"{'wss' if self.scheme == 'https' else 'ws'}://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120.0, ready: bool = True) -> "LiveServer":
        """Start serving; with ``ready`` also wait until warm-up is done (what /ready reports)."""
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started or (ready and self.runtime.lifecycle.phase is Phase.STARTING):
            if not self.thread.is_alive():
                raise RuntimeError("server thread exited during start-up (see the log above)")
            if time.monotonic() > deadline:
                raise TimeoutError("server did not start in time")
            time.sleep(0.05)
        return self

    def drain(self) -> None:
        """Begin the drain a SIGTERM begins (api/lifecycle.py); the server stops once it is over."""
        self.server.begin_drain()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def __enter__(self) -> "LiveServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def runtime(self):
        return self.server.config.app.state.runtime if hasattr(self.server.config, "app") else None


@dataclass
class ServerProcess:
    """``python -m api.cli serve`` in a subprocess (a separate gateway replica)."""

    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, env: dict[str, str], log_path: Path, timeout_s: float = 120.0,
              ready: bool = True) -> "ServerProcess":
        """Start ``gepard serve``; wait until ``/ready`` is 200 (``ready``) or it answers at all."""
        port = free_port()
        full_env = {**os.environ, **env, "GEPARD_PORT": str(port), "GEPARD_HOST": "127.0.0.1"}
        log = open(log_path, "wb")
        proc = subprocess.Popen([sys.executable, "-m", "api.cli", "serve"], cwd=REPO, env=full_env, stdout=log, stderr=subprocess.STDOUT)
        server = cls(proc, port, log_path)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(server.url + ("/ready" if ready else "/"), timeout=1.0).status_code == 200:
                    return server
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        server.stop()
        raise TimeoutError(f"server did not start:\n{log_path.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
