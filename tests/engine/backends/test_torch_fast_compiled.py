"""The fast path with its decode step and prefill through torch.compile (``compiled``), on CPU.

TorchInductor compiles the same code to C++ here (Triton on a GPU). The compiled step and prefill
(each in three parts: inputs, each layer, sampling) must still give every request the reference
loop's frames, and one compiled layer must serve every layer, batch bucket, span and prompt length: a
graph per shape would mean minutes of compiling at start on a GPU, a compile in the middle of
serving, and a recompile limit hit in service.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from engine.backends.fast_step import StepParts
from engine.backends.torch_backend import TorchEngine, TorchEngineConfig
from engine.backends.torch_fast import FastGenerator
from engine.backends.torch_generator import BatchGenerator
from engine.requests import FinishReason, SamplingParams, SynthesisRequest
from tests.engine.backends.test_torch_fast import KNOBS, TEXTS, assert_same, drive, prepare, preparer  # noqa: F401


def compiled_graphs() -> int:
    return counters["stats"]["unique_graphs"]


def test_compiled_layers_give_the_reference_frames_with_one_graph_for_every_layer_and_shape(tiny_model, preparer):
    torch._dynamo.reset()  # count this test's compiles only
    reqs = [prepare(preparer, tiny_model, f"{name}{i}", TEXTS[i % 4], sp) for i, (name, sp) in enumerate(KNOBS.items())]
    joins, aborts = {0: reqs[:1], 2: reqs[1:3], 5: reqs[3:]}, {9: [reqs[1].request_id]}
    before = compiled_graphs()
    gen = FastGenerator(tiny_model, max_batch=8, max_positions=512, compiled=True)
    shapes: set[tuple[int, int]] = set()
    got = drive(gen, joins, aborts, on_step=lambda step, g: shapes.add(g.last_shape))
    ref = drive(BatchGenerator(tiny_model, max_batch=8), joins, aborts)
    for req in reqs:
        assert_same(ref, got, req.request_id)
    assert got.finish[reqs[1].request_id] is FinishReason.ABORT
    # the run went through several buckets and spans (1 row alone, then 4 and 8 with CFG branches)
    assert {b for b, _ in shapes} >= {1, 4, 8} and len({s for _, s in shapes}) >= 2, shapes
    # ... and the three parts (inputs, a layer, sampling) of the decode step and of the prefill compiled:
    # each a graph for a size of 1 and one for the rest (torch.compile always specialises size 1), not
    # one per layer, bucket, span or prompt length
    made = compiled_graphs() - before
    assert 6 <= made <= 12, made
    step = gen.device_step  # the compiled parts ran, not a fallback
    assert step.compiled and step.decode_parts != StepParts(step.start_decode, step.decode_layer, step.finish_decode)
    assert step.prefill_parts != StepParts(step.start_prefill, step.prefill_layer, step.finish_prefill)


def test_compile_all_compiles_every_shape_class_up_front_and_changes_no_state(tiny_model, preparer):
    gen = FastGenerator(tiny_model, max_batch=4, max_positions=1024, compiled=True)
    # decode: batch 1 and the largest bucket, at the smallest and the whole span; prefill: 1 prompt and several
    assert gen.compile_all() == 6
    assert gen.cache.lengths.count_nonzero() == 0 and gen.device_step.state.frames.count_nonzero() == 0
    assert gen.allocator.used == 0
    before = compiled_graphs()
    # prompts of many lengths, alone (one prompt), two at once and with CFG (several): nothing left to
    # compile while serving
    reqs = [prepare(preparer, tiny_model, f"after{i}", text, sp) for i, (text, sp) in
            enumerate(zip(TEXTS + ["A much longer sentence than the others, to make the longest prompt."],
                          [KNOBS["seeded"], KNOBS["greedy"], KNOBS["cfg_onset"], KNOBS["topk_penalty"], KNOBS["greedy"]]))]
    joins = {0: reqs[:1], 1: reqs[1:3], 2: reqs[3:4], 4: reqs[4:]}
    assert len({r.prompt_embeds.shape[0] for r in reqs}) >= 4
    ref = drive(BatchGenerator(tiny_model, max_batch=4), joins)
    got = drive(gen, joins)
    for req in reqs:
        assert_same(ref, got, req.request_id)
    assert compiled_graphs() == before
    assert FastGenerator(tiny_model, max_batch=4, max_positions=256).compile_all() == 0  # not compiled: nothing to do


def test_compile_all_refuses_once_requests_run(tiny_model, preparer):
    gen = FastGenerator(tiny_model, max_batch=2, max_positions=256)
    gen.add(prepare(preparer, tiny_model, "running", TEXTS[0], KNOBS["greedy"]))
    assert gen.compile_all() == 0  # only pending: nothing has touched the cache yet
    gen.step()
    with pytest.raises(RuntimeError, match="before the first request"):
        gen.compile_all()


async def test_the_engine_compiles_at_start_and_serves_the_reference_frames(tiny_model, caplog):
    caplog.set_level("INFO", logger="engine.backends.torch_backend")
    engines = {}
    for name, cfg in (("reference", TorchEngineConfig(max_batch=4, path="reference")),
                      ("compiled", TorchEngineConfig(max_batch=4, path="fast", max_positions=512, compile=True))):
        eng = engines[name] = TorchEngine(tiny_model, cfg)
        assert name == "reference" or eng._generator.device_step.compiled

    async def frames(eng: TorchEngine, i: int, text: str) -> torch.Tensor:
        request = SynthesisRequest(f"r{i}", text, None, SamplingParams(temperature=1.0, seed=i))
        return torch.cat([c.codes async for c in eng.generate(request)], dim=1)

    try:
        got = {name: await asyncio.gather(*[frames(eng, i, t) for i, t in enumerate(TEXTS)]) for name, eng in engines.items()}
    finally:
        for eng in engines.values():
            await eng.aclose()
    for ref, comp in zip(got["reference"], got["compiled"]):
        assert ref.shape == (32, 24) and torch.equal(ref, comp)
    assert "compiled the decode step and the prefill (6 shapes)" in caplog.text


async def test_a_compile_that_fails_at_start_leaves_the_engine_serving_uncompiled(tiny_model, monkeypatch, caplog):
    """A host without a C++ compiler, or an Inductor/Triton failure, must not stop the server: the
    engine logs why and runs the layers uncompiled."""
    import engine.backends.fast_step as fast_step

    def broken(fn):
        def compiled(*args, **kwargs):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore detail")
        return compiled

    monkeypatch.setattr(fast_step, "compile_part", broken)
    caplog.set_level("INFO", logger="engine.backends.torch_backend")
    eng = TorchEngine(tiny_model, TorchEngineConfig(max_batch=2, path="fast", max_positions=512, compile=True))
    try:
        assert not eng._generator.device_step.compiled
        request = SynthesisRequest("r", TEXTS[0], None, SamplingParams(temperature=0.0))
        chunks = [c async for c in eng.generate(request)]
        assert chunks[-1].finish_reason is FinishReason.STOP and sum(c.codes.shape[1] for c in chunks) == 24
    finally:
        await eng.aclose()
    assert ("compiling the decode step and the prefill failed (RuntimeError: InvalidCxxCompiler: No working C++ "
            "compiler found); running them uncompiled") in caplog.text


def test_a_lost_device_during_the_compile_stops_the_engine_instead_of_falling_back(tiny_model, monkeypatch):
    """Falling back is for compile failures; a dead accelerator would fail the uncompiled step too."""
    import engine.backends.fast_step as fast_step

    lost = RuntimeError("CUDA error: an illegal memory access was encountered")

    def broken(fn):
        def compiled(*args, **kwargs):
            raise lost
        return compiled

    monkeypatch.setattr(fast_step, "compile_part", broken)
    with pytest.raises(RuntimeError) as info:
        TorchEngine(tiny_model, TorchEngineConfig(max_batch=2, path="fast", max_positions=512, compile=True))
    assert info.value is lost
