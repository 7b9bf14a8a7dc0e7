import pytest
import torch

from engine.config import TextRepetitionConfig
from engine.errors import InvalidRequestError
from engine.prompt import adaptive_max_frames, build_text_ids, repetition_count, uncond_text_ids
from engine.requests import CfgUncondMode


@pytest.mark.parametrize("n,expected", [(1, 8), (2, 8), (3, 6), (4, 4), (6, 3), (10, 2), (12, 2), (13, 1), (20, 1)])
def test_repetition_counts_match_the_spec(n, expected):
    assert repetition_count(n, TextRepetitionConfig()) == expected


def test_repetition_disabled_means_one_copy():
    assert repetition_count(2, TextRepetitionConfig(enabled=False)) == 1


def test_layout_only_last_copy_carries_sos(tiny_model):
    sp = tiny_model.config.special_tokens
    ids = build_text_ids([11, 12, 13], sp, TextRepetitionConfig())  # n=3 -> R=6
    block = [sp.start_of_text, 11, 12, 13, sp.end_of_text]
    assert ids == block * 6 + [sp.start_of_speech]
    assert ids.count(sp.start_of_speech) == 1


def test_empty_text_is_rejected(tiny_model):
    with pytest.raises(InvalidRequestError, match="empty"):
        build_text_ids([], tiny_model.config.special_tokens, TextRepetitionConfig())


def test_prompt_embeds_are_prefix_then_text(tiny_model):
    sp = tiny_model.config.special_tokens
    ids = build_text_ids([20, 21], sp, TextRepetitionConfig())
    embeds = tiny_model.prompt_embeds(ids, None)
    k = tiny_model.config.prefix_length
    assert embeds.shape == (k + len(ids), tiny_model.config.hidden_size)
    assert torch.equal(embeds[:k], tiny_model.null_prefix)
    assert torch.equal(embeds[k:], tiny_model.backbone.embed_tokens(torch.tensor(ids)))
    custom = torch.randn(k, tiny_model.config.hidden_size)
    assert torch.equal(tiny_model.prompt_embeds(ids, custom)[:k], custom)


def test_uncond_branches(tiny_model):
    sp = tiny_model.config.special_tokens
    assert uncond_text_ids(sp, CfgUncondMode.EMPTY_TEXT) == [sp.start_of_text, sp.end_of_text, sp.start_of_speech]
    assert uncond_text_ids(sp, CfgUncondMode.AUDIO_ONLY) == [sp.start_of_speech]


def test_adaptive_cap_grows_with_text_and_is_bounded():
    short = adaptive_max_frames("Hi.", 21.53)
    long = adaptive_max_frames(" ".join(["word"] * 50), 21.53)
    assert short == 95  # ceil(4 * (0.7 + 0.4 * 1 word) * 21.53)
    assert adaptive_max_frames("Hi.", 21.53, factor=1.0) == 80  # the floor
    assert short < long <= 2000
    assert adaptive_max_frames(" ".join(["word"] * 1000), 21.53) == 2000
