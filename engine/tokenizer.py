"""The checkpoint's text tokenizer (``tokenizer.json``, Qwen3.5 byte-level BPE in the real model).

Text is encoded without special tokens and without any language tag or normalisation (spec 1.4);
the prompt builder adds Gepard's own markers.
"""

from __future__ import annotations

from pathlib import Path

from engine.errors import CheckpointError

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

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)
