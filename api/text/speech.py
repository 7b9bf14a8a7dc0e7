"""What in a text is there to be spoken.

A transcript of whitespace, zero-width and control characters only (``"\\u200b"``, a BOM, NUL) is
blank: the HTTP routes answer it as they answer ``" "`` (400 ``empty_transcript``). A segment with
no letter or digit (``"..."``, ``'"'``, ``":)"``, an emoji) has nothing the model can read: given
such a prompt Gepard voices arbitrary audio for seconds (docs/gepard-model.md), so it gets no engine
request. That is common in practice: an LLM reply that ends in an emoji, or a closing quote that
streams in after its sentence was cut, arrives as a segment of its own.

Inside a sentence, emoji and other pictographic symbols ("Great choice! 😊 Let's start 🚀",
"✅ Confirmed") are not read either (``without_pictographs``): the model learnt to speak from
transcripts, which have none, so it has no reading for them.
"""

from __future__ import annotations

import re
import unicodedata

# Cc: control characters (NUL, ESC, DEL...); Cf: format characters (zero-width space and joiners,
# BOM, bidi marks). Neither is visible nor spoken.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf"})
# Symbols of category "So" the normaliser reads as units ("30°C"): not pictographs
_READ_SYMBOLS = frozenset("°℃℉")
# What joins and dresses emoji: the zero-width joiner, the variation selectors (text or emoji
# style), the keycap ("1️⃣") and the skin tones
_EMOJI_PARTS = frozenset({0x200D, 0xFE0E, 0xFE0F, 0x20E3, *range(0x1F3FB, 0x1F400)})
_CLOSING_PUNCTUATION = frozenset(".,;:!?…)]}\"'”’»")
# a rating's star: "4.8★", "5⭐", or a star alone after a number ("4.8 ★")
_RATED_RE = re.compile(r"[(\[]?(?P<number>\d+(?:[.,]\d+)?)?[★⭐][.,;:!?)\]]*")


def is_blank(text: str) -> bool:
    """True when ``text`` holds nothing but whitespace, control and format characters."""
    return all(ch.isspace() or unicodedata.category(ch) in _INVISIBLE_CATEGORIES for ch in text)


def is_pictograph(ch: str) -> bool:
    """An emoji, a pictographic symbol ("✅", "★", "™", "→" is none: category Sm) or a part that
    builds one (a joiner, a variation selector, a skin tone, an emoji tag)."""
    code = ord(ch)
    return ((unicodedata.category(ch) == "So" and ch not in _READ_SYMBOLS) or code in _EMOJI_PARTS
            or 0xE0020 <= code <= 0xE007F)


def without_pictographs(words: list[str], keep_rating_stars: bool = False) -> list[str]:
    """``words`` (a text's whitespace-separated tokens) with the pictographs taken out
    ("started🚀" -> "started", "😊" -> ""). A token left with closing punctuation only ("😊.")
    gives it to the last word before it that kept any, so its sentence keeps its end: ["love",
    "it", "😊."] -> ["love", "it.", ""]. ``keep_rating_stars``: a star right after a number stays,
    as a rating's unit the normaliser reads ("4.8★" -> "4.8★", "4.8 ⭐️" -> "4.8 ⭐")."""
    out: list[str] = []
    for word in words:
        if word.isascii() or not any(map(is_pictograph, word)):  # most words: nothing to look at
            out.append(word)
            continue
        if keep_rating_stars and (rated := _rating_star(word, out[-1] if out else "")):
            out.append(rated)
            continue
        kept = "".join(ch for ch in word if not is_pictograph(ch))
        if kept and all(ch in _CLOSING_PUNCTUATION for ch in kept):
            before = next((k for k in range(len(out) - 1, -1, -1) if out[k]), None)
            if before is not None:
                out[before] += kept
                kept = ""
        out.append(kept)
    return out


def _rating_star(word: str, before: str) -> str | None:
    """``word`` with its dressing taken out when it is a rating's star: after digits in the same
    word ("4.8★"), or alone after a word that ends in one ("4.8 ★"); None elsewhere."""
    bare = "".join(ch for ch in word if ord(ch) not in _EMOJI_PARTS)  # "⭐️": the star, its selector gone
    m = _RATED_RE.fullmatch(bare)
    if m is None or not (m.group("number") or before.rstrip(".,")[-1:].isdecimal()):
        return None
    return bare


def has_speech(text: str) -> bool:
    """True when ``text`` has a letter or a digit, in any script, for the model to read."""
    return any(ch.isalnum() for ch in text)
