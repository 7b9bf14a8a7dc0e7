"""The start-up heap frozen once the gateway is ready (api/heap.py, Lifecycle.on_ready), and only
in the process that serves (`gepard serve`), never in one that builds gateways over and over."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import httpx

from api.lifecycle import Lifecycle, Phase

REPO = Path(__file__).resolve().parents[2]


def test_ready_callbacks_run_once_before_the_phase_turns_ready():
    lifecycle = Lifecycle()
    seen: list[Phase] = []
    lifecycle.on_ready(lambda: seen.append(lifecycle.phase))
    assert seen == []
    lifecycle.mark_ready()
    lifecycle.mark_ready()
    assert seen == [Phase.STARTING] and lifecycle.phase is Phase.READY  # once, before /ready said so
    lifecycle.on_ready(lambda: seen.append(lifecycle.phase))  # registered late: called at once
    assert seen == [Phase.STARTING, Phase.READY]


def test_a_failing_ready_callback_is_logged_and_the_gateway_turns_ready(caplog):
    lifecycle = Lifecycle()
    seen: list[str] = []

    def broken() -> None:
        raise RuntimeError("no heap for you")

    lifecycle.on_ready(broken)
    lifecycle.on_ready(lambda: seen.append("next"))
    with caplog.at_level("ERROR", logger="api.lifecycle"):
        lifecycle.mark_ready()
    assert lifecycle.phase is Phase.READY and seen == ["next"]
    assert "a ready callback failed" in caplog.text and "no heap for you" in caplog.text
    caplog.clear()
    with caplog.at_level("ERROR", logger="api.lifecycle"):
        lifecycle.on_ready(broken)  # registered once ready (warm-up won the race): logged, not raised
    assert "a ready callback failed" in caplog.text


def test_a_gateway_that_drains_before_it_was_ready_calls_nothing():
    lifecycle = Lifecycle()
    seen: list[str] = []
    lifecycle.on_ready(lambda: seen.append("early"))
    lifecycle.begin_drain()
    lifecycle.mark_ready()
    lifecycle.on_ready(lambda: seen.append("late"))
    assert seen == [] and lifecycle.phase is Phase.DRAINING


def test_freezing_collects_start_up_garbage_first_and_freezes_the_rest():
    """In a process of its own: freezing this one would keep the suite's garbage forever."""
    script = """
import gc, weakref
from api.heap import freeze_startup_heap

class Node:
    pass

garbage = Node(); garbage.me = garbage; gone = weakref.ref(garbage); del garbage  # a cycle: only gc frees it
kept = [Node() for _ in range(1000)]
frozen = freeze_startup_heap()
assert gone() is None, "start-up garbage was frozen instead of freed"
assert frozen == gc.get_freeze_count() > len(kept)
assert gc.collect() == 0 and gc.get_freeze_count() == frozen  # collections leave the frozen heap alone
print("ok", frozen)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ok ")


def test_a_gateway_served_inside_a_process_does_not_freeze_it(gateway):
    assert httpx.get(gateway.url + "/ready", timeout=10).status_code == 200
    assert gc.get_freeze_count() == 0
