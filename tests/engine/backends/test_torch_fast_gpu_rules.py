"""The torch fast path's GPU-only behaviour, checked on CPU with two stand-ins (no GPU here).

1. The stand-in device (tests.stand_in_gpu, PyTorch's data-less ``meta`` device): the model
   loaded there in bf16, every decode step shape the fast path captures, its prefill and the
   torch codec run with every tensor on the device, one dtype per matrix product, sampling in
   float32, and nothing in a captured step that CUDA graph capture refuses or would freeze.
2. Recorded graphs (tests.recorded_graph, a CPU model of capture and replay): the fast path with
   graphs on replays recorded ops instead of running its Python, and still gives the reference
   loop's frames, through the generator, the engine and bench/torch_fast.py's ``--check``.

Each stand-in gets a negative control, so a check that could never fail would show.
"""

from __future__ import annotations

import pytest
import torch

from engine.backends.fast_step import DeviceStep, RowTables
from engine.backends.static_cache import StaticKVCache, power_buckets
from engine.backends.torch_backend import TorchEngine, TorchEngineConfig
from engine.backends.torch_fast import SMALLEST_SPAN, FastGenerator
from engine.backends.torch_generator import BatchGenerator
from engine.requests import FinishReason, SamplingParams, SynthesisRequest
from tests.engine.backends.test_torch_fast import KNOBS, TEXTS, assert_same, drive, prepare, preparer  # noqa: F401 (a fixture)
from tests.recorded_graph import record, simulated_cuda_graphs
from tests.stand_in_gpu import GPU, CaptureUnsafe, capture_check, dtype_check, full_size_gepard, load_gepard


@pytest.fixture(scope="module")
def gpu_model(tiny_gepard_dir):
    return load_gepard(tiny_gepard_dir, torch.bfloat16)


def gpu_step(model, slots: int = 8, positions: int = 512) -> DeviceStep:
    cache = StaticKVCache.allocate(model.config.backbone, slots, positions, model.device, model.dtype)
    return DeviceStep(model, cache, max_frames=positions)


# -- 1. the stand-in device ---------------------------------------------------------------------------

def test_the_model_loads_whole_onto_the_gpu_in_bf16(gpu_model):
    assert gpu_model.device == GPU and gpu_model.dtype == torch.bfloat16
    for name, p in gpu_model.named_parameters():
        assert p.device == GPU and p.dtype == torch.bfloat16, name
    for name, b in gpu_model.named_buffers():  # index grids, offsets, rotary frequencies: built at load
        assert b.device == GPU, name


def test_every_captured_step_shape_follows_the_capture_rules_in_bf16(gpu_model):
    step = gpu_step(gpu_model)
    spans = power_buckets(512, smallest=SMALLEST_SPAN)
    for bucket in power_buckets(8):
        tables = RowTables.allocate(bucket, step.cache.scratch, GPU)
        for span in spans:
            with capture_check() as ops:
                step.decode(tables, span)
            assert tables.out.device == GPU and tables.out.dtype == torch.int64 and tables.out.shape == (bucket, 34)
            # bf16 through the backbone; the 32 heads' sampling (top-k sort, Gumbel argmax) in float32
            sampling = [dtypes for name, dtypes in ops if name in ("aten::sort", "aten::argmax")]
            assert sampling and all(d == (torch.float32,) for d in sampling), sampling
            assert any(torch.bfloat16 in dtypes for name, dtypes in ops if name in ("aten::mm", "aten::addmm", "aten::linear"))
    for t in (*step.cache.keys, *step.cache.values):
        assert t.device == GPU and t.dtype == torch.bfloat16


def test_the_full_size_step_follows_the_capture_rules_at_the_extreme_shapes(tmp_path):
    """The published shapes (head_dim 256, 4 query heads per kv head, partial rotary) at the
    smallest and largest bucket and span a 256-slot, 4096-position cache captures."""
    model = full_size_gepard(torch.bfloat16, tmp_path)
    assert round(sum(p.numel() for p in model.parameters()) / 1e6) == 556
    step = gpu_step(model, slots=256, positions=4096)
    for bucket in (1, 256):
        tables = RowTables.allocate(bucket, step.cache.scratch, GPU)
        for span in (SMALLEST_SPAN, 4096):
            with capture_check():
                step.decode(tables, span)
            assert tables.out.shape == (bucket, 34) and tables.out.device == GPU


def test_a_prompt_and_its_prefill_run_on_the_gpu(gpu_model):
    step = gpu_step(gpu_model)
    with dtype_check():
        prompts = [gpu_model.prompt_embeds([5, 6, 7, 8], None), gpu_model.prompt_embeds([9, 10], None)]
        assert all(p.device == GPU and p.dtype == torch.bfloat16 for p in prompts)
        step.state.admit([0, 1], [(1.0, 0, 5, 0.5, 1.0, 0), (0.0, 3, 7, 0.5, 2.0, 4)])
        longest = max(p.shape[0] for p in prompts)
        embeds = torch.zeros(2, longest, gpu_model.config.hidden_size, device=GPU, dtype=gpu_model.dtype)
        lengths = torch.tensor([p.shape[0] for p in prompts], device=GPU)
        tables = RowTables.allocate(2, step.cache.scratch, GPU)
        step.prefill(embeds, lengths, torch.tensor([0, 1], device=GPU), tables)
    assert tables.out.device == GPU and step.cache.keys[0].dtype == torch.bfloat16


def test_the_torch_codec_decodes_on_the_gpu(tmp_path):
    from codec_worker.nanocodec import load_codec
    from codec_worker.torchcodec.random import write_random_decoder_codec

    path = write_random_decoder_codec(tmp_path / "codec.nemo", size="tiny")  # written without NeMo, as on a GPU host
    for dtype in (torch.float32, torch.bfloat16):
        codec = load_codec(path, device=GPU, dtype=dtype, impl="torch")
        with dtype_check():
            audio = codec.decode_codes(torch.zeros(2, 32, 10, dtype=torch.long), lengths=[10, 7])
        assert audio.device == GPU and audio.dtype == torch.float32
        assert audio.shape == (2, 10 * codec.samples_per_frame)


@pytest.mark.parametrize("unsafe", ["item", "mask", "host tensor", "host copy", "mixed dtypes"])
def test_the_capture_check_refuses_what_capture_refuses(unsafe):
    x = torch.zeros(4, 8, device=GPU)
    with pytest.raises(CaptureUnsafe), capture_check():
        if unsafe == "item":
            x.sum().item()
        elif unsafe == "mask":
            x[x > 0]
        elif unsafe == "host tensor":
            torch.arange(4).float() + 1
        elif unsafe == "host copy":
            x + torch.ones(8).to(GPU)
        else:
            x @ torch.zeros(8, 2, device=GPU, dtype=torch.bfloat16)


# -- 2. recorded graphs ---------------------------------------------------------------------------------

def test_replayed_graphs_give_the_reference_frames_with_joins_leaves_and_aborts(tiny_model, preparer, monkeypatch):
    sim = simulated_cuda_graphs(monkeypatch)
    reqs = [prepare(preparer, tiny_model, name, TEXTS[i % 4], sp) for i, (name, sp) in enumerate(KNOBS.items())]
    gen = FastGenerator(tiny_model, max_batch=8, max_positions=512)
    assert gen.graphs is not None
    step_python, replays = [], []
    run_step, replay = gen.device_step.decode, gen.graphs.replay
    monkeypatch.setattr(gen.device_step, "decode", lambda t, s: (step_python.append((t.rows, s)), run_step(t, s))[1])
    monkeypatch.setattr(gen.graphs, "replay", lambda key, step, tables: (replays.append(key), replay(key, step, tables))[1])
    schedule = {0: reqs[:3], 4: reqs[3:]}
    got = drive(gen, schedule, aborts={10: ["topk_penalty"]})
    ref = drive(BatchGenerator(tiny_model, max_batch=8), schedule, aborts={10: ["topk_penalty"]})
    for req in reqs:
        assert_same(ref, got, req.request_id)
    assert got.finish["topk_penalty"] is FinishReason.ABORT and got.finish["greedy"] is FinishReason.STOP
    # the step's Python ran only to capture (a warm-up and the capture per shape); every decode
    # after that was a replay of the recorded ops
    shapes = set(gen.graphs.graphs)
    assert len(shapes) >= 2 and len(step_python) == 2 * len(shapes)
    assert len(replays) > 20 and sum(g.replays for g in sim.graphs) == len(replays)
    assert all(g.ops for g in sim.graphs)


@pytest.mark.parametrize("prefill_graphs", [False, True])
def test_capturing_every_shape_at_start_changes_no_state(tiny_model, preparer, monkeypatch, prefill_graphs):
    simulated_cuda_graphs(monkeypatch)
    gen = FastGenerator(tiny_model, max_batch=4, max_positions=256, prefill_graphs=prefill_graphs)
    drive(gen, {0: [prepare(preparer, tiny_model, "warm", TEXTS[0], KNOBS["seeded"])]})
    st, cache = gen.device_step.state, gen.cache
    # every slot's tensors but the scratch slot's (the warm-up before each capture writes there)
    slots = lambda: [t[: gen.slots] for t in (*cache.keys, *cache.values, cache.lengths, st.frames, st.last_codes,  # noqa: E731
                                              st.counts, st.history)]
    before = [t.clone() for t in slots()]
    assert before[0].abs().sum() > 0  # the warm request left keys behind, so "unchanged" means something
    assert gen.capture_all() == len(power_buckets(4)) * len(power_buckets(256, smallest=SMALLEST_SPAN))
    assert len(gen.prefill_graphs.graphs) == 3 * 5 if prefill_graphs else gen.prefill_graphs is None  # rows 1-4, tokens 16-256
    assert all(torch.equal(a, b) for a, b in zip(before, slots()))
    # and the slot the warm request used is handed out clean: a new request gets the reference frames
    req = prepare(preparer, tiny_model, "next", TEXTS[2], KNOBS["topk_penalty"])
    assert_same(drive(BatchGenerator(tiny_model, max_batch=4), {0: [req]}), drive(gen, {0: [req]}), "next")


def test_a_step_that_reads_the_host_replays_its_capture_time_value():
    """The recorded graph freezes what a real one would (so it can catch such a step)."""
    out = torch.zeros(3)
    counter = {"n": 1.0}

    def step() -> None:
        out.add_(counter["n"])  # a Python number: captured as a constant
        counter["n"] += 1

    graph = record(step)
    assert torch.equal(out, torch.zeros(3))  # capture computed nothing
    graph.replay()
    graph.replay()
    assert torch.equal(out, torch.full((3,), 2.0)) and counter["n"] == 2.0  # 1 + 1, not 1 + 2: no Python ran


async def test_the_engine_captures_at_start_and_serves_from_replays(tiny_model, monkeypatch):
    sim = simulated_cuda_graphs(monkeypatch)
    sp = SamplingParams(temperature=0.8, seed=11, cfg_scale=2.0, cfg_frames=5)
    frames = {}
    for path in ("auto", "reference"):
        eng = TorchEngine(tiny_model, TorchEngineConfig(max_batch=4, path=path, max_positions=512))
        try:
            assert eng.path == ("fast" if path == "auto" else "reference")  # auto means fast on "CUDA"
            chunks = [c async for c in eng.generate(SynthesisRequest(f"r-{path}", TEXTS[3], None, sp))]
            frames[path] = torch.cat([c.codes for c in chunks], dim=-1)
        finally:
            await eng.aclose()
    assert torch.equal(frames["auto"], frames["reference"]) and frames["auto"].shape == (32, 24)
    assert len(sim.graphs) == len(power_buckets(4)) * len(power_buckets(512, smallest=SMALLEST_SPAN))
    # 24 frames: one from the prefill, 23 from decode steps, then a 24th decode step whose stop head ends it
    assert sum(g.replays for g in sim.graphs) == 24


def test_the_gpu_bench_check_passes_with_graphs(tiny_gepard_dir, monkeypatch, capsys):
    """bench/torch_fast.py --check, which bench/gpu.sh runs on a GPU before it measures anything."""
    from bench import torch_fast as bench

    sim = simulated_cuda_graphs(monkeypatch)
    monkeypatch.setattr(bench, "engine_checkpoint_tiny", lambda: tiny_gepard_dir)
    # the fast path, and with its steps overlapped (as gpu_session.sh checks it), both replaying graphs
    assert bench.check(torch.device("cpu"), ("fast", "overlap")) == {"fast eager": True, "fast graphs": True,
                                                                     "overlap graphs": True}
    out = capsys.readouterr().out
    assert "fast graphs equals the reference loop" in out and "overlap graphs equals the reference loop" in out
    assert sim.graphs and sum(g.replays for g in sim.graphs) > 0
    assert f"# check: {len(sim.graphs)} CUDA graphs replayed" in out
