"""Random checkpoints: the built-in counter stops requests after exactly N frames."""

import pytest
import torch

from engine.backends.torch_backend import TorchEngine
from engine.model.gepard import GepardModel
from engine.requests import FinishReason, SamplingParams, SynthesisRequest
from engine.tiny import max_counter, write_tiny_checkpoint


@pytest.mark.parametrize("stop_after", [1, 7, 41])
async def test_every_request_stops_after_the_requested_frames(tmp_path, stop_after):
    ckpt = write_tiny_checkpoint(tmp_path / "ckpt", stop_after=stop_after, seed=stop_after, with_codec=False)
    engine = TorchEngine(GepardModel.from_pretrained(ckpt))
    try:
        for text, sampling in [("Hello there.", SamplingParams(temperature=0.0)),
                               ("A much longer sentence about nothing at all.", SamplingParams(temperature=1.0, seed=4))]:
            chunks = [c async for c in engine.generate(SynthesisRequest(f"{text[:3]}", text, None, sampling))]
            frames = sum(c.num_frames for c in chunks)
            assert (frames, chunks[-1].finish_reason) == (stop_after, FinishReason.STOP)
    finally:
        await engine.aclose()


def test_counter_limits_are_reported(tmp_path):
    assert max_counter(96) == 56  # tiny: two counter channels (8 x 7 states)
    assert max_counter(1024) == 336  # full: three channels (8 x 7 x 6)
    with pytest.raises(ValueError, match="at most 56 frames"):
        write_tiny_checkpoint(tmp_path / "x", stop_after=57, with_codec=False)


def test_seed_changes_weights_but_not_layout(tmp_path):
    a = write_tiny_checkpoint(tmp_path / "a", seed=1, with_codec=False)
    b = write_tiny_checkpoint(tmp_path / "b", seed=2, with_codec=False)
    from safetensors.torch import load_file

    ta, tb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert ta.keys() == tb.keys()
    assert not torch.equal(ta["model.layers.0.mlp.up_proj.weight"], tb["model.layers.0.mlp.up_proj.weight"])
