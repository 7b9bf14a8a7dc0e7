"""The fast path's prefill as CUDA graphs (GEPARD_TORCH_PREFILL_GRAPHS), on CPU under recorded graphs.

tests/recorded_graph.py models capture and replay (a replay re-runs only the recorded kernels on
the memory they used, with every Python value as it was at capture), so a prefill that read
anything but its buffers (a prompt length, a slot number, a tensor made on the host each call)
would give the capture's frames here, not its own. Prompts are padded to power-of-two shapes whose
padding rows write the scratch slot only; the frames must still be the reference loop's, for every
sampling knob, with CFG, joins, leaves and aborts.
"""

from __future__ import annotations

import logging

import pytest
import torch

from engine.backends.static_cache import pick_bucket
from engine.backends.torch_backend import TorchEngine, TorchEngineConfig
from engine.backends.torch_fast import SMALLEST_PREFILL, FastGenerator
from engine.backends.torch_generator import BatchGenerator
from engine.requests import FinishReason, SamplingParams, SynthesisRequest
from tests.engine.backends.test_torch_fast import KNOBS, TEXTS, assert_same, drive, prepare, preparer  # noqa: F401 (a fixture)
from tests.recorded_graph import simulated_cuda_graphs


def spy_prefills(gen: FastGenerator, monkeypatch) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(shapes whose prefill Python ran, shapes replayed)."""
    ran, replayed = [], []
    prefill, replay = gen.device_step.prefill, gen.prefill_graphs.replay
    monkeypatch.setattr(gen.device_step, "prefill",
                        lambda e, lengths, slots, tables: (ran.append(tuple(e.shape[:2])), prefill(e, lengths, slots, tables))[1])
    monkeypatch.setattr(gen.prefill_graphs, "replay",
                        lambda key, step, tables: (replayed.append(key), replay(key, step, tables))[1])
    return ran, replayed


def test_replayed_prefills_give_the_reference_frames_with_joins_leaves_and_aborts(tiny_model, preparer, monkeypatch,
                                                                                    caplog):
    sim = simulated_cuda_graphs(monkeypatch)
    reqs = [prepare(preparer, tiny_model, name, TEXTS[i % 4], sp) for i, (name, sp) in enumerate(KNOBS.items())]
    gen = FastGenerator(tiny_model, max_batch=8, max_positions=512, prefill_graphs=True)
    assert gen.prefill_graphs is not None
    ran, replayed = spy_prefills(gen, monkeypatch)
    caplog.set_level(logging.INFO, logger="engine.backends.cuda_graphs")
    schedule = {0: reqs[:3], 4: reqs[3:5], 9: reqs[5:]}
    got = drive(gen, schedule, aborts={10: ["topk_penalty"]})
    ref = drive(BatchGenerator(tiny_model, max_batch=8), schedule, aborts={10: ["topk_penalty"]})
    for req in reqs:
        assert_same(ref, got, req.request_id)
    assert got.finish["topk_penalty"] is FinishReason.ABORT
    # every prefill was a replay; its Python ran only to capture each shape (a warm-up and the capture)
    shapes = set(gen.prefill_graphs.graphs)
    assert len(replayed) == len(schedule) and set(replayed) == shapes
    assert sorted(ran) == sorted(shape for shape in shapes for _ in range(2))
    # the shapes are the batches' (prompts, tokens) padded to buckets: CFG prompts take rows of their own
    for step, batch in schedule.items():
        rows = sum(1 + (r.uncond_embeds is not None) for r in batch)
        tokens = max(max(r.prompt_len, r.uncond_len or 0) for r in batch)
        assert (pick_bucket(gen.batch_buckets, rows), pick_bucket(gen.prefill_token_buckets, tokens)) in shapes
    assert min(t for _, t in shapes) >= SMALLEST_PREFILL
    assert all(g.ops for g in sim.graphs)
    assert "captured the prefill of " in caplog.text


def test_a_replayed_prefill_writes_no_slot_but_its_requests_and_the_scratch_slot(tiny_model, preparer, monkeypatch):
    simulated_cuda_graphs(monkeypatch)
    gen = FastGenerator(tiny_model, max_batch=4, max_positions=512, prefill_graphs=True)
    gen.add(prepare(preparer, tiny_model, "first", TEXTS[1], KNOBS["seeded"]))
    for _ in range(3):
        gen.step()
    cache = gen.cache
    n = int(cache.lengths[0])  # slot 0: "first", still running (this step's decode appends at n)
    kept = [t[0, :, :n].clone() for t in (*cache.keys, *cache.values)]
    assert kept[0].abs().sum() > 0
    # a lone prompt pads to a batch of 1; two pad to 2, three to 4 (one padding row)
    batch = [prepare(preparer, tiny_model, f"r{i}", TEXTS[i], KNOBS["greedy"]) for i in range(3)]
    for r in batch:
        gen.add(r)
    gen.step()
    assert (4, pick_bucket(gen.prefill_token_buckets, max(r.prompt_len for r in batch))) in gen.prefill_graphs.graphs
    assert all(torch.equal(t[0, :, :n], k) for t, k in zip((*cache.keys, *cache.values), kept))
    assert [int(n) for n in cache.lengths[1:4]] == [r.prompt_len for r in batch]


async def test_the_engine_serves_from_replayed_prefills(tiny_model, monkeypatch):
    sim = simulated_cuda_graphs(monkeypatch)
    sp = SamplingParams(temperature=0.8, seed=5, cfg_scale=2.0, cfg_frames=4)
    frames = {}
    for name, config in (("graphs", TorchEngineConfig(max_batch=4, path="auto", max_positions=512, prefill_graphs=True)),
                         ("reference", TorchEngineConfig(max_batch=4, path="reference"))):
        eng = TorchEngine(tiny_model, config)
        try:
            chunks = [c async for c in eng.generate(SynthesisRequest(f"r-{name}", TEXTS[2], None, sp))]
            frames[name] = torch.cat([c.codes for c in chunks], dim=-1)
        finally:
            await eng.aclose()
    assert torch.equal(frames["graphs"], frames["reference"])
    prefill = [g for g in sim.graphs if g.replays == 1]  # the one prefill; decode graphs replay per frame
    assert len(prefill) >= 1


def test_prefill_graphs_need_the_decode_graphs(tiny_model):
    """On CPU, or with CUDA graphs off, there is nothing to capture: the prefill runs eagerly."""
    assert FastGenerator(tiny_model, max_batch=2, max_positions=256, prefill_graphs=True).prefill_graphs is None


@pytest.mark.parametrize("positions, smallest", [(512, 16), (8, 8)])
def test_prompts_pad_to_power_of_two_tokens_up_to_the_cache(tiny_model, positions, smallest):
    gen = FastGenerator(tiny_model, max_batch=2, max_positions=positions)
    assert gen.prefill_token_buckets[0] == smallest and gen.prefill_token_buckets[-1] == positions


# -- every shape captured at start -------------------------------------------------------------------------

def test_the_prefill_shapes_are_those_admission_can_fill(tiny_model):
    """Prompts pad to 1, 2, 4, 8 rows, tokens to 16 ... 512. With 100 tokens a prefill, a batch of
    3 or more prompts (4 rows) holds at most 33 tokens each (pads to 64), of 5 or more (8 rows) at
    most 20 (pads to 32); one or two prompts (a single request, CFG's two) may be of any length."""
    gen = FastGenerator(tiny_model, max_batch=8, max_positions=512, prefill_tokens=100)
    every = [16, 32, 64, 128, 256, 512]
    assert gen.prefill_shapes() == [(1, t) for t in every] + [(2, t) for t in every] + [(4, 16), (4, 32), (4, 64),
                                                                                        (8, 16), (8, 32)]
    # no more prompts than one prefill can take: 2 requests of two prompts each
    assert FastGenerator(tiny_model, max_batch=8, max_positions=512, prefill_batch=2).prefill_shapes()[-1] == (4, 512)


@pytest.mark.parametrize("prefill_tokens", [8192, 100])
def test_every_prefill_shape_is_captured_at_start_and_none_later(tiny_model, preparer, monkeypatch, prefill_tokens):
    """capture_all captures the prefills too: no request's first frame waits for a capture, and
    none of the running streams' frames behind it."""
    sim = simulated_cuda_graphs(monkeypatch)
    gen = FastGenerator(tiny_model, max_batch=8, max_positions=512, prefill_graphs=True, prefill_tokens=prefill_tokens)
    gen.capture_all()
    assert set(gen.prefill_graphs.graphs) == set(gen.prefill_shapes())
    captured = len(sim.graphs)
    ran, replayed = spy_prefills(gen, monkeypatch)
    reqs = [prepare(preparer, tiny_model, name, TEXTS[i % 4], sp) for i, (name, sp) in enumerate(KNOBS.items())]
    schedule = {0: reqs[:3], 4: reqs[3:5], 9: reqs[5:]}
    got = drive(gen, schedule)
    ref = drive(BatchGenerator(tiny_model, max_batch=8), schedule)
    for req in reqs:
        assert_same(ref, got, req.request_id)
    assert len(sim.graphs) == captured and ran == []  # no capture since, no prefill run eagerly: replays only
    assert len(replayed) >= len(schedule)  # more with 100 tokens: admission splits the joins


def test_the_prefill_shapes_share_one_prompt_buffer(tiny_model, monkeypatch):
    simulated_cuda_graphs(monkeypatch)
    gen = FastGenerator(tiny_model, max_batch=8, max_positions=512, prefill_graphs=True)
    gen.capture_all()
    buffers = {inputs.embeds.untyped_storage().data_ptr() for inputs in gen._prefill_inputs.values()}
    largest = max(r * t for r, t in gen.prefill_shapes()) * tiny_model.config.hidden_size
    assert len(buffers) == 1 and gen._prefill_embeds.numel() == largest
