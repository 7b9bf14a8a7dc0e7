"""Engine stats (engine/stats.py) on both backends: per-step events and the scheduler snapshot.

Four requests on an engine with room for two: the first two run while the others wait, every
request reports one queue wait when it is first scheduled, and everything is back at 0 after. The
vLLM engine's form runs on test_vllm_backend.py's engine (starting one costs ~25 s here).
"""

from __future__ import annotations

import asyncio
import threading

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


async def run_many(engine, prefix: str, n: int = 4) -> None:
    async def one(i: int) -> FinishReason:
        request = SynthesisRequest(f"{prefix}{i}", TEXTS[i % len(TEXTS)], None, SamplingParams(temperature=0.0))
        chunks = [c async for c in engine.generate(request)]
        return chunks[-1].finish_reason

    reasons = await asyncio.gather(*[one(i) for i in range(n)])
    assert reasons == [FinishReason.STOP] * n


def check_after(rec: Recorder, engine, requests: int = 4, max_batch: int = 2, frames_per_request: int = 24) -> None:
    """``requests`` requests ran on an engine with room for ``max_batch`` (fewer): some waited."""
    steps = rec.steps
    assert steps and all(e.duration_s > 0 for e in steps)
    assert max(e.batch_size for e in steps) == max_batch and all(1 <= e.batch_size <= max_batch for e in steps)
    # each request is in about one step per frame it produces (24 here)
    assert sum(e.batch_size for e in steps) >= requests * (frames_per_request - 4)
    assert len(rec.queue_waits) == requests and all(w >= 0 for w in rec.queue_waits)
    assert max(s.running for s in rec.snapshots) == max_batch
    assert max(s.waiting for s in rec.snapshots) >= 1  # some waited for a free slot
    assert max(s.kv_cache_usage for s in rec.snapshots) > 0
    assert all(0 <= s.kv_cache_usage <= 1 for s in rec.snapshots)
    idle = engine.stats()
    assert (idle.running, idle.waiting, idle.kv_cache_usage, idle.preemptions) == (0, 0, 0.0, 0)


async def test_torch_engine_reports_steps_queue_waits_and_an_idle_snapshot(tiny_model):
    engine = TorchEngine(tiny_model, TorchEngineConfig(max_batch=2))
    try:
        rec = Recorder(engine)
        engine.set_step_observer(rec)
        await run_many(engine, "t")
        check_after(rec, engine)
        assert max(s.kv_cache_usage for s in rec.snapshots) == 0.5  # 2 rows (no CFG) of 2 x max_batch
        assert engine.stats().steps == len(rec.steps)
        engine.set_step_observer(None)
        seen = len(rec.events)
        await run_many(engine, "u")
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
        await run_many(engine, "b")
        await engine.check_health()
    finally:
        await engine.aclose()
