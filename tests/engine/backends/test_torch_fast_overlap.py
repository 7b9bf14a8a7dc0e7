"""The fast path with overlapped steps (``overlap``), on CPU.

Each ``step()`` launches the next decode step before it reads the results of the one the last
call launched, so on a GPU the host's bookkeeping (results to outputs, admissions, the engine's
dispatch) runs while the device computes. A request's frames are then handed out one call later,
and a request that stops has had one more frame launched, which is dropped. On CPU the step runs
synchronously, but the order of launches, results and releases is the same, so what it must keep
is checked here: the reference loop's frames for every request, whatever joins, leaves, stops or
is cancelled beside it. (A failed step, which drops the step in flight with its batch, is tested
with test_torch_fast's, run both ways.)
"""

from __future__ import annotations

import asyncio
import dataclasses

import torch

from engine.backends.torch_backend import TorchEngine, TorchEngineConfig
from engine.backends.torch_fast import FastGenerator
from engine.errors import GenerationError
from engine.requests import FinishReason, SamplingParams, SynthesisRequest
from tests.engine.backends.test_torch_fast import (  # noqa: F401  (preparer is a fixture)
    KNOBS, SEEDED, TEXTS, assert_same, drive, mid_batch_schedule, never_stop_model, prepare, preparer, solo)


def overlapped(model, **kw) -> FastGenerator:
    kw.setdefault("max_batch", 8)
    kw.setdefault("max_positions", 512)
    return FastGenerator(model, overlap=True, **kw)


def test_every_knob_alone_and_batched_gives_the_reference_frames(tiny_model, preparer):
    reqs = [prepare(preparer, tiny_model, f"{name}{i}", TEXTS[i % 4], sp) for i, (name, sp) in enumerate(KNOBS.items())]
    batched = drive(overlapped(tiny_model), {0: reqs[:2], 3: reqs[2:]})
    for req in reqs:
        ref = solo(tiny_model, req)
        assert_same(ref, drive(overlapped(tiny_model), {0: [req]}), req.request_id)
        assert_same(ref, batched, req.request_id)
        # the stop head ends it after 24 frames: the frame launched behind the stop is not handed out
        assert ref.finish[req.request_id] is FinishReason.STOP and batched.codes(req.request_id).shape == (32, 24)


def test_joins_leaves_frame_caps_cfg_and_a_cancel_mid_batch(never_stop_model, preparer):
    m = never_stop_model
    (a, b, c, d, e), joins = mid_batch_schedule(preparer, m)  # d: never launched past its frame cap
    shapes = []
    got = drive(overlapped(m), joins, aborts={20: ["b"]}, on_step=lambda s, g: shapes.append(g.last_shape))
    for req in (a, c, d, e):
        assert_same(solo(m, req), got, req.request_id)
    assert got.finish["d"] is FinishReason.LENGTH and got.codes("d").shape[1] == 6
    # b, cancelled before call 20, got the reference's first frames; the one in flight was dropped
    assert got.finish["b"] is FinishReason.ABORT
    b_codes = got.codes("b")
    assert b_codes.shape[1] == 19 and torch.equal(b_codes, solo(m, b).codes("b")[:, :19])
    assert {s[0] for s in shapes if s[0]} >= {2, 4}


def test_the_next_step_is_launched_before_the_last_ones_results_are_read(never_stop_model, preparer):
    m = never_stop_model
    req = prepare(preparer, m, "r", TEXTS[0], SamplingParams(temperature=0.0, max_frames=10))
    for overlap, ahead in ((False, 0), (True, 1)):
        gen = FastGenerator(m, max_batch=2, max_positions=512, overlap=overlap)
        gen.add(req)
        assert [o.codes is not None for o in gen.step()] == [True]  # the prefill's frame, at once
        st = gen.active["r"]
        assert (st.frames, st.launched) == (1, 1)
        handed_out, buffers = 1, []
        for _ in range(5):  # then each call hands out the frame of the step before it, if overlapped
            handed_out += sum(o.codes is not None for o in gen.step())
            assert (st.frames, st.launched) == (handed_out, handed_out + ahead)
            if overlap:  # the step in flight copies its results into the buffer the host is not reading
                buffers.append(gen._inflight.out)
        assert all(x is not y for x, y in zip(buffers, buffers[1:]))
        # the frame cap: the last frame is launched once, and no step is launched past it
        while gen.has_work():
            gen.step()
        assert st.frames == st.launched == 10


def test_cancel_frees_the_slot_within_one_step_and_a_waiting_request_takes_it(never_stop_model, preparer):
    m = never_stop_model
    gen = overlapped(m, max_batch=1)
    a = prepare(preparer, m, "a", TEXTS[1], SamplingParams(temperature=0.0, max_frames=400))
    b = prepare(preparer, m, "b", TEXTS[0], SamplingParams(temperature=1.0, seed=8, max_frames=4))
    gen.add(a)
    for _ in range(5):
        gen.step()
    gen.add(b)
    gen.step()
    assert list(gen.active) == ["a"] and [p.request_id for p in gen.pending] == ["b"]
    gen.abort("a")
    outs = gen.step()
    assert [o.finish_reason for o in outs if o.request_id == "a"] == [FinishReason.ABORT]
    assert list(gen.active) == ["b"] and gen.kv_cache_usage == 1.0  # b prefilled into a's slot at once
    # a's step still in flight wrote a's old slot; b's frames are still its own
    while gen.has_work():
        outs += gen.step()
    assert torch.equal(torch.stack([o.codes for o in outs if o.request_id == "b" and o.codes is not None], 1),
                       solo(m, b).codes("b"))


def test_a_poisoned_request_fails_alone(tiny_model, preparer):
    ok = [prepare(preparer, tiny_model, f"ok{i}", TEXTS[i], SEEDED) for i in range(2)]
    bad = prepare(preparer, tiny_model, "nan", TEXTS[3], SEEDED)
    bad.sampling = dataclasses.replace(bad.sampling, temperature=float("nan"))
    got = drive(overlapped(tiny_model), {0: [*ok, bad]})
    assert isinstance(got.finish["nan"], GenerationError) and got.frames["nan"] == []
    for r in ok:
        assert_same(solo(tiny_model, r), got, r.request_id)


async def test_the_engine_serves_the_reference_frames_with_overlapped_steps(tiny_model):
    async def frames(eng: TorchEngine, i: int, text: str) -> torch.Tensor:
        request = SynthesisRequest(f"r{i}", text, None, SamplingParams(temperature=1.0, seed=i))
        return torch.cat([c.codes async for c in eng.generate(request)], dim=1)

    got = {}
    for name, cfg in (("reference", TorchEngineConfig(max_batch=4, path="reference")),
                      ("overlap", TorchEngineConfig(max_batch=4, path="fast", max_positions=512, overlap=True))):
        eng = TorchEngine(tiny_model, cfg)
        try:
            assert name == "reference" or eng._generator.overlap
            got[name] = [await frames(eng, i, t) for i, t in enumerate(TEXTS)]  # one at a time ...
            got[name] += await asyncio.gather(*[frames(eng, 10 + i, t) for i, t in enumerate(TEXTS)])  # ... and together
        finally:
            await eng.aclose()
    for ref, lap in zip(got["reference"], got["overlap"]):
        assert ref.shape == (32, 24) and torch.equal(ref, lap)


async def test_the_engine_options_reach_the_fast_path(tiny_gepard_dir, monkeypatch):
    """GEPARD_TORCH_COMPILE / GEPARD_TORCH_OVERLAP arrive as EngineOptions (api.app.open_runtime).
    (eager backend: the same traced parts without Inductor's C++, which test_torch_fast_compiled runs.)"""
    from engine.backends import fast_step
    from engine.factory import EngineOptions, create_engine

    monkeypatch.setattr(fast_step, "COMPILE_BACKEND", "eager")
    eng = await create_engine(EngineOptions(model=tiny_gepard_dir, backend="torch", device="cpu", max_batch=2,
                                            torch_path="fast", torch_compile=True, torch_overlap=True,
                                            torch_prefill_batch=3, torch_stream_priority="normal"))
    try:
        assert eng._generator.overlap and eng._generator.device_step.compiled
        assert eng._generator.prefill_batch == 3  # GEPARD_TORCH_PREFILL_BATCH
        assert eng._generator.stream_priority == "normal"  # GEPARD_TORCH_STREAM_PRIORITY (CPU: no stream)
        chunks = [c async for c in eng.generate(SynthesisRequest("r", TEXTS[0], None, SamplingParams(temperature=0.0)))]
        assert chunks[-1].finish_reason is FinishReason.STOP
    finally:
        await eng.aclose()


async def test_unset_the_prefill_batch_follows_the_device(tiny_gepard_dir):
    """GEPARD_TORCH_PREFILL_BATCH unset: 64 on CUDA, where a prefill is bound by its launches (a
    burst of 256 streams starts in 4 steps, not 32), 8 on CPU, where its arithmetic would delay
    every running stream's next frame."""
    from engine.backends.torch_fast import default_prefill_batch
    from engine.factory import EngineOptions, create_engine

    assert default_prefill_batch(torch.device("cuda")) == 64 and default_prefill_batch(torch.device("cpu")) == 8
    eng = await create_engine(EngineOptions(model=tiny_gepard_dir, backend="torch", device="cpu", max_batch=2,
                                            torch_path="fast"))
    try:
        assert eng._generator.prefill_batch == 8
    finally:
        await eng.aclose()

