"""The test servers' ports (tests/ports.py): each xdist worker draws from a slice of its own, below
the kernel's ephemeral range, and consecutive draws in one worker differ."""

import socket
from pathlib import Path

from tests.ports import END_PORT, FIRST_PORT, free_port, worker_slice


def test_the_workers_slices_are_disjoint_and_cover_the_range():
    slices = [worker_slice(f"gw{i}", "3") for i in range(3)]
    assert slices[0].start == FIRST_PORT and slices[-1].stop <= END_PORT
    assert all(a.stop == b.start for a, b in zip(slices, slices[1:]))
    assert worker_slice("", "1") == worker_slice("master", "1") == range(FIRST_PORT, END_PORT)


def test_the_range_is_below_the_kernels_ephemeral_ports():
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    if ephemeral.exists():
        low = int(ephemeral.read_text().split()[0])
        assert END_PORT <= low, f"the kernel hands out ports from {low}: tests/ports.py's range overlaps it"


def test_free_ports_are_distinct_unbound_and_in_this_workers_slice():
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50 and set(ports) <= set(worker_slice())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[0]))
        sock.listen()
        # a port something listens on is skipped: every later draw avoids it
        assert ports[0] not in {free_port() for _ in range(len(worker_slice()) - 1)}
