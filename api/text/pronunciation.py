"""Pronunciation dictionaries applied to a transcript before normalisation, with the alignment kept.

    prons = compile_pronunciations(dictionary.items)       # cached per item list
    normalized = normalize_pronounced(text, "en", "auto", prons)

Matching. Each entry's ``text`` matches whole words only: a key that starts (ends) with a word
character must not be preceded (followed) by one, so "SQL" matches in "(SQL)," but not in
"MySQL" or "SQLite". A key that starts (ends) with a symbol must not be preceded (followed) by
another symbol, bar opening (closing) punctuation and the word breaks "-" and "/": "C++" matches in
"C++." and "(C++)" but not in "C+++". Whitespace inside a key matches any run of whitespace ("New York" also
matches "New\\nYork"). Where keys overlap, the longest wins, then the one listed first. An entry is
case-insensitive unless ``case_sensitive`` is true; then it matches as written, plus its
sentence-start capitalisation when it starts in lower case (Cartesia's rule).

Case. The alias is written as listed when the match is spelled like the key; otherwise it takes
the match's case: ALL CAPS -> ALIAS IN CAPS, Capitalised -> Capitalised alias, lower -> lower.

Alignment. Substitution keeps a map from the substituted text back to the client's text, so the
normalised words of a replacement belong to the original token where the replaced text started.
The returned ``NormalizedText`` lists the client's own whitespace tokens as ``original_words``
(what word timestamps report by default) and the spoken words as ``normalized_words``
(``use_normalized_timestamps``); a token that a multi-word key absorbed gets no words, as a
currency code read together with its amount does in ``normalize``.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Protocol, Sequence

from api.text.normalization import NormalizedText, WordAlignment, normalize

__all__ = ["Pronunciations", "Substitution", "apply_pronunciations", "compile_pronunciations", "normalize_pronounced"]


class Entry(Protocol):
    """One sounds-like entry (``voices.dictionaries.PronunciationItem`` has this shape)."""

    @property
    def text(self) -> str: ...
    @property
    def alias(self) -> str: ...
    @property
    def case_sensitive(self) -> Optional[bool]: ...


@dataclass(frozen=True, slots=True)
class Pronunciations:
    """A compiled dictionary: one regex whose group ``e<i>`` is entry i."""

    pattern: Optional[re.Pattern[str]]
    entries: tuple[tuple[str, str], ...]  # (key, alias) per group index

    @property
    def empty(self) -> bool:
        return self.pattern is None


@dataclass(frozen=True, slots=True)
class Substitution:
    """``text`` after replacement; ``spans`` = (orig_start, orig_end, new_start, new_end) per replacement."""

    original: str
    text: str
    spans: tuple[tuple[int, int, int, int], ...]

    def to_original(self, pos: int) -> int:
        """Offset in ``original`` of the character at ``pos`` in ``text`` (inside a replacement:
        where the replaced text starts)."""
        shift = 0
        for o_start, o_end, n_start, n_end in self.spans:
            if pos < n_start:
                break
            if pos < n_end:
                return o_start
            shift = o_end - n_end
        return pos + shift


# What may touch a key's symbol edge (see the module docstring): a key "C++" must not match the
# start of "C+++", yet "C++." ends a sentence and "(C#)" is bracketed. Word characters may touch
# it too, as they always could ("$5", "C++11").
_OPEN = "\"'([{¿¡«“‘„‹-–—/"
_CLOSE = "\"'.,;:!?)]}»”’›…-–—/"


def _body(key: str) -> str:
    return r"\s+".join(re.escape(part) for part in key.split())


def _alternative(key: str, case_sensitive: bool) -> str:
    if not case_sensitive:
        body = f"(?i:{_body(key)})"
    elif key[0].upper() != key[0]:  # lower-case start: its sentence-start capitalisation matches too
        body = f"(?:{_body(key)}|{_body(key[0].upper() + key[1:])})"
    else:
        body = _body(key)
    lead = r"(?<!\w)" if re.match(r"\w", key[0]) else rf"(?<![^\w\s{re.escape(_OPEN)}])"
    trail = r"(?!\w)" if re.match(r"\w", key[-1]) else rf"(?![^\w\s{re.escape(_CLOSE)}])"
    return lead + body + trail


@lru_cache(maxsize=128)
def _compile(items: tuple[tuple[str, str, bool], ...]) -> Pronunciations:
    if not items:
        return Pronunciations(None, ())
    # longest key first, so at one position the longest entry wins; ties keep their listed order
    order = sorted(range(len(items)), key=lambda i: -len(items[i][0]))
    parts = [f"(?P<e{i}>{_alternative(items[i][0], items[i][2])})" for i in order]
    return Pronunciations(re.compile("|".join(parts)), tuple((k, a) for k, a, _ in items))


def compile_pronunciations(items: Sequence[Entry]) -> Pronunciations:
    """Compile a dictionary's entries (cached on their values: an unchanged dictionary is free)."""
    return _compile(tuple((i.text.strip(), i.alias.strip(), bool(i.case_sensitive)) for i in items if i.text.strip()))


def _match_case(alias: str, matched: str, key: str) -> str:
    if matched == key:
        return alias
    letters = [c for c in matched if c.isalpha()]
    if len(letters) > 1 and all(c.isupper() for c in letters):
        return alias.upper()
    if matched[:1].isupper():
        return alias[:1].upper() + alias[1:]
    if letters and all(c.islower() for c in letters):
        return alias.lower()
    return alias


def apply_pronunciations(text: str, prons: Optional[Pronunciations]) -> Substitution:
    """Replace every dictionary key in ``text`` by its alias (see the module docstring)."""
    if prons is None or prons.pattern is None:
        return Substitution(text, text, ())
    out: list[str] = []
    spans: list[tuple[int, int, int, int]] = []
    pos = new_len = 0
    for m in prons.pattern.finditer(text):
        key, alias = prons.entries[int(m.lastgroup[1:])]  # type: ignore[index]
        replacement = _match_case(alias, m.group(), key)
        out.append(text[pos:m.start()])
        new_len += m.start() - pos
        spans.append((m.start(), m.end(), new_len, new_len + len(replacement)))
        out.append(replacement)
        new_len += len(replacement)
        pos = m.end()
    if not spans:
        return Substitution(text, text, ())
    out.append(text[pos:])
    return Substitution(text, "".join(out), tuple(spans))


def normalize_pronounced(text: str, language: Optional[str], mode: object,
                         prons: Optional[Pronunciations]) -> NormalizedText:
    """``normalize`` of ``text`` after the dictionary, aligned to the client's own tokens."""
    sub = apply_pronunciations(text, prons)
    if not sub.spans:
        return normalize(text, language, mode)
    spoken = normalize(sub.text, language, mode)
    tokens = list(re.finditer(r"\S+", text))
    starts = [m.start() for m in tokens]
    words: list[list[str]] = [[] for _ in tokens]
    for entry in spoken.alignment:
        # the substituted token's first character, in the client's text: always inside a token
        # (keys and aliases are stripped, and text outside replacements is unchanged)
        index = bisect.bisect_right(starts, sub.to_original(entry.start_char)) - 1
        words[max(index, 0)].extend(entry.normalized)
    alignment = tuple(WordAlignment(m.group(), tuple(w), m.start()) for m, w in zip(tokens, words))
    return NormalizedText(text, spoken.text, spoken.language, alignment)
