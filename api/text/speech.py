"""What in a text is there to be spoken.

A transcript of whitespace, zero-width and control characters only (``"\\u200b"``, a BOM, NUL) is
blank: the HTTP routes answer it as they answer ``" "`` (400 ``empty_transcript``). A segment with
no letter or digit (``"..."``, ``'"'``, ``":)"``, an emoji) has nothing the model can read: given
such a prompt Gepard voices arbitrary audio for seconds (docs/gepard-model.md), so it gets no engine
request. That is common in practice: an LLM reply that ends in an emoji, or a closing quote that
streams in after its sentence was cut, arrives as a segment of its own.
"""

from __future__ import annotations

import unicodedata

# Cc: control characters (NUL, ESC, DEL...); Cf: format characters (zero-width space and joiners,
# BOM, bidi marks). Neither is visible nor spoken.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf"})


def is_blank(text: str) -> bool:
    """True when ``text`` holds nothing but whitespace, control and format characters."""
    return all(ch.isspace() or unicodedata.category(ch) in _INVISIBLE_CATEGORIES for ch in text)


def has_speech(text: str) -> bool:
    """True when ``text`` has a letter or a digit, in any script, for the model to read."""
    return any(ch.isalnum() for ch in text)
