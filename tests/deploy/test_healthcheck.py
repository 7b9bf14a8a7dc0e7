"""deploy/docker/healthcheck.py (the image's HEALTHCHECK and compose's) against a live gateway:
exit 0 on a ready gateway, 1 on a path that is not 200 and on a port nothing listens on."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.deploy._support import REPO
from tests.ports import free_port

SCRIPT = REPO / "deploy/docker/healthcheck.py"


def check(port: int, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GEPARD_TLS_CERTFILE",)} | {"GEPARD_PORT": str(port)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=30)


def test_ready_gateway_passes(gateway):
    run = check(gateway.port)
    assert run.returncode == 0, run.stderr
    assert check(gateway.port, "/health").returncode == 0


def test_not_200_and_not_listening_fail(gateway):
    missing = check(gateway.port, "/no-such-route")
    assert missing.returncode == 1 and "HTTP 404" in missing.stderr
    closed = check(free_port())
    assert closed.returncode == 1 and "/ready" in closed.stderr
