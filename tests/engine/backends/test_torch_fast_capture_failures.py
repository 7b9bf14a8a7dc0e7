"""A CUDA graph capture that fails costs the graphs, not the requests, nor the engine.

On a GPU a capture can be refused by what the captured work does (a host sync, a pageable copy:
CUDA's stream-capture errors 900-908, which PyTorch raises as a "CUDA error"), or run out of
memory for the graph's pool. Neither leaves the device unusable, and the same step runs eagerly.
Here the captures are recorded graphs on CPU (tests/recorded_graph.py) and the refusal is the
error a GPU raises, thrown where the capture starts: the fast path must then serve every request
the reference loop's frames, eagerly, with one ERROR line, and still stop for a lost device.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator, Optional

import pytest
import torch

from api.metrics import ServingInfo
from engine.backends.torch_backend import TorchEngine, TorchEngineConfig
from engine.backends.torch_fast import FastGenerator
from engine.backends.torch_generator import BatchGenerator
from engine.requests import EngineDescription, SamplingParams, SynthesisRequest
from tests.engine.backends.test_torch_fast import KNOBS, TEXTS, assert_same, drive, prepare, preparer  # noqa: F401 (a fixture)
from tests.recorded_graph import simulated_cuda_graphs

# what PyTorch raises when a captured op syncs with the host (cudaErrorStreamCaptureUnsupported)
REFUSED = "CUDA error: operation not permitted when stream is capturing\nCUDA kernel errors might be asynchronously reported"
# what PyTorch's own check raises for a pageable copy inside a capture (a RuntimeError)
TORCH_REFUSED = "Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor is pinned\nmore"
LOST = "CUDA error: an illegal memory access was encountered"


def refuse_captures(monkeypatch: pytest.MonkeyPatch, error: BaseException, after: int = 0,
                    refusals: Optional[int] = None) -> list[int]:
    """Make every CUDA graph capture after the first ``after`` raise ``error`` as it starts (a
    capture computes nothing, so nothing was written), or only the next ``refusals`` of them.
    Returns the list of captures tried."""
    tried: list[int] = []
    recorded = torch.cuda.graph  # simulated_cuda_graphs' stand-in

    @contextlib.contextmanager
    def capture(*args, **kwargs) -> Iterator[None]:
        tried.append(len(tried))
        if len(tried) > after and (refusals is None or len(tried) <= after + refusals):
            raise error
        with recorded(*args, **kwargs):
            yield

    monkeypatch.setattr(torch.cuda, "graph", capture)
    return tried


def test_a_decode_capture_refused_mid_run_leaves_every_request_on_the_reference_frames(tiny_model, preparer,
                                                                                          monkeypatch, caplog):
    """The first shape is captured and replayed; the next one (a second request joins: a bigger
    batch bucket) is refused: from then on the decode steps run eagerly, over the row tables as
    they were before the capture's warm-up padded them, and no frame differs."""
    sim = simulated_cuda_graphs(monkeypatch)
    tried = refuse_captures(monkeypatch, torch.AcceleratorError(REFUSED), after=1)
    caplog.set_level(logging.INFO, logger="engine.backends.torch_fast")
    gen = FastGenerator(tiny_model, max_batch=4, max_positions=512)
    reqs = [prepare(preparer, tiny_model, name, TEXTS[i], KNOBS[name]) for i, name in enumerate(("seeded", "cfg_greedy"))]
    schedule = {0: reqs[:1], 3: reqs[1:]}
    got = drive(gen, schedule)
    ref = drive(BatchGenerator(tiny_model, max_batch=4), schedule)
    for req in reqs:
        assert_same(ref, got, req.request_id)
    assert gen.graphs is None and len(tried) == 2
    assert sim.graphs[0].replays >= 2  # the first shape did replay before the refusal
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["torch fast path: capturing the decode step for batch bucket 4, span 128 failed (AcceleratorError: "
                      "CUDA error: operation not permitted when stream is capturing); decode steps run eagerly from now on"]


@pytest.mark.parametrize("error", [torch.AcceleratorError(REFUSED), RuntimeError(TORCH_REFUSED)], ids=["cuda", "torch"])
def test_every_capture_refused_leaves_decode_and_prefill_eager_with_the_reference_frames(tiny_model, preparer,
                                                                                           monkeypatch, caplog, error):
    """The prefill's capture (at its first use) is refused, then the decode step's."""
    simulated_cuda_graphs(monkeypatch)
    refuse_captures(monkeypatch, error)
    caplog.set_level(logging.ERROR, logger="engine.backends.torch_fast")
    gen = FastGenerator(tiny_model, max_batch=4, max_positions=512, prefill_graphs=True)
    reqs = [prepare(preparer, tiny_model, name, TEXTS[i], KNOBS[name]) for i, name in enumerate(("greedy", "topk_penalty"))]
    schedule = {0: reqs[:1], 2: reqs[1:]}
    got = drive(gen, schedule, aborts={9: ["greedy"]})
    ref = drive(BatchGenerator(tiny_model, max_batch=4), schedule, aborts={9: ["greedy"]})
    for req in reqs:
        assert_same(ref, got, req.request_id)
    assert gen.graphs is None and gen.prefill_graphs is None
    said = f"{type(error).__name__}: {str(error).splitlines()[0]}"  # the first line only
    assert [m for m in caplog.messages if "run eagerly from now on" in m] == [
        f"torch fast path: capturing the prefill of 1 prompts of 64 tokens failed ({said}); prefills run eagerly from now on",
        f"torch fast path: capturing the decode step for batch bucket 1, span 128 failed ({said}); decode steps run "
        "eagerly from now on"]


@pytest.mark.parametrize("error", [torch.AcceleratorError(REFUSED),
                                   torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")],
                         ids=["refused", "out-of-memory"])
async def test_an_engine_whose_captures_fail_at_start_serves_eagerly(tiny_model, monkeypatch, caplog, error):
    """TorchEngine captures every shape before serving; a failure there used to stop the start.
    Its description (the start's log line, gepard_engine_info) says the graphs are off."""
    simulated_cuda_graphs(monkeypatch)
    tried = refuse_captures(monkeypatch, error, after=3)
    caplog.set_level(logging.INFO, logger="engine.backends")
    sp = SamplingParams(temperature=0.8, seed=5, max_frames=30)
    frames = {}
    for path in ("auto", "reference"):
        eng = TorchEngine(tiny_model, TorchEngineConfig(max_batch=4, path=path, max_positions=512))
        try:
            chunks = [c async for c in eng.generate(SynthesisRequest(f"r-{path}", TEXTS[1], None, sp))]
            frames[path] = torch.cat([c.codes for c in chunks], dim=-1)
            if path == "auto":
                assert eng.path == "fast" and eng._generator.graphs is None
                assert eng.description == EngineDescription("torch", "fast", "cpu", "float32", cuda_graphs=False)
                assert serving_info(eng)["cuda_graphs"] == "false"
        finally:
            await eng.aclose()
    assert torch.equal(frames["auto"], frames["reference"])
    assert len(tried) == 4  # three captured, the fourth failed, none tried after
    assert "decode steps run eagerly from now on" in caplog.text and "decode-step graphs in" not in caplog.text


@pytest.mark.parametrize("prefill_graphs", [False, True], ids=["prefills-eager", "prefill-graphs"])
async def test_an_engine_whose_captures_succeed_says_so(tiny_model, monkeypatch, prefill_graphs):
    """The control for the test above: the same engine, every capture recorded; with
    GEPARD_TORCH_PREFILL_GRAPHS its prefills are graphs too, and the description says which."""
    sim = simulated_cuda_graphs(monkeypatch)
    eng = TorchEngine(tiny_model, TorchEngineConfig(max_batch=4, path="auto", max_positions=512,
                                                    prefill_graphs=prefill_graphs))
    try:
        assert sim.graphs and eng._generator.graphs is not None
        assert (eng._generator.prefill_graphs is not None) is prefill_graphs
        assert eng.description == EngineDescription("torch", "fast", "cpu", "float32", cuda_graphs=True,
                                                    prefill_graphs=prefill_graphs)
        assert serving_info(eng) == {"backend": "torch", "loop": "fast", "device": "cpu", "dtype": "float32",
                                     "cuda_graphs": "true", "prefill_graphs": str(prefill_graphs).lower(),
                                     "fused_kernels": "false"}
    finally:
        await eng.aclose()


async def test_an_engine_whose_prefill_capture_fails_at_start_says_its_prefills_run_eagerly(tiny_model, monkeypatch):
    """The start captures the prefill shapes first; the first one refused leaves the prefills eager
    and the decode steps replayed, and the description (gepard_engine_info) says just that."""
    simulated_cuda_graphs(monkeypatch)
    tried = refuse_captures(monkeypatch, torch.AcceleratorError(REFUSED), after=2, refusals=1)
    eng = TorchEngine(tiny_model, TorchEngineConfig(max_batch=4, path="auto", max_positions=512, prefill_graphs=True))
    try:
        assert len(tried) > 3  # two prefill shapes captured, the third refused, then the decode steps
        assert eng._generator.prefill_graphs is None and eng._generator.graphs is not None
        assert eng.description == EngineDescription("torch", "fast", "cpu", "float32", cuda_graphs=True,
                                                    prefill_graphs=False)
        assert serving_info(eng)["prefill_graphs"] == "false"
    finally:
        await eng.aclose()


def serving_info(engine: TorchEngine) -> dict[str, str]:
    """The labels of the one gepard_engine_info series a scrape would show for ``engine``."""
    info = ServingInfo()
    info.engine = engine
    [family] = [f for f in info.collect() if f.name == "gepard_engine_info"]
    [sample] = family.samples
    assert sample.value == 1
    return sample.labels


def test_a_device_lost_during_a_capture_still_stops_the_generator(tiny_model, monkeypatch):
    simulated_cuda_graphs(monkeypatch)
    refuse_captures(monkeypatch, torch.AcceleratorError(LOST))
    gen = FastGenerator(tiny_model, max_batch=2, max_positions=256)
    with pytest.raises(torch.AcceleratorError, match="illegal memory access"):
        gen.capture_all()
