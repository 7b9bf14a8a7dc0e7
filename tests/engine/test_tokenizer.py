"""TextTokenizer: client text is plain text and can never become one of the checkpoint's added tokens."""

from pathlib import Path

import pytest
from tokenizers import AddedToken, Tokenizer

from engine.config import GepardConfig
from engine.prompt import build_text_ids
from engine.tiny import SPECIAL_NAMES
from engine.tokenizer import TOKENIZER_FILE, TextTokenizer

# Qwen's chat markers are special added tokens; "<think>" and "<tool_call>" are added as non-special.
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_PLAIN = ["<think>", "</think>", "<tool_call>"]


@pytest.fixture(scope="module")
def qwen_like_dir(tiny_gepard_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny tokenizer plus Qwen-style added tokens, special and not."""
    tok = Tokenizer.from_file(str(tiny_gepard_dir / TOKENIZER_FILE))
    tok.add_special_tokens(QWEN_SPECIAL)
    tok.add_tokens([AddedToken(t, special=False) for t in QWEN_PLAIN])
    out = tmp_path_factory.mktemp("qwen-like")
    tok.save(str(out / TOKENIZER_FILE))
    return out


def _added_ids(model_dir: Path) -> dict[int, str]:
    tok = Tokenizer.from_file(str(model_dir / TOKENIZER_FILE))
    return {i: t.content for i, t in tok.get_added_tokens_decoder().items()}


@pytest.mark.parametrize("marker", SPECIAL_NAMES)
def test_gepard_markers_in_text_are_plain_text(tiny_gepard_dir, marker):
    tok = TextTokenizer(tiny_gepard_dir)
    added = _added_ids(tiny_gepard_dir)
    ids = tok.encode(f"Hello {marker} world")
    assert not set(ids) & set(added), f"{marker!r} became a control token"
    assert tok.decode(ids) == f"Hello {marker} world"
    # ordinary text around it is tokenised exactly as without the marker
    assert ids[: len(tok.encode("Hello "))] == tok.encode("Hello ")


@pytest.mark.parametrize("marker", QWEN_SPECIAL + QWEN_PLAIN)
def test_llm_markers_special_or_not_are_plain_text(qwen_like_dir, marker):
    tok = TextTokenizer(qwen_like_dir)
    added = _added_ids(qwen_like_dir)
    ids = tok.encode(f"Sure.{marker} Bye")
    assert not set(ids) & set(added), f"{marker!r} became an added token"
    assert tok.decode(ids) == f"Sure.{marker} Bye"
    assert tok.vocab_size == Tokenizer.from_file(str(qwen_like_dir / TOKENIZER_FILE)).get_vocab_size()


def test_prompt_markers_still_come_from_the_config_ids(tiny_gepard_dir):
    tok = TextTokenizer(tiny_gepard_dir)
    cfg = GepardConfig.from_dir(tiny_gepard_dir)
    sp = cfg.special_tokens
    ids = build_text_ids(tok.encode("Hi <|audio_start|> <tts_text_eod>"), sp, cfg.text_repetition)
    assert ids[-1] == sp.start_of_speech and ids.count(sp.start_of_speech) == 1
    assert ids.count(sp.end_of_text) == ids.count(sp.start_of_text)
    # the ids the config names are the tokenizer's own markers
    assert tok.decode([sp.start_of_speech]) == "<|audio_start|>"
    assert tok.decode([sp.end_of_text]) == "<tts_text_eod>"
