"""Loopback ports for the servers tests start, one range per pytest-xdist worker.

``./run.sh test`` runs the suite in worker processes (pytest-xdist). A port found by binding port 0
is the kernel's choice from its ephemeral range, and it is free again the moment the probing socket
closes: until the test's server binds it (a ``gepard serve`` subprocess first spends seconds
importing torch), the kernel may hand the same port to another worker's probe or connection. Ports
here come from below the ephemeral range, which the kernel never hands out by itself, and each
worker takes its own slice of them in turn, so no two servers are promised one port.
"""

from __future__ import annotations

import itertools
import os
import random
import socket

#: The ports drawn from: above the usual fixed services, below Linux's default ephemeral range
#: (32768-60999, /proc/sys/net/ipv4/ip_local_port_range).
FIRST_PORT = 20000
END_PORT = 32768

# Each process walks its slice from a random point, so consecutive calls give distinct ports and a
# rerun does not retry the previous run's ports (some may still be in TIME_WAIT).
_turn = itertools.count(random.randrange(1 << 16))


def worker_slice(worker: str | None = None, workers: str | None = None) -> range:
    """The ports of xdist worker ``gwN`` of ``workers`` (from the environment xdist sets);
    all of them when the suite runs in one process."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "") if worker is None else worker
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") if workers is None else workers
    count = max(1, int(workers))
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    size = (END_PORT - FIRST_PORT) // count
    start = FIRST_PORT + (index % count) * size
    return range(start, start + size)


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nothing listens on, that no other worker of this run will be given."""
    ports = worker_slice()
    for _ in range(len(ports)):
        port = ports[next(_turn) % len(ports)]
        if _bindable(port):
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")
