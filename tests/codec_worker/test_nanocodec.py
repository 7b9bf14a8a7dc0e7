"""NanoCodec: loading (and every way a checkpoint can be wrong), decode, encode, input checks."""

from __future__ import annotations

import io
import math
import shutil
import tarfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
import yaml

from codec_worker import fsq
from codec_worker.errors import (
    CodecError,
    CodecFormatError,
    CodecNotFoundError,
    InvalidAudioError,
    InvalidCodesError,
)
from codec_worker.nanocodec import NanoCodec, decoder_left_context_frames
from tests.codec_worker.conftest import random_codes


# ---- helpers ---------------------------------------------------------------------------------


def _read(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    with tarfile.open(path) as archive:
        config = yaml.safe_load(archive.extractfile("./model_config.yaml").read())
        state = torch.load(io.BytesIO(archive.extractfile("./model_weights.ckpt").read()), weights_only=True)
    return config, state


def _write(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def _members(config: Any, state: dict[str, Any]) -> dict[str, bytes]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return {"./model_config.yaml": yaml.safe_dump(config).encode(), "./model_weights.ckpt": buffer.getvalue()}


# ---- loading -----------------------------------------------------------------------------------


def test_loads_with_published_properties(codec: NanoCodec) -> None:
    assert codec.sample_rate_hz == 22050
    assert codec.samples_per_frame == 1024
    assert codec.receptive_field_frames == 25
    assert len(codec.fingerprint) == 64 and int(codec.fingerprint, 16) >= 0
    assert codec.device == torch.device("cpu") and codec.dtype == torch.float32


def test_receptive_field_formula_on_the_published_config() -> None:
    published = {"up_sample_rates": [8, 8, 4, 2, 2], "in_kernel_size": 7, "out_kernel_size": 3,
                 "resblock_kernel_sizes": [3, 7, 11], "resblock_dilation_sizes": [1, 3, 5]}
    assert decoder_left_context_frames({"_target_": "x.CausalHiFiGANDecoder", **published}) == 25
    # a single stage worked by hand: post 2 -> res 120 -> 122 -> ceil((-122 - 3) / 2) = -62 -> pre 6 -> 68
    single = {**published, "up_sample_rates": [2]}
    assert decoder_left_context_frames({"_target_": "x.CausalHiFiGANDecoder", **single}) == 68


def test_fingerprint_is_stable_and_tracks_the_weights(codec: NanoCodec, codec_path: Path, tmp_path: Path) -> None:
    config, state = _read(codec_path)
    folder = tmp_path / "unpacked"
    folder.mkdir()
    (folder / "model_config.yaml").write_text(yaml.safe_dump(config))
    torch.save(state, folder / "model_weights.ckpt")
    assert NanoCodec.load(folder).fingerprint == codec.fingerprint  # same tensors, other container
    state["audio_decoder.post_conv.conv.bias"] = state["audio_decoder.post_conv.conv.bias"] + 1e-3
    changed = NanoCodec.load(_write(tmp_path / "changed.nemo", _members(config, state)))
    assert changed.fingerprint != codec.fingerprint


def test_directory_with_one_nemo_loads(codec: NanoCodec, codec_path: Path, tmp_path: Path) -> None:
    shutil.copy(codec_path, tmp_path / "whatever.nemo")
    assert NanoCodec.load(str(tmp_path)).fingerprint == codec.fingerprint


def test_training_only_tensors_are_ignored(codec_path: Path) -> None:
    _, state = _read(codec_path)
    assert any(key.startswith("discriminator.") for key in state)  # and yet the fixture loaded


Corruption = Callable[[dict[str, Any], dict[str, torch.Tensor]], dict[str, bytes]]


def _drop_config(config: dict, state: dict) -> dict[str, bytes]:
    return {k: v for k, v in _members(config, state).items() if "yaml" not in k}


def _drop_tensor(config: dict, state: dict) -> dict[str, bytes]:
    del state["audio_decoder.res_layers.1.res_blocks.2.res_blocks.0.input_conv.conv.bias"]
    return _members(config, state)


def _reshape_tensor(config: dict, state: dict) -> dict[str, bytes]:
    key = "audio_decoder.pre_conv.conv.parametrizations.weight.original1"
    state[key] = state[key][:, :, :5].clone()
    return _members(config, state)


def _extra_tensor(config: dict, state: dict) -> dict[str, bytes]:
    state["audio_encoder.extra.weight"] = torch.zeros(3)
    return _members(config, state)


def _nan_tensor(config: dict, state: dict) -> dict[str, bytes]:
    state["audio_decoder.post_conv.conv.bias"] = torch.tensor([float("nan")])
    return _members(config, state)


def _bad_target(config: dict, state: dict) -> dict[str, bytes]:
    config["audio_decoder"]["_target_"] = "os.system"
    return _members(config, state)


def _non_causal_decoder(config: dict, state: dict) -> dict[str, bytes]:
    config["audio_decoder"]["_target_"] = "nemo.collections.tts.modules.audio_codec_modules.HiFiGANDecoder"
    return _members(config, state)


def _bad_kwarg(config: dict, state: dict) -> dict[str, bytes]:
    config["audio_encoder"]["not_an_argument"] = 1
    return _members(config, state)


def _other_levels(config: dict, state: dict) -> dict[str, bytes]:
    config["vector_quantizer"]["num_levels_per_group"] = [9, 8, 8, 7]
    return _members(config, state)


def _rates_mismatch(config: dict, state: dict) -> dict[str, bytes]:
    config["audio_decoder"]["up_sample_rates"] = [8, 8, 4, 2]
    return _members(config, state)


def _missing_key(config: dict, state: dict) -> dict[str, bytes]:
    del config["samples_per_frame"]
    return _members(config, state)


def _bad_yaml(config: dict, state: dict) -> dict[str, bytes]:
    return {**_members(config, state), "./model_config.yaml": b"sample_rate: [unclosed"}


def _weights_not_torch(config: dict, state: dict) -> dict[str, bytes]:
    return {**_members(config, state), "./model_weights.ckpt": b"definitely not a checkpoint"}


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (_drop_config, r"has no model_config\.yaml"),
        (_drop_tensor, r"missing tensor 'audio_decoder\.res_layers\.1\.res_blocks\.2\.res_blocks\.0\.input_conv\.conv\.bias'"),
        (_reshape_tensor, r"'audio_decoder\.pre_conv\.conv\.parametrizations\.weight\.original1' has shape \(64, 32, 5\), expected \(64, 32, 7\)"),
        (_extra_tensor, r"unexpected tensor 'audio_encoder\.extra\.weight'"),
        (_nan_tensor, r"'audio_decoder\.post_conv\.conv\.bias' holds NaN"),
        (_bad_target, r"audio_decoder\._target_ 'os\.system' is not supported"),
        (_non_causal_decoder, r"audio_decoder\._target_ .*HiFiGANDecoder' is not supported.*CausalHiFiGANDecoder"),
        (_bad_kwarg, r"cannot build audio_encoder \(HiFiGANEncoder\).*not_an_argument"),
        (_other_levels, r"num_levels_per_group=\[9, 8, 8, 7\]"),
        (_rates_mismatch, r"up_sample_rates \[8, 8, 4, 2\] multiply to 512, expected samples_per_frame 1024"),
        (_missing_key, r"has no 'samples_per_frame' key"),
        (_bad_yaml, r"model_config\.yaml is not valid YAML"),
        (_weights_not_torch, r"cannot read model_weights\.ckpt"),
    ],
    ids=lambda value: value.__name__.lstrip("_") if callable(value) else "message",
)
def test_corrupted_checkpoint_names_the_problem(codec_path: Path, tmp_path: Path, corrupt: Corruption, message: str) -> None:
    config, state = _read(codec_path)
    bad = _write(tmp_path / "bad.nemo", corrupt(config, state))
    with pytest.raises(CodecFormatError, match=message) as info:
        NanoCodec.load(bad)
    assert str(info.value).startswith(str(bad))


def test_not_a_tar(tmp_path: Path) -> None:
    path = tmp_path / "codec.nemo"
    path.write_bytes(b"\x00" * 10 + b"this is not a tar archive" * 40)
    with pytest.raises(CodecFormatError, match=rf"{path} is not a \.nemo archive"):
        NanoCodec.load(path)


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(CodecNotFoundError, match=rf"codec path {tmp_path / 'nope.nemo'} does not exist.*GEPARD_CODEC"):
        NanoCodec.load(tmp_path / "nope.nemo")
    with pytest.raises(CodecNotFoundError, match=r"holds neither model_config\.yaml \+ model_weights\.ckpt nor exactly one \.nemo"):
        NanoCodec.load(tmp_path)


def test_hf_repo_offline_gives_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # read once at import
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.chdir(tmp_path)  # so the id is not a relative path by accident
    repo = "nvidia/nemo-nano-codec-22khz-1.89kbps-21.5fps"
    with pytest.raises(CodecNotFoundError) as info:
        NanoCodec.load(repo)
    assert repo in str(info.value)
    assert "set GEPARD_CODEC to a local .nemo" in str(info.value)
    assert isinstance(info.value, CodecError)


def test_unsupported_dtype_is_rejected(codec_path: Path) -> None:
    with pytest.raises(ValueError, match="dtype must be one of"):
        NanoCodec.load(codec_path, dtype=torch.float64)


# ---- decode ------------------------------------------------------------------------------------


@pytest.mark.parametrize("frames", [1, 7])
def test_decode_length_is_1024_per_frame(codec: NanoCodec, frames: int) -> None:
    audio = codec.decode_codes(random_codes(frames, batch=2, seed=frames))
    assert audio.shape == (2, 1024 * frames) and audio.dtype == torch.float32
    assert float(audio.abs().max()) <= 1.0


def test_decoded_audio_is_neither_silent_nor_clipped(codec: NanoCodec) -> None:
    audio = codec.decode_codes(random_codes(20, batch=1, seed=2))
    assert float(audio.std()) > 1e-3
    assert float((audio.abs() >= 1.0).float().mean()) < 0.01


def test_lengths_mask_the_tail_and_leave_the_rest(codec: NanoCodec) -> None:
    codes = random_codes(12, batch=2, seed=3)
    full = codec.decode_codes(codes)
    masked = codec.decode_codes(codes, lengths=[12, 5])
    assert torch.equal(masked[0], full[0])
    assert torch.all(masked[1, 5 * 1024 :] == 0)
    alone = codec.decode_codes(codes[1:, :, :5])[0]
    assert float((masked[1, : 5 * 1024] - alone).abs().max()) <= 1e-6


def test_decode_latents_equals_decode_codes(codec: NanoCodec) -> None:
    codes = random_codes(6, batch=1, seed=4)
    assert torch.equal(codec.decode_latents(fsq.dequantize(codes)), codec.decode_codes(codes))


@pytest.mark.parametrize(
    ("codes", "message"),
    [
        (torch.zeros(1, 32, 4), r"expected integer codes \[B, 32, T\], got dtype torch\.float32"),
        (torch.zeros(32, 4, dtype=torch.long), r"expected codes \[B, 32, T\], got shape \(32, 4\)"),
        (torch.zeros(1, 8, 4, dtype=torch.long), r"got shape \(1, 8, 4\)"),
        (torch.zeros(1, 32, 0, dtype=torch.long), r"at least one item and one frame"),
        ([[0] * 4] * 32, r"expected codes as a torch\.Tensor"),
    ],
)
def test_bad_codes_are_rejected(codec: NanoCodec, codes: Any, message: str) -> None:
    with pytest.raises(InvalidCodesError, match=message):
        codec.decode_codes(codes)


def test_out_of_range_code_names_item_channel_frame(codec: NanoCodec) -> None:
    codes = random_codes(5, batch=2, seed=5)
    codes[1, 6, 3] = 6  # channel 6 has 6 levels: 0..5
    with pytest.raises(InvalidCodesError, match=r"code 6 out of range \[0, 6\) at item 1, channel 6, frame 3"):
        codec.decode_codes(codes)
    codes[1, 6, 3] = -1
    with pytest.raises(InvalidCodesError, match=r"code -1 out of range"):
        codec.decode_codes(codes)


@pytest.mark.parametrize(("lengths", "message"), [([3], r"expected lengths as 2 ints"), ([3, 9], r"length 9 of item 1 is outside \[0, 5\] frames")])
def test_bad_lengths_are_rejected(codec: NanoCodec, lengths: list[int], message: str) -> None:
    with pytest.raises(InvalidCodesError, match=message):
        codec.decode_codes(random_codes(5, batch=2), lengths=lengths)


def test_bad_latents_are_rejected(codec: NanoCodec) -> None:
    with pytest.raises(InvalidCodesError, match=r"expected latents \[B, 32, T>0\]"):
        codec.decode_latents(torch.zeros(1, 31, 2))
    with pytest.raises(InvalidCodesError, match="NaN"):
        codec.decode_latents(torch.full((1, 32, 2), float("nan")))


def test_bfloat16_decode_is_close_to_float32(codec: NanoCodec, codec_path: Path) -> None:
    half = NanoCodec.load(codec_path, dtype=torch.bfloat16)
    assert half.fingerprint == codec.fingerprint
    codes = random_codes(4, batch=1, seed=6)
    audio = half.decode_codes(codes)
    assert audio.dtype == torch.float32
    reference = codec.decode_codes(codes)
    assert float((audio - reference).abs().max()) < 0.1 * float(reference.abs().max()) + 1e-3


# ---- encode ------------------------------------------------------------------------------------


def test_encode_one_second_gives_ceil_frames_in_range(codec: NanoCodec) -> None:
    audio = torch.randn(1, 22050, generator=torch.Generator().manual_seed(0)) * 0.1
    codes = codec.encode(audio)
    assert codes.shape == (1, 32, math.ceil(22050 / 1024)) and codes.dtype == torch.int64
    fsq.validate_codes(codes)
    assert len({tuple(codes[0, :, t].tolist()) for t in range(codes.shape[2])}) > 1  # not a constant
    # the codes decode back to audio of the padded length
    assert codec.decode_codes(codes).shape == (1, 22 * 1024)


def test_a_codec_whose_decoder_is_released_still_encodes_the_same_codes(codec: NanoCodec, codec_path: Path) -> None:
    from codec_worker.errors import DecodeUnavailableError

    encoder_only = NanoCodec.load(codec_path)
    assert encoder_only.can_decode
    encoder_only.release_decoder()
    assert not encoder_only.can_decode and encoder_only._decoder is None  # nothing holds its weights
    audio = torch.randn(1, 5000, generator=torch.Generator().manual_seed(3)) * 0.1
    assert torch.equal(encoder_only.encode(audio), codec.encode(audio))
    with pytest.raises(DecodeUnavailableError, match="decoder was released"):
        encoder_only.decode_codes(random_codes(3, batch=1))
    assert encoder_only.receptive_field_frames == codec.receptive_field_frames  # from the config, still known


def test_encode_accepts_numpy_and_short_clips(codec: NanoCodec) -> None:
    assert codec.encode(np.full((1, 1), 0.1, dtype=np.float32)).shape == (1, 32, 1)
    assert codec.encode(np.zeros((2, 1025), dtype=np.float64)).shape == (2, 32, 2)


def test_encode_batch_with_lengths_matches_each_alone(codec: NanoCodec) -> None:
    generator = torch.Generator().manual_seed(1)
    audio = torch.randn(2, 4096, generator=generator) * 0.1
    codes = codec.encode(audio, lengths=[4096, 2048])
    assert torch.equal(codes[0], codec.encode(audio[:1])[0])
    assert torch.all(fsq.fold(codes[1, :, 2:]) == 0)  # frames past the length hold packed code 0
    fsq.validate_codes(codes)


@pytest.mark.parametrize(
    ("audio", "message"),
    [
        (torch.zeros(100), r"expected audio \[B, N>0\], got shape \(100,\)"),
        (torch.zeros(1, 0), r"got shape \(1, 0\)"),
        (torch.zeros(1, 100, dtype=torch.int16), r"expected float audio"),
        (torch.full((1, 10), float("nan")), r"NaN or infinite"),
        ("noise", r"expected audio as a tensor or array"),
    ],
)
def test_bad_audio_is_rejected(codec: NanoCodec, audio: Any, message: str) -> None:
    with pytest.raises(InvalidAudioError, match=message):
        codec.encode(audio)
