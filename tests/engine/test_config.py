import json
import random

import pytest

from engine.config import GepardConfig, parse_audio_heads
from engine.errors import CheckpointError


def test_audio_heads_follow_numeric_suffix_not_lexicographic_order():
    levels = [8, 7, 6, 6] * 8
    items = [(f"level_audio_{k}", level) for k, level in enumerate(levels)]
    random.Random(1).shuffle(items)
    # lexicographic order would put level_audio_10 right after level_audio_1
    assert parse_audio_heads(dict(sorted(items))) == tuple(levels)
    assert parse_audio_heads(dict(items)) == tuple(levels)


def test_audio_heads_reject_gaps_and_bad_keys():
    with pytest.raises(CheckpointError, match="indices"):
        parse_audio_heads({"level_audio_0": 8, "level_audio_2": 6})
    with pytest.raises(CheckpointError, match="unexpected key"):
        parse_audio_heads({"level_0": 8})


def test_tiny_config_parses_with_upstream_boilerplate(tiny_gepard_dir):
    raw = json.loads((tiny_gepard_dir / "gepard_config.json").read_text())
    assert "id2label" in raw and "return_dict" in raw["backbone_config"]  # upstream writes these
    cfg = GepardConfig.from_dir(tiny_gepard_dir)
    assert cfg.num_channels == 32
    assert cfg.backbone.partial_rotary_factor == 1.0
    assert cfg.backbone.rotary_dim == cfg.backbone.head_dim
    assert cfg.special_tokens.start_of_speech == cfg.special_tokens.tokeniser_length - 7


def test_gepard_level_partial_rotary_factor_wins_over_stale_backbone_value(tiny_gepard_dir):
    raw = json.loads((tiny_gepard_dir / "gepard_config.json").read_text())
    bb = dict(raw["backbone_config"], partial_rotary_factor=0.25)
    bb["rope_parameters"] = dict(bb["rope_parameters"], partial_rotary_factor=0.25)
    cfg = GepardConfig.from_dict(raw, bb)
    assert cfg.backbone.partial_rotary_factor == 1.0


def test_linear_attention_layers_are_rejected(tiny_gepard_dir):
    raw = json.loads((tiny_gepard_dir / "gepard_config.json").read_text())
    bb = dict(raw["backbone_config"], layer_types=["linear_attention", "full_attention"])
    with pytest.raises(CheckpointError, match="linear_attention"):
        GepardConfig.from_dict(raw, bb)


def test_missing_key_names_the_source(tiny_gepard_dir):
    raw = json.loads((tiny_gepard_dir / "gepard_config.json").read_text())
    del raw["special_tokens"]
    with pytest.raises(CheckpointError, match="special_tokens"):
        GepardConfig.from_dict(raw, raw["backbone_config"], source="x/gepard_config.json")
