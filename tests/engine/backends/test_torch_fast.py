"""The torch fast path (engine.backends.torch_fast) against the reference loop, on CPU.

The fast path must give every request exactly the reference loop's frames (the same codes, the
same finish), whatever runs beside it: greedy and seeded, alone and batched, with CFG, the
repetition penalty and top-k, and with requests joining and leaving a running batch. Most tests
drive the two generators step by step (deterministic, no threads); a few go through TorchEngine.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from engine.backends.static_cache import SlotAllocator, pick_bucket, power_buckets
from engine.backends.torch_backend import TorchEngine, TorchEngineConfig
from engine.backends.torch_fast import FastGenerator, choose_path
from engine.backends.torch_generator import BatchGenerator, PreparedRequest
from engine.errors import EngineDeadError, GenerationError, InvalidRequestError
from engine.model.gepard import GepardModel
from engine.requests import CfgUncondMode, FinishReason, SamplingParams, SynthesisRequest

TEXTS = ["Hello there.", "The quick brown fox jumps over the lazy dog.", "One.", "Hola, ¿cómo estás?"]
GREEDY = SamplingParams(temperature=0.0)
SEEDED = SamplingParams(temperature=1.0, seed=1234)
KNOBS = {
    "greedy": GREEDY,
    "seeded": SEEDED,
    "topk_penalty": SamplingParams(temperature=0.9, seed=77, top_k=3, repetition_penalty=2.5, repetition_window=5),
    "cfg_onset": SamplingParams(temperature=1.0, seed=5, cfg_scale=2.5, cfg_frames=6),
    "cfg_greedy": SamplingParams(temperature=0.0, cfg_scale=3.0),
    "cfg_audio_only": SamplingParams(temperature=0.7, seed=9, cfg_scale=2.0, cfg_frames=3,
                                     cfg_uncond_mode=CfgUncondMode.AUDIO_ONLY),
}


@pytest.fixture(scope="module")
def never_stop_model(tmp_path_factory):
    from engine.tiny import write_tiny_checkpoint

    return GepardModel.from_pretrained(write_tiny_checkpoint(tmp_path_factory.mktemp("fast-never-stop"), stop_after=0,
                                                             with_codec=False))


@pytest.fixture(scope="module")
def preparer():
    """Reference engines (idle) whose ``prepare`` builds PreparedRequests as the engine does."""
    engines: dict[int, TorchEngine] = {}
    yield engines
    for eng in engines.values():
        asyncio.run(eng.aclose())


def prepare(preparer: dict, model: GepardModel, rid: str, text: str, sp: SamplingParams) -> PreparedRequest:
    if id(model) not in preparer:
        preparer[id(model)] = TorchEngine(model, TorchEngineConfig(max_batch=8, path="reference"))
    return preparer[id(model)].prepare(SynthesisRequest(rid, text, None, sp))


@dataclasses.dataclass
class Run:
    frames: dict[str, list[torch.Tensor]]
    finish: dict[str, object]
    steps: int

    def codes(self, rid: str) -> torch.Tensor:
        return torch.stack(self.frames[rid], dim=1) if self.frames[rid] else torch.zeros(32, 0, dtype=torch.long)


def drive(gen, joins: dict[int, list[PreparedRequest]], aborts: dict[int, list[str]] | None = None,
          on_step=None) -> Run:
    """Step ``gen`` until idle, adding ``joins[s]`` and aborting ``aborts[s]`` before step s."""
    aborts = aborts or {}
    run = Run({r.request_id: [] for rs in joins.values() for r in rs}, {}, 0)
    last = max([*joins, *aborts])
    while run.steps <= last or gen.has_work():
        for req in joins.get(run.steps, []):
            gen.add(req)
        for rid in aborts.get(run.steps, []):
            gen.abort(rid)
        for out in gen.step():
            if out.codes is not None:
                run.frames[out.request_id].append(out.codes)
            if out.finish_reason is not None or out.error is not None:
                assert out.request_id not in run.finish, f"{out.request_id} finished twice"
                run.finish[out.request_id] = out.error or out.finish_reason
        if on_step is not None:
            on_step(run.steps, gen)
        run.steps += 1
        assert run.steps < 500
    return run


def fast(model, **kw) -> FastGenerator:
    kw.setdefault("max_batch", 8)
    kw.setdefault("max_positions", 512)
    return FastGenerator(model, **kw)


def solo(model, req: PreparedRequest) -> Run:
    return drive(BatchGenerator(model, max_batch=8), {0: [req]})


def assert_same(ref: Run, got: Run, rid: str) -> None:
    assert got.finish[rid] == ref.finish[rid], rid
    assert torch.equal(got.codes(rid), ref.codes(rid)), f"{rid}: frames differ from the reference loop"


# -- frame identity ---------------------------------------------------------------------------------

def test_each_request_alone_equals_the_reference(tiny_model, preparer):
    for i, (name, sp) in enumerate(KNOBS.items()):
        req = prepare(preparer, tiny_model, name, TEXTS[i % 2], sp)
        ref = solo(tiny_model, req)
        got = drive(fast(tiny_model), {0: [req]})
        assert_same(ref, got, req.request_id)
        assert ref.finish[req.request_id] is FinishReason.STOP and ref.codes(req.request_id).shape == (32, 24)
    # the knobs matter, so equality above is not vacuous
    plain = solo(tiny_model, prepare(preparer, tiny_model, "p", TEXTS[1], GREEDY)).codes("p")
    for name in ("seeded", "topk_penalty", "cfg_greedy"):
        other = drive(fast(tiny_model), {0: [prepare(preparer, tiny_model, "o", TEXTS[1], KNOBS[name])]}).codes("o")
        assert not torch.equal(plain[2:], other[2:]), name


def test_a_batch_equals_the_reference_batch_and_each_alone(tiny_model, preparer):
    reqs = [prepare(preparer, tiny_model, f"{name}{i}", TEXTS[i % 4], sp)
            for i, (name, sp) in enumerate(KNOBS.items())]
    ref = drive(BatchGenerator(tiny_model, max_batch=8), {0: reqs})
    got = drive(fast(tiny_model), {0: reqs})
    for req in reqs:
        assert_same(ref, got, req.request_id)
        assert_same(solo(tiny_model, req), got, req.request_id)


def test_a_prefill_attends_with_no_mask_tensor_so_a_fused_kernel_can_run(tiny_model, preparer, monkeypatch):
    """Prompts of different lengths, right-padded into one prefill: plain causal attention
    (``is_causal``) hides each row's padding from its real tokens, and with no mask tensor SDPA may
    pick a fused kernel on a GPU (an explicit [R, 1, T, T] mask forces the math path there). The
    frames are the reference loop's (checked above for batches); here, the calls themselves."""
    import engine.backends.fast_step as fast_step

    calls, sdpa = [], F.scaled_dot_product_attention

    def recording(q, k, v, *args, **kwargs):
        calls.append((q.shape[-2], kwargs.get("attn_mask"), kwargs.get("is_causal", False)))
        return sdpa(q, k, v, *args, **kwargs)

    monkeypatch.setattr(fast_step.F, "scaled_dot_product_attention", recording)
    gen = fast(tiny_model)
    for i, text in enumerate(TEXTS):
        gen.add(prepare(preparer, tiny_model, f"mask{i}", text, dataclasses.replace(GREEDY, max_frames=3)))
    gen.step()  # the prefill of all four (nothing is decoding yet)
    layers = tiny_model.config.backbone.num_hidden_layers
    assert len(calls) == layers and all(mask is None and causal for _, mask, causal in calls), calls[:2]
    assert all(tokens > 1 for tokens, _, _ in calls)  # whole prompts, right-padded to the longest


def mid_batch_schedule(preparer, m) -> tuple[list[PreparedRequest], dict[int, list[PreparedRequest]]]:
    """Requests a..e joining a running batch at steps 0, 3, 9 and 14 (b is cancelled at step 20 by
    the tests): c's CFG row leaves at frame 8, d leaves early at its frame cap of 6."""
    sp = lambda seed, **kw: SamplingParams(temperature=1.0, seed=seed, **kw)  # noqa: E731
    a = prepare(preparer, m, "a", TEXTS[1], sp(1, max_frames=40))
    b = prepare(preparer, m, "b", TEXTS[0], sp(2, max_frames=40))
    c = prepare(preparer, m, "c", TEXTS[3], sp(3, max_frames=30, cfg_scale=2.0, cfg_frames=8))
    d = prepare(preparer, m, "d", TEXTS[2], sp(4, max_frames=6))
    e = prepare(preparer, m, "e", TEXTS[1], SamplingParams(temperature=0.0, max_frames=25, repetition_penalty=1.5))
    return [a, b, c, d, e], {0: [a, b], 3: [c], 9: [d], 14: [e]}


def test_joins_and_leaves_mid_batch_do_not_change_the_others(never_stop_model, preparer):
    m = never_stop_model
    (a, b, c, d, e), joins = mid_batch_schedule(preparer, m)
    shapes = []
    got = drive(fast(m), joins, aborts={20: ["b"]}, on_step=lambda s, g: shapes.append(g.last_shape))
    for req in (a, c, d, e):
        assert_same(solo(m, req), got, req.request_id)
    # b was aborted before step 20: its frames so far are the reference's first frames
    assert got.finish["b"] is FinishReason.ABORT
    b_codes = got.codes("b")
    assert b_codes.shape[1] == 20 and torch.equal(b_codes, solo(m, b).codes("b")[:, :20])
    # the same schedule on the reference loop ends every request identically
    ref = drive(BatchGenerator(m, max_batch=8), joins, aborts={20: ["b"]})
    for rid in "abcde":
        assert_same(ref, got, rid)
    # the batch really changed shape on the way (rows: 2, 4 with c's CFG row, back down...)
    assert {s[0] for s in shapes if s[0]} >= {2, 4}


# -- buckets, slots, capacity -----------------------------------------------------------------------

def test_fused_projections_share_the_models_weights_and_change_no_output(tiny_gepard_dir, preparer):
    from engine.backends.fast_step import LayerWeights

    model = GepardModel.from_pretrained(tiny_gepard_dir)  # a fresh load: nothing fused yet
    req = prepare(preparer, model, "r", TEXTS[1], SEEDED)
    before_run = solo(model, req)
    layer = model.backbone.layers[0]
    attn, mlp = layer.self_attn, layer.mlp
    linears = (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj)
    x = torch.randn(3, 5, model.config.hidden_size)
    before = [lin(x) for lin in linears]
    fused = LayerWeights.fuse(layer)
    # one matrix per input, each module's weight a row block of it (nothing held twice) ...
    assert fused.qkv.shape[0] == sum(lin.weight.shape[0] for lin in linears[:3])
    assert attn.q_proj.weight.data_ptr() == fused.qkv.data_ptr()
    assert attn.v_proj.weight.data_ptr() == fused.qkv[-attn.v_proj.weight.shape[0]:].data_ptr()
    assert mlp.up_proj.weight.data_ptr() == fused.gate_up[mlp.gate_proj.weight.shape[0]:].data_ptr()
    # ... giving the same products, fused or not, and the model the same frames
    assert all(torch.equal(b, lin(x)) for b, lin in zip(before, linears))
    assert torch.equal(F.linear(x, fused.qkv), torch.cat(before[:3], -1))
    assert torch.equal(F.linear(x, fused.gate_up), torch.cat(before[3:], -1))
    FastGenerator(model, max_batch=2, max_positions=512)  # fuses every layer
    after_run = solo(model, req)
    assert_same(before_run, after_run, "r")
    # a second fast path on the same model reuses the fused matrices
    again = LayerWeights.fuse(layer)
    assert (again.qkv.data_ptr(), again.gate_up.data_ptr()) == (fused.qkv.data_ptr(), fused.gate_up.data_ptr())


def test_buckets():
    assert power_buckets(64) == (1, 2, 4, 8, 16, 32, 64)
    assert power_buckets(48) == (1, 2, 4, 8, 16, 32, 48)
    assert power_buckets(1) == (1,)
    assert power_buckets(4096, smallest=128) == (128, 256, 512, 1024, 2048, 4096)
    assert power_buckets(300, smallest=128) == (128, 256, 300)
    assert [pick_bucket((1, 2, 4, 8), n) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    with pytest.raises(ValueError, match="exceeds the largest bucket 8"):
        pick_bucket((1, 2, 4, 8), 9)


def test_the_step_shape_follows_the_rows_and_the_longest_request(tiny_model, preparer):
    gen = fast(tiny_model, max_batch=8, max_positions=512)
    reqs = [prepare(preparer, tiny_model, f"r{i}", TEXTS[i], GREEDY) for i in range(3)]
    cfg = prepare(preparer, tiny_model, "cfg", TEXTS[0], KNOBS["cfg_greedy"])
    for r in reqs:
        gen.add(r)
    gen.step()  # prefill only
    assert gen.last_shape == (0, 0)
    gen.step()
    longest = max(st.length for st in gen.active.values())
    assert gen.last_shape == (4, pick_bucket(gen.span_buckets, longest))  # 3 rows -> bucket 4
    gen.add(cfg)
    gen.step()
    gen.step()  # 3 + cfg's two rows = 5 rows -> bucket 8
    assert gen.last_shape[0] == 8
    assert gen.span_buckets == (128, 256, 512)


def test_slot_allocator_hands_out_the_lowest_free_slot():
    alloc = SlotAllocator(3)
    assert [alloc.take(), alloc.take(), alloc.take()] == [0, 1, 2] and alloc.free == 0
    alloc.give_back(1)
    alloc.give_back(0)
    assert alloc.take() == 0 and alloc.take() == 1
    with pytest.raises(ValueError, match="slot 3 is not in use"):
        alloc.give_back(3)
    alloc.give_back(2)
    with pytest.raises(ValueError, match="slot 2 is not in use"):
        alloc.give_back(2)
    empty = SlotAllocator(1)
    empty.take()
    with pytest.raises(RuntimeError, match="no free KV cache slot"):
        empty.take()


def compaction_schedule(preparer, m) -> tuple[list[PreparedRequest], dict[int, list[PreparedRequest]]]:
    """a, b, c (slots 0-2) leave after 5 frames while d (CFG: slots 3 and 4) and e (slot 5) run on;
    f joins later; d's CFG branch ends at frame 25, d at 30, e at 40."""
    sp = lambda seed, **kw: SamplingParams(temperature=1.0, seed=seed, **kw)  # noqa: E731
    a, b, c = (prepare(preparer, m, rid, TEXTS[i], sp(10 + i, max_frames=5)) for i, rid in enumerate("abc"))
    d = prepare(preparer, m, "d", TEXTS[3], sp(13, max_frames=30, cfg_scale=2.0, cfg_frames=25))
    e = prepare(preparer, m, "e", TEXTS[1], sp(14, max_frames=40, top_k=4, repetition_penalty=1.5))
    f = prepare(preparer, m, "f", TEXTS[2], sp(15, max_frames=10))
    return [a, b, c, d, e, f], {0: [a, b, c, d, e], 12: [f]}


@pytest.mark.parametrize("overlap", [False, True], ids=["plain", "overlap"])
def test_requests_move_down_to_free_slots_so_the_step_shrinks_with_the_batch(never_stop_model, preparer, overlap):
    m = never_stop_model
    reqs, joins = compaction_schedule(preparer, m)
    gen = fast(m, overlap=overlap)
    launches: list[tuple[int, int]] = []  # (bucket, slots in use) of every decode step
    launch = gen._launch_decode

    def recording_launch(rows):
        out = launch(rows)
        launches.append((gen.last_shape[0], gen.allocator.used))
        return out

    gen._launch_decode = recording_launch
    slots: dict[str, list[tuple[int, int]]] = {}

    def watch(step, g):
        for rid, st in g.active.items():
            seen = slots.setdefault(rid, [])
            if not seen or seen[-1] != (st.slot, st.uncond_slot):
                seen.append((st.slot, st.uncond_slot))

    got = drive(gen, joins, on_step=watch)
    for req in reqs:  # moving a request changes none of its frames, nor its neighbours'
        assert_same(solo(m, req), got, req.request_id)
    # every decode step ran at the smallest bucket holding the slots in use, on the way down too
    assert all(bucket == pick_bucket(gen.batch_buckets, used) for bucket, used in launches), launches
    assert [b for i, (b, _) in enumerate(launches) if i == 0 or launches[i - 1][0] != b] == [8, 4, 2, 1]
    # d's CFG slot and e moved below bucket 4 when a, b, c left; d itself in the step its CFG
    # branch ended (before that step ran); f took the lowest free slot; e moved to 0 when alone
    assert slots["d"] == [(3, 4), (3, 0), (0, -1)]
    assert slots["e"] == [(5, -1), (1, -1), (0, -1)]
    assert slots["f"] == [(2, -1)]
    assert gen.slot_moves == 4


def test_moving_a_slot_copies_its_cache_and_state_and_leaves_the_rest(tiny_model):
    gen = fast(tiny_model, max_batch=4, max_positions=256)
    cache, state = gen.cache, gen.device_step.state
    for t in (*cache.keys, *cache.values):
        t.normal_()
    for t in state.per_slot():
        t.copy_(torch.randint(0, 5, t.shape, dtype=t.dtype) if not t.is_floating_point() else torch.rand(t.shape))
    cache.lengths.copy_(torch.tensor([7, 9, 11, 13, 0]))
    keys, state_before = cache.keys[0].clone(), [t.clone() for t in state.per_slot()]
    gen.device_step.move_slots([3, 2], [0, 1], positions=13)
    assert cache.lengths.tolist() == [13, 11, 11, 13, 0]
    assert torch.equal(cache.keys[0][0, :, :13], keys[3, :, :13]) and torch.equal(cache.keys[0][1, :, :13], keys[2, :, :13])
    assert torch.equal(cache.keys[0][0, :, 13:], keys[0, :, 13:])  # past the positions asked: untouched
    assert torch.equal(cache.keys[0][2:], keys[2:])  # the sources and the scratch slot: untouched
    for t, before in zip(state.per_slot(), state_before):
        assert torch.equal(t[0], before[3]) and torch.equal(t[1], before[2]) and torch.equal(t[2:], before[2:])


def test_a_freed_slot_is_reused_and_keeps_nothing_of_its_last_owner(never_stop_model, preparer):
    m = never_stop_model
    long = prepare(preparer, m, "long", TEXTS[1], SamplingParams(temperature=1.0, seed=3, max_frames=30))
    short = prepare(preparer, m, "short", TEXTS[3], SamplingParams(temperature=1.0, seed=4, max_frames=5))
    late = prepare(preparer, m, "late", TEXTS[2], SamplingParams(temperature=1.0, seed=5, max_frames=12))
    slots: dict[str, set[int]] = {}

    def watch(step, gen):
        for rid, st in gen.active.items():
            slots.setdefault(rid, set()).add(st.slot)

    got = drive(fast(m, max_batch=2), {0: [long, short], 8: [late]}, on_step=watch)
    assert slots == {"long": {0}, "short": {1}, "late": {1}}  # late got short's slot once short left
    for req in (long, short, late):
        assert_same(solo(m, req), got, req.request_id)


def test_more_requests_than_slots_wait_and_all_complete(tiny_model, preparer):
    reqs = [prepare(preparer, tiny_model, f"q{i}", TEXTS[i % 4], SamplingParams(temperature=1.0, seed=i)) for i in range(5)]
    cfg = prepare(preparer, tiny_model, "cfg", TEXTS[0], KNOBS["cfg_onset"])  # needs two slots
    waiting = []
    got = drive(fast(tiny_model, max_batch=2), {0: [*reqs, cfg]}, on_step=lambda s, g: waiting.append(len(g.pending)))
    assert max(waiting) == 4 and waiting[-1] == 0
    for req in (*reqs, cfg):
        assert got.finish[req.request_id] is FinishReason.STOP
        assert_same(solo(tiny_model, req), got, req.request_id)


async def test_a_request_too_long_for_the_cache_is_refused_before_any_frame(tiny_model):
    eng = TorchEngine(tiny_model, TorchEngineConfig(max_batch=2, path="fast", max_positions=64))
    try:
        stream = eng.generate(SynthesisRequest("long", TEXTS[1], None, SamplingParams(temperature=0.0, max_frames=35)))
        with pytest.raises(InvalidRequestError, match=r"needs \d+ KV cache positions \(prompt \d+ \+ max_frames 35\) "
                                                      r"but the torch fast path's cache holds 64"):
            await stream.__anext__()
        assert eng.num_requests == 0
        chunks = [c async for c in eng.generate(SynthesisRequest("fits", TEXTS[2], None, SamplingParams(temperature=0.0, max_frames=3)))]
        assert sum(c.num_frames for c in chunks) == 3 and chunks[-1].finish_reason is FinishReason.LENGTH
    finally:
        await eng.aclose()


async def drain(stream) -> list:
    return [c async for c in stream]


CFG_SLOTS = (r"classifier-free guidance \(cfg_scale 2.0\) needs two KV cache slots but this engine's torch fast "
             r"path has 1; raise its concurrency \(max_batch / kv_slots\) to 2 or more, or drop cfg_scale")


async def test_a_cfg_request_with_one_slot_is_refused_before_it_can_block_the_queue(tiny_model):
    """CFG takes two slots: with one it used to wait at the head of the queue forever, the worker
    spinning and every later request stuck behind it."""
    eng = TorchEngine(tiny_model, TorchEngineConfig(max_batch=1, path="fast", max_positions=512))
    try:
        cfg = SamplingParams(temperature=0.0, cfg_scale=2.0)
        with pytest.raises(InvalidRequestError, match=CFG_SLOTS):
            await asyncio.wait_for(drain(eng.generate(SynthesisRequest("cfg", TEXTS[0], None, cfg))), 10)
        assert eng.num_requests == 0
        chunks = await asyncio.wait_for(drain(eng.generate(SynthesisRequest("plain", TEXTS[0], None, GREEDY))), 30)
        assert chunks[-1].finish_reason is FinishReason.STOP
    finally:
        await eng.aclose()


def test_a_cfg_request_handed_straight_to_a_one_slot_generator_fails_alone(tiny_model, preparer):
    cfg = prepare(preparer, tiny_model, "cfg", TEXTS[0], KNOBS["cfg_greedy"])
    ok = prepare(preparer, tiny_model, "ok", TEXTS[1], GREEDY)
    got = drive(fast(tiny_model, max_batch=1), {0: [cfg, ok]})  # used to never finish (drive's step limit)
    assert isinstance(got.finish["cfg"], GenerationError) and "needs two KV cache slots" in str(got.finish["cfg"])
    assert got.frames["cfg"] == []
    assert_same(solo(tiny_model, ok), got, "ok")


async def test_a_worker_whose_waiting_requests_cannot_start_sleeps_instead_of_spinning(tiny_model, monkeypatch):
    eng = TorchEngine(tiny_model, TorchEngineConfig(max_batch=2, path="fast", max_positions=512))
    gen, steps = eng._generator, []
    step = gen.step
    monkeypatch.setattr(gen, "_admit", lambda outputs: [])  # as if no slot ever freed up
    monkeypatch.setattr(gen, "step", lambda: steps.append(1) or step())
    try:
        task = asyncio.ensure_future(drain(eng.generate(SynthesisRequest("stuck", TEXTS[0], None, GREEDY))))
        await asyncio.sleep(1.0)
        assert 1 <= len(steps) <= 5, len(steps)  # a spinning worker steps tens of thousands of times a second
        task.cancel()  # an abort is a change: the worker wakes and drops the request
        for _ in range(100):
            if eng.num_requests == 0:
                break
            await asyncio.sleep(0.01)
        assert eng.num_requests == 0 and task.cancelled()
    finally:
        await eng.aclose()


def test_a_too_long_request_handed_straight_to_the_generator_fails_alone(tiny_model, preparer):
    ok = prepare(preparer, tiny_model, "ok", TEXTS[0], GREEDY)
    long = prepare(preparer, tiny_model, "long", TEXTS[1], SamplingParams(temperature=0.0, max_frames=200))
    got = drive(fast(tiny_model, max_positions=200), {0: [long, ok]})
    assert isinstance(got.finish["long"], GenerationError) and "KV cache positions" in str(got.finish["long"])
    assert got.frames["long"] == [] and got.finish["ok"] is FinishReason.STOP


def test_cancel_frees_the_slot_within_one_step(never_stop_model, preparer):
    m = never_stop_model
    gen = fast(m, max_batch=1)
    a = prepare(preparer, m, "a", TEXTS[1], SamplingParams(temperature=0.0, max_frames=400))
    b = prepare(preparer, m, "b", TEXTS[0], SamplingParams(temperature=0.0, max_frames=4))
    gen.add(a)
    for _ in range(5):
        gen.step()
    gen.add(b)
    gen.step()
    assert list(gen.active) == ["a"] and [p.request_id for p in gen.pending] == ["b"] and gen.kv_cache_usage == 1.0
    gen.abort("a")
    outs = gen.step()  # the abort frees a's slot, and b is prefilled into it in this very step
    assert [(o.request_id, o.finish_reason) for o in outs][0] == ("a", FinishReason.ABORT)
    assert any(o.request_id == "b" and o.codes is not None for o in outs)
    assert list(gen.active) == ["b"] and gen.active["b"].slot == 0 and not gen.pending


async def test_cancel_through_the_engine_and_its_stats(never_stop_model, tiny_model):
    from tests.engine.backends.test_stats import Recorder, check_after, run_many

    eng = TorchEngine(never_stop_model, TorchEngineConfig(max_batch=2, path="fast", max_positions=2200))
    try:
        assert isinstance(eng._generator, FastGenerator) and eng.path == "fast"
        stream = eng.generate(SynthesisRequest("long", TEXTS[1], None, SamplingParams(temperature=0.0, max_frames=2000)))
        await stream.__anext__()
        while eng.generated_frames("long") < 5:
            await asyncio.sleep(0.005)
        await stream.aclose()
        for _ in range(200):
            if eng.num_running == 0:
                break
            await asyncio.sleep(0.01)
        assert eng.num_running == 0 and eng.stats().kv_cache_usage == 0.0
    finally:
        await eng.aclose()
    eng = TorchEngine(tiny_model, TorchEngineConfig(max_batch=2, path="fast", max_positions=512))
    try:  # the step observer and the snapshot, as the reference loop reports them
        rec = Recorder(eng)
        eng.set_step_observer(rec)
        await run_many(eng, "s")
        check_after(rec, eng)
        assert max(s.kv_cache_usage for s in rec.snapshots) == 1.0  # 2 of 2 slots
    finally:
        await eng.aclose()


# -- selection and failures -------------------------------------------------------------------------

def test_path_selection(tiny_model):
    assert choose_path("auto", torch.device("cpu")) == "reference"
    assert choose_path("auto", torch.device("cuda")) == "fast"
    assert choose_path("fast", torch.device("cpu")) == "fast"
    assert choose_path("reference", torch.device("cuda")) == "reference"
    with pytest.raises(ValueError, match="unknown torch path 'quick'; choose one of auto, reference, fast"):
        choose_path("quick", torch.device("cpu"))


def test_a_poisoned_request_fails_alone(tiny_model, preparer):
    ok = [prepare(preparer, tiny_model, f"ok{i}", TEXTS[i], GREEDY) for i in range(2)]
    bad = prepare(preparer, tiny_model, "nan", TEXTS[3], SEEDED)
    bad.sampling = dataclasses.replace(bad.sampling, temperature=float("nan"))
    huge = prepare(preparer, tiny_model, "huge", TEXTS[2], SEEDED)
    huge.sampling = dataclasses.replace(huge.sampling, top_k=2**63)
    got = drive(fast(tiny_model), {0: [*ok, bad], 2: [huge]})
    assert "sampled code -1 on channel 0 outside [0, 8) at frame 0" in str(got.finish["nan"])
    assert "generation failed at prefill" in str(got.finish["huge"])
    for req in ok:
        assert_same(solo(tiny_model, req), got, req.request_id)


@pytest.mark.parametrize("overlap", [False, True], ids=["serial", "overlapped"])
def test_a_failed_decode_step_fails_its_batch_and_then_the_engine_goes_on(tiny_model, preparer, monkeypatch, overlap):
    gen = fast(tiny_model, overlap=overlap)  # overlapped: the step in flight is dropped with its batch
    req = lambda rid: prepare(preparer, tiny_model, rid, TEXTS[1], SEEDED)  # noqa: E731
    decode, calls = gen.device_step.decode, []

    def failing(tables, span):
        calls.append(1)
        if len(calls) in (3, 4):
            raise RuntimeError("injected step fault")
        return decode(tables, span)

    monkeypatch.setattr(gen.device_step, "decode", failing)
    got = drive(gen, {0: [req("x"), req("y")]})
    assert all("the batched decode step failed (RuntimeError: injected step fault)" in str(got.finish[r]) for r in "xy")
    assert gen.kv_cache_usage == 0.0 and gen._inflight is None
    got = drive(gen, {0: [req("z")]})  # its first decode step fails too (2 in a row: still alive)
    assert isinstance(got.finish["z"], GenerationError)
    after = drive(gen, {0: [req("w")]})
    assert_same(solo(tiny_model, req("w")), after, "w")  # a cleared cache gives the same frames
    monkeypatch.setattr(gen.device_step, "decode", lambda tables, span: (_ for _ in ()).throw(RuntimeError("stuck")))
    with pytest.raises(EngineDeadError, match="3 batched decode steps failed in a row"):
        for name in ("d1", "d2", "d3"):
            drive(gen, {0: [req(name)]})


# -- CUDA only: the graphed step equals the eager one (run by a GPU session) ---------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_cuda_graphs_replay_the_eager_step(tiny_gepard_dir):
    model = GepardModel.from_pretrained(tiny_gepard_dir, device="cuda", dtype=torch.float32)
    eng = TorchEngine(model, TorchEngineConfig(max_batch=8, path="reference"))
    try:
        reqs = [eng.prepare(SynthesisRequest(f"{n}", TEXTS[i % 4], None, sp)) for i, (n, sp) in enumerate(KNOBS.items())]
    finally:
        asyncio.run(eng.aclose())
    eager = drive(FastGenerator(model, max_batch=8, max_positions=512, cuda_graphs=False), {0: reqs[:3], 4: reqs[3:]})
    graphed_gen = FastGenerator(model, max_batch=8, max_positions=512)  # the longest text needs 402
    graphed = drive(graphed_gen, {0: reqs[:3], 4: reqs[3:]})
    assert graphed_gen.graphs is not None and graphed_gen.graphs.graphs
    ref = drive(BatchGenerator(model, max_batch=8), {0: reqs[:3], 4: reqs[3:]})
    for req in reqs:
        assert_same(eager, graphed, req.request_id)
        assert_same(ref, graphed, req.request_id)


def test_small_host_lists_reach_the_device_without_a_host_wait(monkeypatch):
    """to_device: plain on CPU; on CUDA (only its calls can be seen here) staged in pinned memory and
    copied non-blocking, since a pageable copy waits for the stream (an overlapped step in flight)."""
    from engine.backends.static_cache import to_device

    t = to_device([[1, 2], [3, 4]], torch.int64, torch.device("cpu"))
    assert t.dtype == torch.int64 and t.tolist() == [[1, 2], [3, 4]]
    calls = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: calls.append("pin") or self)
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **kw: calls.append(("to", a, kw)) or self)
    cuda = torch.device("cuda", 0)
    to_device([0.5], torch.float32, cuda)
    assert calls == ["pin", ("to", (cuda,), {"non_blocking": True})]
