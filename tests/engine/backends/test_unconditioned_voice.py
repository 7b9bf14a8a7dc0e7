"""The unconditioned voice on the torch backend: an empty [0, H] speaker prefix puts no prefix rows
in the prompt (the text alone, as the upstream reference runner does without a reference), and its
frames differ from the default voice's (``null_prefix``). torch == vLLM for it is checked in
test_vllm_backend.py, beside the other backend-equality tests (one vLLM start for all of them)."""

from __future__ import annotations

import pytest
import pytest_asyncio
import torch

from engine.backends.torch_backend import TorchEngine, TorchEngineConfig
from engine.errors import InvalidRequestError
from engine.requests import SamplingParams, SynthesisRequest

pytestmark = pytest.mark.asyncio(loop_scope="module")

TEXT = "The quick brown fox jumps over the lazy dog."


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(tiny_model):
    eng = TorchEngine(tiny_model, TorchEngineConfig(max_batch=4))
    yield eng
    await eng.aclose()


def no_prefix(model) -> torch.Tensor:
    return torch.zeros(0, model.config.hidden_size)


async def frames(engine, rid: str, prefix, sampling: SamplingParams) -> torch.Tensor:
    chunks = [c async for c in engine.generate(SynthesisRequest(rid, TEXT, prefix, sampling))]
    return torch.cat([c.codes for c in chunks], dim=1)


async def test_the_prompt_is_the_text_alone(engine, tiny_model):
    request = SynthesisRequest("p", TEXT, no_prefix(tiny_model))
    unconditioned = engine.prepare(request).prompt_embeds
    default = engine.prepare(SynthesisRequest("d", TEXT, None)).prompt_embeds
    k = tiny_model.config.prefix_length
    assert unconditioned.shape[0] == default.shape[0] - k
    assert torch.equal(unconditioned, default[k:])  # same text rows, no speaker rows before them


@pytest.mark.parametrize("sampling", [SamplingParams(temperature=0.0), SamplingParams(temperature=0.8, seed=5)])
async def test_unconditioned_frames_differ_from_the_default_voice_and_repeat(engine, tiny_model, sampling):
    none_a = await frames(engine, "u1", no_prefix(tiny_model), sampling)
    none_b = await frames(engine, "u2", no_prefix(tiny_model), sampling)
    default = await frames(engine, "d", None, sampling)
    assert none_a.shape == default.shape == (32, 24)
    assert torch.equal(none_a, none_b)  # pinned seed (or greedy): reproducible
    assert not torch.equal(none_a, default)


async def test_other_prefix_lengths_are_still_refused(engine, tiny_model):
    with pytest.raises(InvalidRequestError, match=r"got \[3, 96\] \(\[0, 96\] means no prefix\)"):
        await frames(engine, "bad", torch.zeros(3, tiny_model.config.hidden_size), SamplingParams())
