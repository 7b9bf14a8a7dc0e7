"""A hung vLLM engine core is a dead engine, and vLLM's processes never outlive a killed gateway.

vLLM notices an engine core that exits, not one that stops stepping: without the stall watchdog a
stopped (SIGSTOP), deadlocked or driver-stuck core left /health green and every request waiting
forever. The hung core is simulated by SIGSTOPping ``VLLM::EngineCore`` (always SIGCONTed after), on
an engine started for this module (the stall kills it, so the other modules' engines cannot serve).
"""

import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytest_asyncio

pytest.importorskip("vllm")

from engine.backends.vllm_backend import VllmEngine, VllmEngineConfig, stall_problem  # noqa: E402
from engine.errors import EngineDeadError  # noqa: E402
from engine.requests import FinishReason, SamplingParams, SynthesisRequest  # noqa: E402

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[3]
STALL_S = 3.0


def vllm_children() -> dict[int, str]:
    """{pid: name} of vLLM's processes below this one (titled ``VLLM::...``), zombies left out."""
    import psutil

    out = {}
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.name().startswith("VLLM"):
                out[p.pid] = p.name()
        except psutil.NoSuchProcess:
            pass
    return out


def alive(pids) -> set[int]:
    import psutil

    out = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.add(pid)
        except psutil.NoSuchProcess:
            pass
    return out


# -- the stall rule, without vLLM -----------------------------------------------------------------
def test_the_stall_rule():
    # idle (nothing unfinished) is never a stall, however long since the last step
    assert stall_problem(now=1000.0, last_step=0.0, busy_since=0.0, unfinished=0, limit_s=60) is None
    # work given to a long-idle engine: the limit counts from then, not from its last step
    assert stall_problem(now=1000.0, last_step=0.0, busy_since=990.0, unfinished=1, limit_s=60) is None
    assert stall_problem(now=1000.0, last_step=0.0, busy_since=930.0, unfinished=1, limit_s=60) == \
        "vLLM engine core made no step for 70 s with 1 request(s) unfinished"
    # stepping recently: fine; no step for longer than the limit: hung
    assert stall_problem(now=1000.0, last_step=950.0, busy_since=0.0, unfinished=3, limit_s=60) is None
    assert stall_problem(now=1000.0, last_step=938.0, busy_since=0.0, unfinished=3, limit_s=60) == \
        "vLLM engine core made no step for 62 s with 3 request(s) unfinished"
    # exactly the limit is still fine; 0 (or less) turns the check off
    assert stall_problem(now=1000.0, last_step=940.0, busy_since=0.0, unfinished=3, limit_s=60) is None
    assert stall_problem(now=1000.0, last_step=0.0, busy_since=0.0, unfinished=3, limit_s=0) is None


def test_the_stall_limit_comes_from_the_engine_options():
    from engine.factory import EngineOptions

    assert VllmEngineConfig.from_options(EngineOptions(model="m")).stall_timeout_s == 60.0
    assert VllmEngineConfig.from_options(EngineOptions(model="m", stall_timeout_s=0)).stall_timeout_s == 0
    assert VllmEngineConfig.from_options(EngineOptions(model="m", stall_timeout_s=2.5)).stall_timeout_s == 2.5


# -- declaring the engine dead on a vLLM whose internals moved ----------------------------------------
def engine_over(llm) -> VllmEngine:
    """A VllmEngine over a stand-in for AsyncLLM: only ``_declare_dead`` runs, no vLLM starts."""
    import torch

    llm.vllm_config = SimpleNamespace(model_config=SimpleNamespace(dtype=torch.float32))
    return VllmEngine(llm, frontend=None, config=VllmEngineConfig(model="m", stall_timeout_s=STALL_S), probe=None,
                      runner=None)


def test_declaring_the_engine_dead_wakes_the_waiting_streams_through_vllm():
    from vllm.v1.engine.exceptions import EngineDeadError as VllmEngineDeadError

    woken, cancelled = [], []
    llm = SimpleNamespace(engine_core=SimpleNamespace(resources=SimpleNamespace(engine_dead=False)),
                          output_handler=SimpleNamespace(cancel=lambda: cancelled.append(True)),
                          output_processor=SimpleNamespace(propagate_error=woken.append))
    eng = engine_over(llm)
    eng._declare_dead("vLLM engine core made no step for 3 s")
    assert llm.engine_core.resources.engine_dead and cancelled == [True]
    assert len(woken) == 1 and isinstance(woken[0], VllmEngineDeadError)


def test_a_vllm_without_those_internals_still_has_its_engine_declared_dead(caplog):
    """The watchdog must not die on an AttributeError (the engine would then look alive): what is
    missing is skipped and said, and the health check still fails."""
    eng = engine_over(SimpleNamespace(errored=False))  # no core client, no handler, no output processor
    with caplog.at_level(logging.ERROR, logger="engine.backends.vllm_backend"):
        eng._declare_dead("vLLM engine core made no step for 3 s")
    assert eng._dead_reason == "vLLM engine core made no step for 3 s"
    assert "has no output_processor.propagate_error: streams waiting on the hung engine core are not woken" \
        in caplog.text
    with pytest.raises(EngineDeadError, match="made no step"):
        asyncio.run(eng.check_health())


# -- a hung engine core ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def never_stop_dir(tmp_path_factory):
    from engine.tiny import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("never-stop"), stop_after=0, with_codec=False)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(never_stop_dir):
    before = set(vllm_children())
    # warmed up (the default): the first request after start pays vLLM's one-off kernel compilation,
    # seconds on a small CPU, which a 3 s stall limit would take for a hang
    eng = await VllmEngine.start(VllmEngineConfig(model=never_stop_dir, max_batch=2, max_model_len=256,
                                                  stall_timeout_s=STALL_S))
    started = set(vllm_children()) - before
    yield eng, started
    await eng.aclose()
    for _ in range(150):
        if not alive(started):
            break
        await asyncio.sleep(0.1)
    assert not alive(started), "engine processes left behind after aclose()"


def request(rid: str, max_frames: int) -> SynthesisRequest:
    return SynthesisRequest(rid, "Hello there.", None, SamplingParams(temperature=0.0, max_frames=max_frames))


@pytest.mark.asyncio(loop_scope="module")
async def test_a_hung_engine_core_fails_the_health_check_and_its_waiting_streams(engine):
    eng, started = engine
    chunks = [c async for c in eng.generate(request("before", 6))]
    assert chunks[-1].finish_reason is FinishReason.LENGTH  # a healthy core: requests finish
    await eng.check_health()
    cores = [pid for pid in started if vllm_children().get(pid, "").startswith("VLLM::EngineCor")]  # 15 chars
    assert len(cores) == 1, vllm_children()

    frames: list[int] = []
    first = asyncio.Event()

    async def consume(rid):
        async for chunk in eng.generate(request(rid, 200)):
            frames.append(chunk.num_frames)
            first.set()

    running = asyncio.create_task(consume("running"))  # mid-stream when the core hangs
    await asyncio.wait_for(first.wait(), 30)
    os.kill(cores[0], signal.SIGSTOP)
    try:
        stopped = time.monotonic()
        waiting = asyncio.create_task(consume("submitted-to-a-hung-core"))
        await asyncio.sleep(0.5)
        await eng.check_health()  # not yet: within the limit
        while True:
            try:
                await eng.check_health()
            except EngineDeadError as exc:
                error = str(exc)
                break
            assert time.monotonic() - stopped < STALL_S + 2, "a hung engine core still passes the health check"
            await asyncio.sleep(0.1)
        assert re.search(r"vLLM engine core made no step for \d+ s with 2 request\(s\) unfinished", error), error
        for task in (running, waiting):  # the streams fail instead of hanging
            with pytest.raises(EngineDeadError, match="made no step"):
                await asyncio.wait_for(task, 2)
        assert sum(frames) < 200
        with pytest.raises(EngineDeadError, match="made no step"):
            [c async for c in eng.generate(request("after", 4))]
    finally:
        os.kill(cores[0], signal.SIGCONT)


# -- a SIGKILLed gateway --------------------------------------------------------------------------
ORPHAN_SCRIPT = """
import asyncio, sys
import psutil
from engine.backends.vllm_backend import VllmEngine, VllmEngineConfig

async def main():
    await VllmEngine.start(VllmEngineConfig(model=sys.argv[1], max_batch=1, max_model_len=256, warmup=False))
    pids = [p.pid for p in psutil.Process().children(recursive=True) if p.name().startswith("VLLM")]
    print("VLLM-PIDS", *pids, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_the_parent_watch_never_runs_in_the_embedding_process():
    import threading

    from engine.backends.vllm_plugin import is_vllm_child, register, watch_parent

    register()
    assert not is_vllm_child() and watch_parent() is False
    assert not [t for t in threading.enumerate() if t.name == "gepard-parent-watch"]


@pytest.mark.slow
def test_vllms_processes_exit_when_the_process_that_started_them_is_sigkilled(never_stop_dir, tmp_path):
    """~1 min on two cores (a vLLM start in a subprocess)."""
    import psutil

    env = {**os.environ, "VLLM_PLUGINS": "gepard", "PYTHONPATH": str(REPO)}
    log = (tmp_path / "gateway.log").open("w")
    proc = subprocess.Popen([sys.executable, "-c", ORPHAN_SCRIPT, str(never_stop_dir)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=log, text=True)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 300
        for line in proc.stdout:
            if line.startswith("VLLM-PIDS"):
                pids = [int(p) for p in line.split()[1:]]
                break
            assert time.monotonic() < deadline
        assert pids, f"the engine did not start: {(tmp_path / 'gateway.log').read_text()[-3000:]}"
        names = {pid: psutil.Process(pid).name() for pid in pids}
        assert any(name.startswith("VLLM::EngineCor") for name in names.values()), names  # (15 chars)
        proc.kill()  # SIGKILL: nothing of the gateway runs, vLLM's shutdown included
        proc.wait(10)
        for _ in range(100):
            if not alive(pids):
                break
            time.sleep(0.1)
        assert not alive(pids), f"vLLM processes outlived their SIGKILLed parent: {names}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for pid in alive(pids):  # never leave them behind, whatever happened
            try:
                p = psutil.Process(pid)
                if p.name().startswith("VLLM"):
                    p.kill()
            except psutil.NoSuchProcess:
                pass
        log.close()
