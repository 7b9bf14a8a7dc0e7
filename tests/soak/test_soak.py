"""Soak: 16 agent-like WebSocket clients with random cancels and disconnects against a gateway
subprocess on the tiny checkpoint (12 streams admitted at once, so refusals happen too); afterwards
nothing may be left behind.

    .venv/bin/python -m pytest tests/soak -m soak -s              # 60 s (the CI form)
    GEPARD_SOAK_S=600 .venv/bin/python -m pytest tests/soak -m soak -s

The load is bench/loadgen.py, in process. A warm-up load runs first, so the baseline is taken on a
warm server (allocator pools, KV rows, caches and lazy imports already grown). After the soak and
a settle time, /metrics must show:

- no open WebSocket, context, generation or engine request (a request the engine still holds
  also holds its KV rows / blocks, so this is the KV leak check too);
- one eSpeak NG child process (a quarter of the streams ask for phoneme timestamps), never
  restarted: cancels and hang-ups under load neither kill it nor leave it stuck;
- asyncio tasks and open file descriptors back at the baseline (+ a small slack);
- resident memory: within RSS_HIGH_WATER_BOUND of the warm baseline, and within
  RSS_LEAK_BOUND of what it was two thirds through the soak (under the same load, after the
  high-water mark of 12 concurrent streams was reached), which is where a per-stream leak shows,
  or levelled off by the end when a busy machine delayed that high-water mark (LEVEL_S);

and every stream must have completed, ended with exactly one error, or been cancelled or
disconnected by its client: never two terminal events, never anything after one, never a stream
left silent (a per-stream timeout fails), nothing still running at the hard stop; errors other than
concurrency refusals (429, which admission control may send) fail too.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

from bench.loadgen import LevelResult, LoadConfig, format_row, run
from tests.api.live import ServerProcess

SOAK_S = float(os.environ.get("GEPARD_SOAK_S", "60"))
AGENTS = 16
MAX_STREAMS = 12  # the server's stream limit: 12 of the 16 agents' contexts run, the rest are refused
WARMUP_S = 8.0
# RSS bounds, from measurements on a 2-core AMD EPYC (tiny checkpoint, torch backend, CPU, 12 streams
# at once; sampled every 2 s). RSS climbs in steps for the first 20-50 s of the soak (the 8 s
# warm-up does not reach the high-water mark of 12 concurrent streams: allocator arenas, KV cache
# rows and capacity, codec batches) and then stays flat, whatever the number of streams served:
#   60 s:  +62, +78 MB over the warm baseline;  +0 MB over the second half (one run sampled)
#   300 s: +79, +187 MB;                         +41, +4 MB
# (each run's load differs with the machine's other work). One 60 s run in a full suite climbed
# until 49 s (1,061 -> 1,137 MB at 30 s -> 1,267 MB at 49 s, flat after): +129 MB over the second
# half, but +62 MB over the last third, so the leak check reads the last third (FLAT_FROM). The
# bounds leave headroom over that and still catch the kind of growth an attack run once showed
# (931 MB -> 2,309 MB, never returned): 96 MB in 20 s of a 60 s soak is ~5 MB/s, in 200 s of a
# 600 s one ~0.5 MB/s.
RSS_HIGH_WATER_BOUND = 320 * 1024 * 1024
RSS_LEAK_BOUND = 96 * 1024 * 1024
FLAT_FROM = 2 / 3  # of the soak: RSS from here to the end must grow by at most RSS_LEAK_BOUND ...
# ... unless it had levelled off by the end: a leak climbs to the end, allocator growth stops. In a
# fresh-clone suite run (2026-12-04) the other test worker held the CPU for the soak's first half and
# the climb came late: 1,229 MB flat until 34 s, then 1,258 at 42 s, 1,334 at 50, 1,347 at 54, 1,355
# at 58 and 63 s (+97 MB over the last third, flat for its last 9 s).
LEVEL_S = 8.0  # the soak's last seconds in which RSS must stay within LEVEL_BOUND to count as levelled
LEVEL_BOUND = 16 * 1024 * 1024  # 2 MB/s: under the ~5 MB/s that RSS_LEAK_BOUND over a third stands for
TASK_SLACK = 2  # a scrape can overlap a closing connection's last task
FD_SLACK = 4



@pytest.fixture(scope="module")
def soak_server(tmp_path_factory: pytest.TempPathFactory):
    from engine.tiny import write_tiny_checkpoint

    ckpt = write_tiny_checkpoint(tmp_path_factory.mktemp("soak-ckpt"), size="tiny", seed=0, with_codec=True)
    data = tmp_path_factory.mktemp("soak-data")
    env = {"GEPARD_MODEL": str(ckpt), "GEPARD_BACKEND": "torch", "GEPARD_DEVICE": "cpu", "GEPARD_DTYPE": "float32",
           "GEPARD_DATA_DIR": str(data),
           # admission by count only: MAX_STREAMS contexts really run at once (the load-aware check
           # would admit ~2 on a busy 2-core machine), the other agents are refused now and then
           "GEPARD_MAX_STREAMS": str(MAX_STREAMS), "GEPARD_ADMIT_MAX_SATURATION": "0"}
    server = ServerProcess.start(env, data / "server.log")
    try:
        yield server
    finally:
        server.stop()


async def scrape(url: str) -> dict[str, float]:
    """Every unlabelled sample of GET /metrics, by name."""
    async with httpx.AsyncClient(timeout=10) as client:
        resp = await client.get(url + "/metrics")
    resp.raise_for_status()
    return {s.name: s.value for fam in text_string_to_metric_families(resp.text) for s in fam.samples if not s.labels}


async def phonemizer_restarts(url: str) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=10) as client:
        resp = await client.get(url + "/metrics")
    resp.raise_for_status()
    return {s.labels["reason"]: s.value for fam in text_string_to_metric_families(resp.text) for s in fam.samples
            if s.name == "gepard_phonemizer_restarts_total"}


def espeak_children(pid: int) -> list[int]:
    """The server's child processes running api/text/espeak.py."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return [c for c in children if b"espeak.py" in Path(f"/proc/{c}/cmdline").read_bytes()]


BUSY = ("gepard_websocket_connections", "gepard_websocket_contexts", "gepard_generations_in_flight",
        "gepard_engine_requests")


async def settled(url: str, timeout_s: float = 30.0, hold_s: float = 1.0) -> dict[str, float]:
    """The metrics once nothing is open or running, and that held for ``hold_s``."""
    deadline = time.monotonic() + timeout_s
    idle_since = None
    m: dict[str, float] = {}
    while time.monotonic() < deadline:
        m = await scrape(url)
        if all(m[name] == 0 for name in BUSY):
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= hold_s:
                return m
        else:
            idle_since = None
        await asyncio.sleep(0.25)
    return m  # the caller's assertions say what is still open


def load(url: str, seconds: float, seed: int) -> LoadConfig:
    return LoadConfig(url=url, concurrency=[AGENTS], duration_s=seconds, ramp_s=2.0, grace_s=20.0,
                      cancel_rate=0.15, disconnect_rate=0.08, flush_rate=0.3, timestamps_rate=0.25, phonemes_rate=0.25,
                      stream_timeout_s=20.0, seed=seed)


async def watch(url: str, peaks: dict[str, float], rss: list[tuple[float, float]], stop: asyncio.Event) -> None:
    """Largest value of each gauge seen during the load (shows the gauges move at all), and the
    RSS over time (a leak climbs steadily; allocator growth levels off)."""
    t0 = time.monotonic()
    while not stop.is_set():
        m = await scrape(url)
        for name, value in m.items():
            peaks[name] = max(peaks.get(name, value), value)
        rss.append((time.monotonic() - t0, m["process_resident_memory_bytes"]))
        try:
            await asyncio.wait_for(stop.wait(), 2.0)
        except asyncio.TimeoutError:
            pass


def levelled_off(rss: list[tuple[float, float]], end_rss: float) -> bool:
    """Whether RSS stayed within LEVEL_BOUND over the last LEVEL_S seconds the watcher sampled
    (every 2 s), and the settled value after: at least three readings, or it does not count."""
    last = rss[-1][0] if rss else 0.0
    tail = [v for t, v in rss if t >= last - LEVEL_S] + [end_rss]
    return len(tail) >= 3 and max(tail) - min(tail) <= LEVEL_BOUND


def test_a_late_step_of_allocator_growth_is_levelled_off_and_a_leak_is_not():
    mb = 2**20
    late_step = [(t, 1229 * mb) for t in range(0, 36, 2)] + [(42, 1258 * mb), (46, 1295 * mb), (50, 1334 * mb),
                                                               (54, 1347 * mb), (56, 1352 * mb), (58, 1355 * mb),
                                                               (60, 1355 * mb), (62, 1355 * mb)]
    assert levelled_off(late_step, 1355 * mb)
    leak = [(t, (1000 + 5 * t) * mb) for t in range(0, 62, 2)]  # 5 MB/s to the end: past the bound, and climbing
    assert not levelled_off(leak, 1310 * mb)
    assert not levelled_off([(59, 1000 * mb)], 1000 * mb)  # too few readings to say


def stream_problems(result: LevelResult) -> list[str]:
    out = []
    for r in result.records:
        why = list(r.violations)
        if r.outcome == "cut":
            why.append("still running at the hard stop")
        if r.outcome == "error" and not r.refused:
            why.append(f"error {r.error_code} ({r.status_code})")
        if r.after_client_end_s > 5.0:
            why.append(f"messages {r.after_client_end_s:.1f} s after the client's cancel")
        if why:
            out.append(f"{r.context_id} (agent {r.agent}, {r.outcome}): {', '.join(why)}")
    return out


async def test_leak_gauges_follow_open_sockets(soak_server: ServerProcess):
    """The gauges the soak relies on: each open WebSocket holds a task and a file descriptor on the
    server, and both come back when it closes."""
    url = soak_server.url
    base = await settled(url)
    assert base["process_resident_memory_bytes"] > 0 and base["gepard_event_loop_tasks"] >= 1
    assert base["gepard_engine_requests"] == 0
    sockets = [await connect(url.replace("http", "ws", 1) + "/tts/websocket") for _ in range(5)]
    try:
        busy = await scrape(url)
    finally:
        for ws in sockets:
            await ws.close()
    assert busy["gepard_websocket_connections"] == 5
    assert busy["process_open_fds"] >= base["process_open_fds"] + 5
    assert busy["gepard_event_loop_tasks"] >= base["gepard_event_loop_tasks"] + 5
    after = await settled(url)
    assert after["gepard_event_loop_tasks"] <= base["gepard_event_loop_tasks"]
    assert after["process_open_fds"] <= base["process_open_fds"]


@pytest.mark.soak
@pytest.mark.slow
@pytest.mark.timeout(int(SOAK_S + WARMUP_S + 400))
async def test_soak_leaves_nothing_behind(soak_server: ServerProcess):
    url = soak_server.url
    (warm,) = await run(load(url, WARMUP_S, seed=101))
    assert warm.summary["completed"] > 0, warm.summary
    base = await settled(url)
    assert all(base[name] == 0 for name in BUSY), {name: base[name] for name in BUSY}

    peaks: dict[str, float] = {}
    rss_over_time: list[tuple[float, float]] = []
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch(url, peaks, rss_over_time, stop))
    try:
        (soak,) = await run(load(url, SOAK_S, seed=1))
    finally:
        stop.set()
        await watcher
    after = await settled(url)

    s = soak.summary
    rss0, rss1 = base["process_resident_memory_bytes"], after["process_resident_memory_bytes"]
    rss_mid = next(v for t, v in rss_over_time + [(math.inf, rss1)] if t >= SOAK_S * FLAT_FROM)
    print(f"\nsoak {SOAK_S:g} s, {AGENTS} agents: {s['streams']} streams, outcomes {s['outcomes']}, "
          f"errors {s['errors_by_code']}, xRT {s['xrt']:.2f}, last message {s['max_after_cancel_s']:.2f} s after a client's cancel or close")
    print(format_row(s))
    print(f"RSS {rss0 / 2**20:.0f} MB -> {rss_mid / 2**20:.0f} MB two thirds in -> {rss1 / 2**20:.0f} MB (peak {peaks.get('process_resident_memory_bytes', 0) / 2**20:.0f} MB); "
          f"tasks {base['gepard_event_loop_tasks']:.0f} -> {after['gepard_event_loop_tasks']:.0f}; "
          f"fds {base['process_open_fds']:.0f} -> {after['process_open_fds']:.0f}; "
          f"peak contexts {peaks.get('gepard_websocket_contexts', 0):.0f}, "
          f"peak engine requests {peaks.get('gepard_engine_requests', 0):.0f}")
    step = max(1, len(rss_over_time) // 12)
    print("RSS over the soak (s: MB): " + ", ".join(f"{t:.0f}: {v / 2**20:.0f}" for t, v in rss_over_time[::step]))

    # the load really ran, and really cancelled and disconnected
    assert s["completed"] > 0 and s["audio_s"] > 0, s
    assert s["outcomes"]["cancelled"] > 0 and s["outcomes"]["disconnected"] > 0, s["outcomes"]
    assert peaks.get("gepard_websocket_contexts", 0) > 0 and peaks.get("gepard_engine_requests", 0) > 0, peaks

    problems = stream_problems(soak)
    assert not problems, f"{len(problems)} bad stream(s):\n" + "\n".join(problems[:20])
    assert not s["sockets"]["server_closes"] and not s["sockets"]["unrouted"], s["sockets"]

    # nothing left open
    assert {name: after[name] for name in BUSY} == {name: 0.0 for name in BUSY}
    assert after["gepard_event_loop_tasks"] <= base["gepard_event_loop_tasks"] + TASK_SLACK
    assert after["process_open_fds"] <= base["process_open_fds"] + FD_SLACK
    # every codec state slot came back (cancels and hang-ups included), and no stream ever lacked one
    assert after["gepard_codec_state_slots_free"] == base["gepard_codec_state_slots_free"] > 0
    assert after["gepard_codec_windowed_streams_total"] == 0
    assert rss1 - rss0 <= RSS_HIGH_WATER_BOUND, f"RSS grew {(rss1 - rss0) / 2**20:.0f} MB over the warm baseline"
    assert rss1 - rss_mid <= RSS_LEAK_BOUND or levelled_off(rss_over_time, rss1), (
        f"RSS grew {(rss1 - rss_mid) / 2**20:.0f} MB over the last third and was still climbing at the end")
    # phonemes were asked for and sent, by one eSpeak process that never had to be replaced
    phoneme_streams = [r for r in soak.records if r.phonemes and r.outcome == "done"]
    assert phoneme_streams and all(r.phoneme_events > 0 for r in phoneme_streams if r.audio_s > 0)
    assert set((await phonemizer_restarts(url)).values()) == {0.0}
    assert len(espeak_children(soak_server.process.pid)) == 1
    log = Path(soak_server.log_path).read_text(errors="replace")
    assert "Traceback" not in log, log[log.index("Traceback") - 2000:][:6000]
