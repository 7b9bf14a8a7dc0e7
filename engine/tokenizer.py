"""The checkpoint's text tokenizer (``tokenizer.json``, Qwen3.5 byte-level BPE in the real model).

Text is encoded without special tokens and without any language tag or normalisation (spec 1.4);
the prompt builder adds Gepard's own markers by id. Text is always plain text: a transcript (or an
LLM's output) that contains "<|audio_start|>", "<|im_end|>" or "<think>" gets those characters'
ordinary BPE tokens, never the checkpoint's added token, so it cannot inject control tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import CheckpointError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

TOKENIZER_FILE = "tokenizer.json"


class TextTokenizer:
    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer

        path = model_dir / TOKENIZER_FILE
        if not path.exists():
            raise CheckpointError(f"missing {TOKENIZER_FILE} in {model_dir}")
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # the tokenizers library raises plain Exceptions
            raise CheckpointError(f"cannot load {path}: {exc}") from None
        self._text_tok = _plain_text_tokenizer(self._tok)

    def encode(self, text: str) -> list[int]:
        return self._text_tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)


def _plain_text_tokenizer(tok: Tokenizer) -> Tokenizer:
    """A copy of ``tok`` that reads every added token's string as ordinary text.

    ``add_special_tokens=False`` only skips the post-processor's template; the added-token strings
    in the text are still matched. ``encode_special_tokens`` stops that for *special* added tokens
    only, and Qwen's "<think>" or "<tool_call>" are added as non-special, so the copy drops the
    added-token table altogether (their ids lie outside the BPE vocabulary, which is kept whole).
    """
    from tokenizers import Tokenizer

    spec = json.loads(tok.to_str())
    spec["added_tokens"] = []
    return Tokenizer.from_str(json.dumps(spec))
