"""Engine stats (engine/stats.py) on both backends: per-step events and the scheduler snapshot.

Four requests on an engine with room for two: the first two run while the others wait, every
request reports one queue wait when it is first scheduled, and everything is back at 0 after.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from engine.backends.torch_backend import TorchEngine, TorchEngineConfig
from engine.requests import FinishReason, SamplingParams, SynthesisRequest
from engine.stats import EngineStats, StepEvent

TEXTS = ["Hello there.", "One.", "The quick brown fox.", "Good morning."]


class Recorder:
    """Step events plus the engine's snapshot taken inside each one (the observer may run on the
    engine's worker thread)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.events: list[StepEvent] = []
        self.snapshots: list[EngineStats] = []
        self._lock = threading.Lock()

    def __call__(self, event: StepEvent) -> None:
        with self._lock:
            self.events.append(event)
            self.snapshots.append(self.engine.stats())

    @property
    def steps(self) -> list[StepEvent]:
        return [e for e in self.events if e.batch_size > 0]

    @property
    def queue_waits(self) -> list[float]:
        return [w for e in self.events for w in e.queue_waits_s]


async def run_four(engine, prefix: str) -> None:
    async def one(i: int, text: str) -> FinishReason:
        request = SynthesisRequest(f"{prefix}{i}", text, None, SamplingParams(temperature=0.0))
        chunks = [c async for c in engine.generate(request)]
        return chunks[-1].finish_reason

    reasons = await asyncio.gather(*[one(i, t) for i, t in enumerate(TEXTS)])
    assert reasons == [FinishReason.STOP] * 4


def check_after_four(rec: Recorder, engine, frames_per_request: int = 24) -> None:
    steps = rec.steps
    assert steps and all(e.duration_s > 0 for e in steps)
    assert max(e.batch_size for e in steps) == 2 and all(1 <= e.batch_size <= 2 for e in steps)
    # each request is in about one step per frame it produces (24 here)
    assert sum(e.batch_size for e in steps) >= 4 * (frames_per_request - 4)
    assert len(rec.queue_waits) == 4 and all(w >= 0 for w in rec.queue_waits)
    assert max(s.running for s in rec.snapshots) == 2
    assert max(s.waiting for s in rec.snapshots) >= 1  # two waited for a free slot
    assert max(s.kv_cache_usage for s in rec.snapshots) > 0
    assert all(0 <= s.kv_cache_usage <= 1 for s in rec.snapshots)
    idle = engine.stats()
    assert (idle.running, idle.waiting, idle.kv_cache_usage, idle.preemptions) == (0, 0, 0.0, 0)


async def test_torch_engine_reports_steps_queue_waits_and_an_idle_snapshot(tiny_model):
    engine = TorchEngine(tiny_model, TorchEngineConfig(max_batch=2))
    try:
        rec = Recorder(engine)
        engine.set_step_observer(rec)
        await run_four(engine, "t")
        check_after_four(rec, engine)
        assert max(s.kv_cache_usage for s in rec.snapshots) == 0.5  # 2 rows (no CFG) of 2 x max_batch
        assert engine.stats().steps == len(rec.steps)
        engine.set_step_observer(None)
        seen = len(rec.events)
        await run_four(engine, "u")
        assert len(rec.events) == seen  # unplugged: no more events
        assert engine.stats().steps > len(rec.steps)
    finally:
        await engine.aclose()


async def test_a_failing_observer_never_hurts_generation(tiny_model):
    engine = TorchEngine(tiny_model, TorchEngineConfig(max_batch=2))
    try:
        def broken(event: StepEvent) -> None:
            raise RuntimeError("observer bug")

        engine.set_step_observer(broken)
        await run_four(engine, "b")
        await engine.check_health()
    finally:
        await engine.aclose()


@pytest.mark.vllm
async def test_vllm_engine_reports_its_scheduler_steps_queue_waits_and_an_idle_snapshot(tiny_gepard_dir):
    pytest.importorskip("vllm")
    from engine.backends.vllm_backend import VllmEngine, VllmEngineConfig

    engine = await VllmEngine.start(VllmEngineConfig(model=tiny_gepard_dir, max_batch=2, max_model_len=256))
    try:
        rec = Recorder(engine)
        engine.set_step_observer(rec)
        await run_four(engine, "v")
        check_after_four(rec, engine)
    finally:
        await engine.aclose()
