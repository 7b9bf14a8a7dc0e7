"""The random codec writer: published .nemo layout, key names, determinism, CLI."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import pytest
import torch
import yaml

from codec_worker._checkpoint import CodecConfig, build_modules
from codec_worker.tiny import codec_config, main, random_state_dict, write_random_codec

# Key patterns of nvidia/nemo-nano-codec-22khz-1.89kbps-21.5fps model_weights.ckpt.
_CONV = r"\.conv\.(bias|parametrizations\.weight\.original[01])"
_RES = r"res_layers\.\d+\.res_blocks\.\d+\.res_blocks\.\d+"
PUBLISHED_KEY_PATTERNS = {
    "encoder conv": rf"audio_encoder\.(pre_conv|post_conv|down_sample_conv_layers\.\d+|{_RES}\.(input_conv|skip_conv)){_CONV}",
    "decoder conv": rf"audio_decoder\.(pre_conv|post_conv|up_sample_conv_layers\.\d+|{_RES}\.(input_conv|skip_conv)){_CONV}",
    "decoder snake": rf"audio_decoder\.(activations\.\d+|post_activation|{_RES}\.(input_activation|skip_activation))"
    r"\.activation\.snake_act\.alpha",
    "fsq buffer": r"vector_quantizer\.fsqs\.[0-7]\.(dim_base_index|num_levels)",
    "training only": r"discriminator\..+",
}


def _read_nemo(path: Path) -> tuple[list[str], dict, dict[str, torch.Tensor]]:
    with tarfile.open(path) as archive:
        names = archive.getnames()
        config = yaml.safe_load(archive.extractfile("./model_config.yaml").read())
        state = torch.load(io.BytesIO(archive.extractfile("./model_weights.ckpt").read()), weights_only=True)
    return names, config, state


def test_archive_has_the_published_members(codec_path: Path) -> None:
    names, config, state = _read_nemo(codec_path)
    assert sorted(names) == [".", "./model_config.yaml", "./model_weights.ckpt"]
    assert config["target"] == "nemo.collections.tts.models.audio_codec.AudioCodecModel"
    assert all(isinstance(t, torch.Tensor) for t in state.values())
    assert {t.dtype for k, t in state.items() if not k.startswith("vector_quantizer")} == {torch.float32}


def test_config_is_the_published_one_with_narrower_widths(codec_path: Path) -> None:
    _, config, _ = _read_nemo(codec_path)
    published = codec_config("full")
    assert config.keys() == published.keys()
    assert config["sample_rate"] == 22050 and config["samples_per_frame"] == 1024
    for section in ("audio_encoder", "audio_decoder", "vector_quantizer"):
        differing = {k for k in published[section] if config[section][k] != published[section][k]}
        assert differing == ({"base_channels"} if section != "vector_quantizer" else set())
    assert published["audio_decoder"] == {
        "_target_": "nemo.collections.tts.modules.audio_codec_modules.CausalHiFiGANDecoder",
        "up_sample_rates": [8, 8, 4, 2, 2],
        "input_dim": 32,
        "base_channels": 864,
        "activation": "half_snake",
        "output_activation": "clamp",
        "pad_mode": "zeros",
        "n_groups_equal_to_out_channels": True,
    }
    assert published["audio_encoder"]["base_channels"] == 24
    assert published["vector_quantizer"]["num_levels_per_group"] == [8, 7, 6, 6]


def test_state_dict_keys_follow_the_published_patterns(codec_path: Path) -> None:
    _, _, state = _read_nemo(codec_path)
    seen = {name: 0 for name in PUBLISHED_KEY_PATTERNS}
    for key in state:
        matches = [name for name, pattern in PUBLISHED_KEY_PATTERNS.items() if re.fullmatch(pattern, key)]
        assert matches, f"key {key!r} is not in the published layout"
        seen[matches[0]] += 1
    assert all(seen.values()), seen
    assert seen["fsq buffer"] == 16
    assert torch.equal(state["vector_quantizer.fsqs.3.num_levels"].flatten(), torch.tensor([8, 7, 6, 6], dtype=torch.int32))
    assert torch.equal(state["vector_quantizer.fsqs.3.dim_base_index"].flatten(), torch.tensor([1, 8, 56, 336], dtype=torch.int32))


def test_tiny_has_exactly_the_key_names_of_the_full_codec(codec_path: Path) -> None:
    _, _, tiny_state = _read_nemo(codec_path)
    config = CodecConfig.from_mapping(codec_config("full"), "full")
    with torch.device("meta"):  # shapes only, no 60M-parameter init
        full = build_modules(config, sections=("audio_encoder", "audio_decoder"))
    full |= build_modules(config, sections=("vector_quantizer",))  # its init calls .item()
    full_keys = {f"{section}.{key}" for section, module in full.items() for key in module.state_dict()}
    assert {k for k in tiny_state if not k.startswith("discriminator.")} == full_keys
    decoder = full["audio_decoder"].state_dict()
    assert decoder["pre_conv.conv.parametrizations.weight.original1"].shape == (864, 32, 7)
    assert decoder["pre_conv.conv.parametrizations.weight.original0"].shape == (864, 1, 1)
    assert decoder["up_sample_conv_layers.0.conv.parametrizations.weight.original1"].shape == (864, 1, 16)
    assert decoder["post_conv.conv.parametrizations.weight.original1"].shape == (1, 27, 3)
    # ≈126 MB of fp32 decoder weights, as published decoder-only exports
    assert 31_000_000 < sum(t.numel() for t in decoder.values()) < 32_000_000


def test_same_seed_same_weights_other_seed_other_weights(codec_path: Path) -> None:
    _, _, seed0 = _read_nemo(codec_path)
    _, first = random_state_dict("tiny", seed=3)
    _, again = random_state_dict("tiny", seed=3)
    assert first.keys() == again.keys() == seed0.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    key = "audio_decoder.pre_conv.conv.parametrizations.weight.original1"
    assert not torch.equal(first[key], seed0[key])


def test_writer_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    random_state_dict("tiny", seed=0)
    assert torch.equal(torch.rand(3), expected)


def test_cli_writes_a_loadable_codec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from codec_worker.nanocodec import NanoCodec

    out = tmp_path / "sub" / "codec.nemo"
    main([str(out), "--size", "tiny", "--seed", "7"])
    assert capsys.readouterr().out.strip() == str(out)
    codec = NanoCodec.load(out)
    assert codec.samples_per_frame == 1024
    assert [p.name for p in out.parent.iterdir()] == ["codec.nemo"]  # no temporary left behind


def test_unknown_size_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="size must be one of"):
        write_random_codec(tmp_path / "x.nemo", size="huge")  # type: ignore[arg-type]
