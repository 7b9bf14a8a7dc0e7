"""bench/torch_fast.py: the physical floor (what a decode step must read, the bandwidth it is read at) and its JSON."""

from __future__ import annotations

import pytest
import torch

from bench.torch_fast import peak_gbps, step_read_bytes
from engine.model.gepard import GepardModel
from engine.tiny import SIZES, write_configs


def test_a_full_size_step_reads_the_weights_it_uses_once_plus_each_rows_cache(tmp_path):
    cfg = write_configs(tmp_path, SIZES["full"], 400, SIZES["full"].vocab)
    with torch.device("meta"):  # the published shapes, no data
        model = GepardModel(cfg).to(torch.bfloat16)
    everything = sum(p.numel() * 2 for p in model.parameters())
    weights = step_read_bytes(model, rows=0, positions=0)
    # 556M parameters, but a decode step never touches the 254M of the text embedding table (prompts
    # only), nor the voice compressor: 259M parameters, 0.52 GB in bf16, are what every step reads
    assert round(everything / 2e6) == 556 and round(weights / 2e6) == 259
    # each row reads its keys and values: 2 x 14 layers x 2 kv heads x 256 dims x 2 bytes per position
    assert step_read_bytes(model, rows=3, positions=100) - weights == 3 * 100 * 28_672


def test_the_bandwidth_comes_from_the_gpus_name_or_the_option(monkeypatch):
    assert peak_gbps(torch.device("cpu"), None) is None
    assert peak_gbps(torch.device("cpu"), 123.0) == 123.0
    cuda = torch.device("cuda", 0)
    for name, gbps in [("NVIDIA H200", 4800), ("NVIDIA H100 80GB HBM3", 3350), ("NVIDIA H100 PCIe", 2000),
                       ("NVIDIA A100-SXM4-80GB", 2039), ("NVIDIA A100-PCIE-40GB", 1555),
                       ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 1792), ("NVIDIA GeForce RTX 5090", 1792),
                       ("Some Future GPU", None)]:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, n=name: n)
        assert peak_gbps(cuda, None) == gbps, name


def test_a_run_cut_short_keeps_the_rows_it_measured(tiny_gepard_dir, tmp_path, monkeypatch):
    """gpu_session.sh stops a part at its cap with SIGINT: the JSON must hold what was measured."""
    import json

    from bench import torch_fast

    real, calls = torch_fast.time_path, []

    def cut_at_the_second(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == 2:
            raise KeyboardInterrupt  # what SIGINT raises in the middle of the second row
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_fast, "time_path", cut_at_the_second)
    out = tmp_path / "fast.json"
    with pytest.raises(KeyboardInterrupt):
        torch_fast.main(["--size", "tiny", "--checkpoint", str(tiny_gepard_dir), "--batch", "1", "--steps", "2",
                         "--paths", "reference,fast", "--json", str(out)])
    result = json.loads(out.read_text())
    assert [(r["path"], r["batch"]) for r in result["results"]] == [("reference", 1)]


def test_an_unknown_path_is_refused_not_run_as_the_reference_loop(capsys):
    from bench import torch_fast

    with pytest.raises(SystemExit) as exit_info:
        torch_fast.parse_args(["--paths", "reference,fastt"])
    assert exit_info.value.code == 2
    assert "unknown path(s) fastt; choose from reference, fast, compiled, overlap, compiled+overlap" in capsys.readouterr().err
    assert torch_fast.parse_args(["--paths", "compiled+overlap"]).paths == "compiled+overlap"


def test_prefills_are_timed_per_path_once_each_with_every_request_ended_at_its_first_frame(tiny_gepard_dir, tmp_path):
    """An overlapped path prefills exactly as its serial one, so it is not timed again."""
    import json

    from bench import torch_fast

    out = tmp_path / "fast.json"
    torch_fast.main(["--size", "tiny", "--checkpoint", str(tiny_gepard_dir), "--batch", "1", "--steps", "2",
                     "--paths", "reference,fast,unfused,overlap", "--prefills", "3", "--json", str(out)])
    doc = json.loads(out.read_text())
    prefills = doc["prefills"]
    assert [(r["path"], r["prompts"]) for r in prefills] == [
        ("reference", 1), ("fast", 1), ("unfused", 1), ("reference", 8), ("fast", 8), ("unfused", 8)]
    assert [r["path"] for r in doc["results"]] == ["reference", "fast", "unfused", "overlap"]
    # on CPU the fused kernels' default is off: no path ran them
    assert [r["fused_kernels"] for r in doc["results"]] == [None, False, False, False]
    assert doc["checks"]["unfused graphs"] is True  # on CPU: the eager step, the reference's frames
    for r in prefills:
        assert r["repeats"] == 3 and r["tokens"] > 10 and 0 < r["prefill_ms_p50"] <= r["prefill_ms_p90"]


def test_every_timed_step_decodes_the_whole_batch(tiny_gepard_dir):
    """The server's prefill limit (8 prompts a step) would still be filling a large batch while the
    steps are timed: the bench prefills the whole batch first, as the reference loop does."""
    from bench import torch_fast
    from engine.backends.torch_backend import TorchEngine, TorchEngineConfig

    model = GepardModel.from_pretrained(tiny_gepard_dir, device=torch.device("cpu"), dtype=torch.float32)
    engine = TorchEngine(model, TorchEngineConfig(max_batch=1, path="reference"))
    try:
        results = {path: torch_fast.time_path(path, model, engine, 48, 3, graphs=False, greedy=True)
                   for path in ("reference", "fast", "overlap")}
    finally:
        import asyncio

        asyncio.run(engine.aclose())
    for path, (r, _) in results.items():
        assert (r.batch, r.rows) == (48, 48), path
        # the host's part of a step: the fast path's only (on CPU nearly all of it: the device work runs in the call)
        assert (r.host_ms_p50 is None) == (path == "reference"), path
        assert r.host_ms_p50 is None or 0 < r.host_ms_p50 <= r.step_ms_p50, (path, r)
    assert results["fast"][0].shape.startswith("(48,")  # the largest bucket: the slots, all in use
    ref = results["reference"][1]
    assert all(torch.equal(ref[k], results[p][1][k]) for p in ("fast", "overlap") for k in ref)


def test_the_host_part_of_a_step_leaves_out_what_the_waits_for_the_device_blocked(tiny_gepard_dir):
    """A device that takes 30 ms to hand a step's results back (a wait that sleeps, standing in for
    CUDA): the waits are timed, so the host's part is the step's time without them."""
    import asyncio
    import time

    from bench import torch_fast
    from engine.backends.torch_backend import TorchEngine, TorchEngineConfig
    from engine.backends.torch_fast import FastGenerator
    from engine.requests import SamplingParams, SynthesisRequest

    model = GepardModel.from_pretrained(tiny_gepard_dir, device=torch.device("cpu"), dtype=torch.float32)
    engine = TorchEngine(model, TorchEngineConfig(max_batch=1, path="reference"))  # its prepare() only
    try:
        request = engine.prepare(SynthesisRequest("r", "Hello there.", None, SamplingParams(seed=1, max_frames=3)))
    finally:
        asyncio.run(engine.aclose())
    gen = FastGenerator(model, max_batch=2, max_positions=256)

    def slow(wait):
        def slept() -> torch.Tensor:
            time.sleep(0.03)
            return wait()
        return slept

    for out in (*gen._decode_outs, gen._prefill_out):
        out.wait = slow(out.wait)
    waits = torch_fast.time_device_waits(gen)
    gen.add(request)
    gen.step()  # the prefill: one wait
    assert len(waits) == 1 and waits[0] >= 0.03
    started = time.perf_counter()
    gen.step()  # a decode step: one more
    step = time.perf_counter() - started
    assert len(waits) == 2 and 0.03 <= waits[1] <= step


def test_a_path_whose_capture_failed_is_timed_and_checked_as_eager_and_says_so(tiny_gepard_dir, monkeypatch, capsys):
    """Under the recorded-graph model of CUDA graphs: the same run with every capture refused as a
    GPU refuses one. The fast path then serves eagerly (engine.backends.torch_fast), so its figures
    are eager ones: the results and the check must say so, or a GPU session would report them
    under graphs."""
    from bench import torch_fast
    from engine.backends.torch_backend import TorchEngine, TorchEngineConfig
    from tests.engine.backends.test_torch_fast_capture_failures import REFUSED, refuse_captures
    from tests.recorded_graph import simulated_cuda_graphs

    model = GepardModel.from_pretrained(tiny_gepard_dir, device=torch.device("cpu"), dtype=torch.float32)
    engine = TorchEngine(model, TorchEngineConfig(max_batch=1, path="reference"))
    try:
        assert torch_fast.time_path("fast", model, engine, 2, 2, graphs=True, greedy=True)[0].graphs is None  # CPU
        simulated_cuda_graphs(monkeypatch)
        replayed, _ = torch_fast.time_path("fast", model, engine, 2, 2, graphs=True, greedy=True)
        prefill = torch_fast.time_prefill("prefill-graphs", model, engine, 2, 1, graphs=True)
        refuse_captures(monkeypatch, torch.AcceleratorError(REFUSED))
        eager, _ = torch_fast.time_path("fast", model, engine, 2, 2, graphs=True, greedy=True)
        eager_prefill = torch_fast.time_prefill("prefill-graphs", model, engine, 2, 1, graphs=True)
        unasked = torch_fast.time_path("fast", model, engine, 2, 2, graphs=False, greedy=True)[0]
    finally:
        import asyncio

        asyncio.run(engine.aclose())
    assert (replayed.graphs, eager.graphs, unasked.graphs) == (True, False, None)
    assert (prefill.graphs, eager_prefill.graphs) == (True, False)
    monkeypatch.setattr(torch_fast, "engine_checkpoint_tiny", lambda: tiny_gepard_dir)
    capsys.readouterr()
    assert torch_fast.check(torch.device("cpu"), ("fast",)) == {"fast eager": True, "fast graphs": True}
    out = capsys.readouterr().out
    assert "# check: fast graphs ran eagerly: a CUDA graph capture failed" in out and "fast eager ran" not in out
