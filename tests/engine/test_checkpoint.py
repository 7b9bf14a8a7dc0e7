import json
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.checkpoint import expected_shapes, resolve_model_dir
from engine.config import GepardConfig
from engine.errors import CheckpointError
from engine.model.gepard import GepardModel

# The published tensor-name patterns (spec section 1.5), independent of the code under test.
PUBLISHED_PATTERNS = [
    r"model\.embed_tokens\.weight",
    r"model\.norm\.weight",
    r"model\.layers\.\d+\.self_attn\.(q|k|v|o)_proj\.weight",
    r"model\.layers\.\d+\.self_attn\.(q|k)_norm\.weight",
    r"model\.layers\.\d+\.mlp\.(gate|up|down)_proj\.weight",
    r"model\.layers\.\d+\.(input|post_attention)_layernorm\.weight",
    r"audio_embeddings\.\d+\.weight",
    r"audio_embed_proj\.[02]\.(weight|bias)",
    r"audio_embed_scale",
    r"codebook_heads\.\d+\.(weight|bias)",
    r"stop_head\.(weight|bias)",
    r"null_prefix",
    r"ref_compressor\.input_proj\.(weight|bias)",
    r"ref_compressor\.queries",
    r"ref_compressor\.blocks\.\d+\.norm_(self|cross|ffn)\.weight",
    r"ref_compressor\.blocks\.\d+\.(self|cross)_attn\.(q|k|v|out)_proj\.weight",
    r"ref_compressor\.blocks\.\d+\.ffn\.(gate|up|down)_proj\.weight",
    r"ref_compressor\.final_norm\.weight",
    r"ref_compressor\.output_scale",
]


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_tiny_checkpoint_has_exactly_the_published_tensor_names(tiny_gepard_dir):
    names = set(load_file(str(tiny_gepard_dir / "model.safetensors")))
    cfg = GepardConfig.from_dir(tiny_gepard_dir)
    assert names == set(expected_shapes(cfg))
    for name in names:
        assert any(re.fullmatch(p, name) for p in PUBLISHED_PATTERNS), name
    for p in PUBLISHED_PATTERNS:
        assert any(re.fullmatch(p, n) for n in names), p
    # counts from the spec: 32 embeddings/heads, layers from the config, 2 compressor blocks
    assert sum(n.startswith("codebook_heads.") for n in names) == 64
    assert sum(n.startswith("audio_embeddings.") for n in names) == 32
    assert {n.split(".")[2] for n in names if n.startswith("model.layers.")} == {str(i) for i in range(cfg.backbone.num_hidden_layers)}


def test_published_scalars_are_zero_dim_and_load(tiny_gepard_dir, tiny_model):
    tensors = load_file(str(tiny_gepard_dir / "model.safetensors"))
    assert tensors["audio_embed_scale"].dim() == 0
    assert tensors["ref_compressor.output_scale"].dim() == 0
    assert tiny_model.frame_embedder.audio_embed_scale.shape == (1,)


@pytest.mark.parametrize("name", ["stop_head.weight", "model.layers.1.mlp.down_proj.weight", "audio_embeddings.31.weight"])
def test_missing_tensor_is_named(tiny_gepard_dir, tmp_path, name):
    d = _copy(tiny_gepard_dir, tmp_path / "ckpt")
    tensors = load_file(str(d / "model.safetensors"))
    del tensors[name]
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match=re.escape(name)):
        GepardModel.from_pretrained(d)


def test_wrong_shape_is_named_with_both_shapes(tiny_gepard_dir, tmp_path):
    d = _copy(tiny_gepard_dir, tmp_path / "ckpt")
    tensors = load_file(str(d / "model.safetensors"))
    tensors["codebook_heads.3.weight"] = torch.zeros(7, tensors["codebook_heads.3.weight"].shape[1])
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"codebook_heads\.3\.weight has shape \[7, 96\], expected \[6, 96\]"):
        GepardModel.from_pretrained(d)


def test_extra_layer_beyond_config_is_an_error(tiny_gepard_dir, tmp_path):
    d = _copy(tiny_gepard_dir, tmp_path / "ckpt")
    tensors = load_file(str(d / "model.safetensors"))
    tensors["model.layers.7.input_layernorm.weight"] = torch.zeros(96)
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match="beyond num_hidden_layers"):
        GepardModel.from_pretrained(d)


def test_training_only_tensors_are_ignored(tiny_gepard_dir, tmp_path):
    d = _copy(tiny_gepard_dir, tmp_path / "ckpt")
    tensors = load_file(str(d / "model.safetensors"))
    tensors["supcon_head.fc1.weight"] = torch.zeros(4, 4)
    save_file(tensors, str(d / "model.safetensors"))
    GepardModel.from_pretrained(d)


def test_bad_json_is_reported_with_the_file(tiny_gepard_dir, tmp_path):
    d = _copy(tiny_gepard_dir, tmp_path / "ckpt")
    (d / "gepard_config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="gepard_config.json is not valid JSON"):
        GepardModel.from_pretrained(d)


def test_corrupt_safetensors_is_reported(tiny_gepard_dir, tmp_path):
    d = _copy(tiny_gepard_dir, tmp_path / "ckpt")
    (d / "model.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(CheckpointError, match="cannot read"):
        GepardModel.from_pretrained(d)


def test_missing_tokenizer_is_reported(tiny_gepard_dir, tmp_path):
    d = _copy(tiny_gepard_dir, tmp_path / "ckpt")
    (d / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        GepardModel.from_pretrained(d)


def test_offline_repo_id_names_the_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(CheckpointError, match="GEPARD_MODEL"):
        resolve_model_dir("nineninesix/gepard-1.0")


def test_directory_without_gepard_config_is_rejected(tmp_path):
    with pytest.raises(CheckpointError, match="not a Gepard checkpoint"):
        resolve_model_dir(tmp_path)


def test_config_json_is_a_plain_qwen3_5_text_config(tiny_gepard_dir):
    raw = json.loads((tiny_gepard_dir / "config.json").read_text())
    assert raw["model_type"] == "qwen3_5_text"
    assert raw["rope_parameters"]["partial_rotary_factor"] == 1.0
