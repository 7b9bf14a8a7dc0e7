"""The vLLM backend's API-process side: checkpoint checks, voices and prompts (no vLLM engine started)."""

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.backends.vllm_frontend import GepardFrontend
from engine.backends.vllm_layout import MAX_REPETITION_WINDOW, FrameParams, TokenLayout
from engine.errors import CheckpointError, InvalidRequestError
from engine.prompt import build_text_ids
from engine.requests import SamplingParams, SynthesisRequest

LAYOUT = TokenLayout(num_slots=8)


@pytest.fixture(scope="module")
def frontend(tiny_gepard_dir):
    return GepardFrontend.load(tiny_gepard_dir)


def prepare(frontend, text="Hello there.", prefix=None, max_model_len=512, **sampling):
    request = SynthesisRequest("r", text, prefix, SamplingParams(**sampling))
    return frontend.prepare(request, LAYOUT, max_model_len=max_model_len, max_frames_ceiling=2000)


def test_voices_and_fingerprint_match_the_torch_model(frontend, tiny_model):
    assert frontend.model_info.fingerprint == tiny_model.fingerprint
    assert torch.equal(frontend.default_prefix(), tiny_model.null_prefix.float())
    codes = torch.randint(0, 6, (40, 32), generator=torch.Generator().manual_seed(0))
    assert torch.equal(frontend.compress(codes), tiny_model.compress(codes))
    with pytest.raises(InvalidRequestError, match=r"\[T>0, 32\]"):
        frontend.compress(torch.zeros(0, 32, dtype=torch.long))
    with pytest.raises(InvalidRequestError, match="outside the codec's levels"):
        frontend.compress(torch.full((4, 32), 7))


def test_prompt_is_prefix_rows_then_the_torch_backends_text_ids(frontend, tiny_model):
    prefix = torch.randn(8, 96)
    p = prepare(frontend, "Hello there.", prefix, temperature=0.0, seed=5)
    cfg = tiny_model.config
    text_ids = build_text_ids(tiny_model.tokenizer.encode("Hello there."), cfg.special_tokens, cfg.text_repetition)
    assert p.token_ids == [0] * 8 + [LAYOUT.text_base + t for t in text_ids]
    assert p.is_token_ids == [False] * 8 + [True] * len(text_ids)
    assert torch.equal(p.prompt_embeds[:8], prefix) and (p.prompt_embeds[8:] == 0).all()
    assert p.params == FrameParams(0.0, 0, 5, 0.5)
    default = prepare(frontend, "Hello there.")
    assert torch.equal(default.prompt_embeds[:8], tiny_model.null_prefix)  # no prefix: the learned default voice


def test_frame_caps(frontend):
    assert prepare(frontend, "Hi.").max_frames == 95  # the adaptive cap, as on the torch backend
    assert prepare(frontend, max_frames=7).max_frames == 7
    short = prepare(frontend, "Hi.", max_model_len=64)
    assert short.max_frames == 64 - short.prompt_len  # the adaptive cap shrinks to what fits
    with pytest.raises(InvalidRequestError, match=r"max_frames \(60\) exceeds the engine's max_model_len \(64\)"):
        prepare(frontend, "Hi.", max_model_len=64, max_frames=60)
    with pytest.raises(InvalidRequestError, match="text is too long"):
        prepare(frontend, "word " * 100, max_model_len=64)


@pytest.mark.parametrize("sampling, message", [
    (dict(temperature=-1), r"temperature must be in \[0, 10\], got -1"),
    (dict(top_k=-1), r"top_k must be in \[0, 1024\], got -1"),
    (dict(top_k=2**63), r"top_k must be in \[0, 1024\], got 2\*\*63"),
    (dict(stop_threshold=1.5), r"stop_threshold must be in \(0, 1\)"),
    (dict(stop_threshold=1.0), r"stop_threshold must be in \(0, 1\), got 1.0"),
    (dict(repetition_penalty=0), r"repetition_penalty must be in \(0, 10\], got 0"),
    (dict(max_frames=0), r"max_frames must be in \[1, 2000\]"),
    (dict(cfg_scale=3.0), r"classifier-free guidance \(cfg_scale=3.0\) is not supported by the vLLM backend"),
    (dict(repetition_penalty=1.2, repetition_window=MAX_REPETITION_WINDOW + 1), "repetition_window must be <= 64"),
    (dict(temperature=float("inf")), r"temperature must be a finite number in \[0, 10\], got inf"),
    (dict(temperature=3.5e38), r"temperature must be in \[0, 10\], got 3.5e\+38"),
])
def test_bad_sampling_is_rejected_with_the_field_named(frontend, sampling, message):
    with pytest.raises(InvalidRequestError, match=message):
        prepare(frontend, **sampling)


def test_cfg_that_guides_nothing_is_accepted(frontend):
    assert prepare(frontend, cfg_scale=3.0, cfg_frames=0).max_frames > 0


@pytest.mark.parametrize("prefix, message", [
    (torch.zeros(4, 96), r"shape \[8, 96\], got \[4, 96\]"),
    (torch.zeros(1, 8, 96), r"shape \[8, 96\], got \[1, 8, 96\]"),
    (torch.zeros(8, 64), r"shape \[8, 96\], got \[8, 64\]"),
    (torch.full((8, 96), float("nan")), "NaN or infinite"),
    (torch.full((8, 96), float("inf")), "NaN or infinite"),
    (torch.zeros(8, 96, dtype=torch.bool), "real numbers"),
    ([[0.0] * 96] * 8, "must be a tensor"),
])
def test_bad_speaker_prefixes_are_rejected_before_they_reach_vllm(frontend, prefix, message):
    with pytest.raises(InvalidRequestError, match=message):
        prepare(frontend, prefix=prefix)


def test_empty_text_is_rejected(frontend):
    with pytest.raises(InvalidRequestError, match="text is empty"):
        prepare(frontend, "  \n ")


def test_checkpoint_problems_are_found_without_loading_weights(tiny_gepard_dir, tmp_path):
    missing = tmp_path / "missing-tensor"
    shutil.copytree(tiny_gepard_dir, missing)
    tensors = load_file(str(missing / "model.safetensors"))
    del tensors["model.layers.1.mlp.down_proj.weight"]
    save_file(tensors, str(missing / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing tensor\(s\) model.layers.1.mlp.down_proj.weight"):
        GepardFrontend.load(missing)

    shaped = tmp_path / "bad-shape"
    shutil.copytree(tiny_gepard_dir, shaped)
    tensors["model.layers.1.mlp.down_proj.weight"] = torch.zeros(96, 10)
    save_file(tensors, str(shaped / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"down_proj.weight has shape \[96, 10\], expected \[96, 192\]"):
        GepardFrontend.load(shaped)

    (shaped / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="cannot read"):
        GepardFrontend.load(shaped)
    (shaped / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="missing model.safetensors"):
        GepardFrontend.load(shaped)
    (missing / "config.json").unlink()
    with pytest.raises(CheckpointError, match="missing config.json"):
        GepardFrontend.load(missing)
