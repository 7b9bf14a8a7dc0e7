"""Pronunciation dictionaries applied to a transcript before normalisation, with the alignment kept.

    prons = compile_pronunciations(dictionary.items)       # cached per item list
    normalized = normalize_pronounced(text, "en", "auto", prons)

Matching. Each entry's ``text`` matches whole words only: a key that starts (ends) with a word
character must not be preceded (followed) by one, so "SQL" matches in "(SQL)," but not in
"MySQL" or "SQLite". A key that starts (ends) with a symbol must not be preceded (followed) by
another symbol, bar opening (closing) punctuation and the word breaks "-" and "/": "C++" matches in
"C++." and "(C++)" but not in "C+++". Whitespace inside a key matches any run of whitespace ("New York" also
matches "New\\nYork"). Where keys overlap, the longest wins, then the one listed first. An entry is
case-insensitive unless ``case_sensitive`` is true; then it matches as written, plus, when it starts
in lower case, its capitalised form at a sentence start (Cartesia's rule): at the start of the text,
or after ".", "!", "?" or "…" (closing quotes or brackets may follow it) and whitespace; an opening
quote or bracket may stand before the word. So {"polish": "pahlish"} leaves the second "Polish" of
"Please polish the Polish silver." as written, and says "Pahlish it." for "Polish it."

Equivalent spellings. Keys and the transcript are compared in Unicode NFC, with the typographic
apostrophe "’" read as "'": an entry "café" matches "café" however it is composed, "don't" matches
"don’t". A combining mark that NFC leaves apart belongs to the character before it, so no match ends
before one or starts on one. Offsets and the alignment still refer to the client's own text.

Replacement. The alias replaces the matched text. Where a key has a symbol at its edge, the alias
could touch a word ({"&": "and"} in "R&D"); a space is put between a letter or digit of the alias and
a word character of the text ("R and D", "me at x.com"). The alias is written as listed when the
match is spelled like the key; otherwise it takes the match's case: ALL CAPS -> ALIAS IN CAPS,
Capitalised -> Capitalised alias, lower -> lower.

Cost. A dictionary (up to 1000 entries) is indexed by each key's first unit (a run of word
characters, a run of whitespace, or one other character) in case-folded form, then by its unit count
and whole folded spelling. Applying it splits the text into such units once and, where a unit starts
some key, looks up the keys of each unit count starting there: linear in the text plus the entries
that could match, whatever the dictionary's size (the server does this on its event loop). Case
folding is the one Python's ``re`` uses for IGNORECASE, so the rules above are those of a regex per
entry tried at every position, only cheaper. Compiled dictionaries are cached, least recently used
dropped first, up to 4 million characters of entries (about 11 MiB; 7 dictionaries at the limits).

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
import threading
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from itertools import accumulate
from typing import Generic, Hashable, Mapping, Optional, Protocol, Sequence, TypeVar

from api.text.normalization import NormalizedText, WordAlignment, normalize

__all__ = ["Pronunciations", "SizedLru", "Substitution", "apply_pronunciations", "compile_pronunciations", "entry_chars",
           "normalize_pronounced"]


class Entry(Protocol):
    """One sounds-like entry (``voices.dictionaries.PronunciationItem`` has this shape)."""

    @property
    def text(self) -> str: ...
    @property
    def alias(self) -> str: ...
    @property
    def case_sensitive(self) -> Optional[bool]: ...


@dataclass(frozen=True, slots=True)
class _Form:
    """One spelling an entry matches as: the key in any case (``exact`` None), the key as written
    (``exact``: its units), or its capitalised form at a sentence start (``capital``)."""

    priority: tuple[int, int]  # (-len(key), listed index): the smallest wins at one position
    index: int
    exact: Optional[str]  # the spelling, whitespace runs as one space
    capital: bool
    lead_symbol: bool  # the key starts (ends) with a symbol: the neighbour is checked
    trail_symbol: bool


# first folded unit -> ((unit count, folded spelling -> its forms, best first), ...) by count
_Index = Mapping[str, tuple[tuple[int, Mapping[str, tuple[_Form, ...]]], ...]]


@dataclass(frozen=True, slots=True, eq=False)
class Pronunciations:
    """A compiled dictionary: ``entries`` (key, alias) in listed order, keys in their matching form
    (NFC, "’" as "'"), and the index of their spellings (see "Cost" in the module docstring)."""

    entries: tuple[tuple[str, str], ...]
    index: _Index

    @property
    def empty(self) -> bool:
        return not self.entries


@dataclass(frozen=True, slots=True)
class Substitution:
    """``text`` after replacement; ``spans`` = (orig_start, orig_end, new_start, new_end) per replacement."""

    original: str
    text: str
    spans: tuple[tuple[int, int, int, int], ...]

    def to_original(self, pos: int) -> int:
        """Offset in ``original`` of the character at ``pos`` in ``text`` (inside a replacement:
        where the replaced text starts)."""
        i = bisect.bisect_right(self.spans, pos, key=lambda span: span[2]) - 1
        if i < 0:
            return pos
        o_start, o_end, _, n_end = self.spans[i]
        return o_start if pos < n_end else pos + o_end - n_end


# What may touch a key's symbol edge (see the module docstring): a key "C++" must not match the
# start of "C+++", yet "C++." ends a sentence and "(C#)" is bracketed. Word characters may touch
# it too, as they always could ("$5", "C++11").
_OPEN = frozenset("\"'([{¿¡«“‘„‹-–—/")
_CLOSE = frozenset("\"'.,;:!?)]}»”’›…-–—/")
# A sentence start: text start, or an end mark, closing quotes/brackets and whitespace; then
# opening quotes/brackets before the word.
_SENTENCE_END = frozenset(".!?…")
_SENTENCE_CLOSERS = frozenset("\"')]}»”’›")
_SENTENCE_OPENERS = frozenset("\"'([{«“‘„‹¿¡")

# A unit: a run of word characters, a run of whitespace, or one other character. Units tile any
# text, and a key can only match a whole sequence of the text's units (the boundary rules).
_UNIT = re.compile(r"\w+|\s+|[^\w\s]")


def _is_word(c: str) -> bool:
    return c.isalnum() or c == "_"  # what re's \w is for str


def _is_mark(c: str) -> bool:
    return c >= "\u0300" and unicodedata.category(c)[0] == "M"  # a combining mark


try:  # the case folding of re.IGNORECASE: simple lower case, plus its extra equivalences (ſ ~ s)
    from _sre import unicode_tolower as _tolower  # type: ignore[import-not-found]
    from re._casefix import _EXTRA_CASES  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - other Pythons: str.lower, which agrees bar a few letters
    def _tolower(cp: int) -> int:
        low = chr(cp).lower()
        return ord(low) if len(low) == 1 else cp
    _EXTRA_CASES = {}

class _FoldTable(dict):  # code point -> its case fold, filled in as characters turn up
    def __missing__(self, cp: int) -> int:
        low = _tolower(cp)
        folded = self[cp] = min((low, *_EXTRA_CASES.get(low, ())))
        return folded


_FOLD = _FoldTable()
_SPACES = re.compile(r"\s+")


def _fold(text: str) -> str:
    return text.lower() if text.isascii() else text.translate(_FOLD)


def _fold_unit(unit: str) -> str:
    return " " if unit[0].isspace() else _fold(unit)


def _canonical(text: str) -> str:
    """The form keys and transcripts are compared in: NFC, "’" as "'"."""
    return unicodedata.normalize("NFC", text.replace("’", "'"))


# Starters (combining class 0) that can still compose with what precedes them, or that decompose
# into non-starters: no NFC boundary before them (derived from unicodedata 14.0; a character
# missing here only makes ``_view`` check, and fall back to coarser pieces).
_NO_BOUNDARY_BEFORE = frozenset(
    "\u09be\u09d7\u0b3e\u0b56\u0b57\u0bbe\u0bd7\u0cc2\u0cd5\u0cd6\u0d3e\u0d57\u0dcf\u0ddf\u102e\u1b35"
    "\U00011127\U0001133e\U00011357\U000114b0\U000114ba\U000114bd\U000115af\U00011930"
    "\u0f73\u0f75\u0f81"
    + "".join(map(chr, range(0x1161, 0x1176))) + "".join(map(chr, range(0x11a8, 0x11c3))))


def _view(text: str) -> tuple[str, Optional[list[int]], Optional[list[int]]]:
    """``text`` in its canonical form, with, where that changed its length, the client's start
    and end offset of the piece each character came from (None: offsets are the same)."""
    if text.isascii():
        return text, None, None
    text_ = text.replace("’", "'")  # one character for one: offsets unchanged
    if unicodedata.is_normalized("NFC", text_):
        return text_, None, None
    whole = unicodedata.normalize("NFC", text_)
    for boundary in (lambda c: unicodedata.combining(c) == 0 and c not in _NO_BOUNDARY_BEFORE, str.isascii):
        cuts = [0] + [i for i in range(1, len(text_)) if boundary(text_[i])] + [len(text_)]
        pieces = [unicodedata.normalize("NFC", text_[a:b]) for a, b in zip(cuts, cuts[1:])]
        if "".join(pieces) == whole:
            break
    else:  # pragma: no cover - ASCII never composes with what precedes it
        cuts, pieces = [0, len(text_)], [whole]
    starts: list[int] = []
    ends: list[int] = []
    for a, b, piece in zip(cuts, cuts[1:], pieces):
        if b - a == len(piece):  # unchanged (or one character for one): offsets map one to one
            starts.extend(range(a, b))
            ends.extend(range(a + 1, b + 1))
        else:  # composed or reordered: every character stands for the whole piece
            starts.extend([a] * len(piece))
            ends.extend([b] * len(piece))
    return whole, starts, ends


def _sentence_start(text: str, pos: int) -> bool:
    j = pos
    while j and text[j - 1] in _SENTENCE_OPENERS:
        j -= 1
    k = j
    while k and text[k - 1].isspace():
        k -= 1
    if not k:
        return True
    if k == j:
        return False
    while k and text[k - 1] in _SENTENCE_CLOSERS:
        k -= 1
    return bool(k) and text[k - 1] in _SENTENCE_END


def _compile(items: tuple[tuple[str, str, bool], ...]) -> Pronunciations:
    entries: list[tuple[str, str]] = []
    slots: dict[str, dict[int, dict[str, list[_Form]]]] = {}
    for index, (raw_key, alias, case_sensitive) in enumerate(items):
        key = _canonical(raw_key)
        entries.append((key, alias))
        priority = (-len(key), index)
        lead, trail = not _is_word(key[0]), not _is_word(key[-1])
        spellings = [(key, False)]
        if case_sensitive and key[0].upper() != key[0]:  # lower-case start: capitalised at a sentence start
            spellings.append((key[0].upper() + key[1:], True))
        for spelling, capital in spellings:
            units = _UNIT.findall(spelling)
            exact = _SPACES.sub(" ", spelling) if case_sensitive else None
            slots.setdefault(_fold_unit(units[0]), {}).setdefault(len(units), {}).setdefault(
                _SPACES.sub(" ", _fold(spelling)), []).append(_Form(priority, index, exact, capital, lead, trail))
    index_: dict[str, tuple[tuple[int, Mapping[str, tuple[_Form, ...]]], ...]] = {
        first: tuple((count, {seq: tuple(sorted(forms, key=lambda f: f.priority))
                              for seq, forms in by_seq.items()})
                     for count, by_seq in sorted(by_count.items()))
        for first, by_count in slots.items()}
    return Pronunciations(tuple(entries), index_)


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SizedLru(Generic[K, V]):
    """Values by key, least recently used dropped first once their sizes together pass ``budget``
    (the newest is always kept). Thread-safe: the codec and engine threads never call it, but a
    dictionary may be compiled from a worker thread."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> Optional[V]:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def put(self, key: K, value: V, size: int) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._size -= old[1]
            self._items[key] = (value, size)
            self._size += size
            while self._size > self.budget and len(self._items) > 1:
                _, (_, dropped) = self._items.popitem(last=False)
                self._size -= dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._size = 0

    def __len__(self) -> int:
        return len(self._items)


def entry_chars(prons: Pronunciations) -> int:
    """A compiled dictionary's size for a ``SizedLru``: its entries' characters (entries and their
    compiled index take about 3 bytes a character)."""
    return sum(len(key) + len(alias) + 16 for key, alias in prons.entries)


# 7 dictionaries at the limits (1000 entries of 256 + 256 characters), thousands of usual ones
_CACHE: SizedLru[tuple[tuple[str, str, bool], ...], Pronunciations] = SizedLru(4_000_000)


def compile_pronunciations(items: Sequence[Entry]) -> Pronunciations:
    """Compile a dictionary's entries (cached on their values: an unchanged dictionary is free)."""
    key = tuple((i.text.strip(), i.alias.strip(), bool(i.case_sensitive)) for i in items if i.text.strip())
    prons = _CACHE.get(key)
    if prons is None:  # two threads may both compile one: the same result, the later kept
        prons = _compile(key)
        _CACHE.put(key, prons, entry_chars(prons))
    return prons


def _accepts(form: _Form, text: str, units: list[str], starts: list[int], i: int, count: int) -> bool:
    start, end = starts[i], starts[i + count]
    if start:
        c = text[start - 1]
        if _is_mark(text[start]):  # a key that starts with a mark: not on another character
            return False
        if form.lead_symbol:
            if not (_is_word(c) or c.isspace() or c in _OPEN or _is_mark(c)):
                return False
        elif _is_mark(c):  # a mark NFC left apart belongs to the word before: still inside it
            return False
    if end < len(text):
        c = text[end]
        if _is_mark(c):  # part of the last character: "Lami" is not in "Lami\u0307" (NFC has no "i\u0307")
            return False
        if form.trail_symbol and not (_is_word(c) or c.isspace() or c in _CLOSE):
            return False
    if form.exact is not None and form.exact != "".join(
            " " if unit[0].isspace() else unit for unit in units[i:i + count]):
        return False
    return not form.capital or _sentence_start(text, start)


def _find(text: str, prons: Pronunciations) -> list[tuple[int, int, _Form]]:
    """(start, end, form) of each match in ``text`` (canonical form), left to right."""
    units = _UNIT.findall(text)
    starts = list(accumulate(map(len, units), initial=0))
    folded = list(map(_fold_unit, units))
    index = prons.index
    found: list[tuple[int, int, _Form]] = []
    i, n = 0, len(units)
    while i < n:
        groups = index.get(folded[i])
        best: Optional[_Form] = None
        best_count = 0
        if groups is not None:
            for count, by_seq in groups:
                if i + count > n:
                    break
                forms = by_seq.get("".join(folded[i:i + count]) if count > 1 else folded[i])
                for form in forms or ():
                    if best is not None and form.priority >= best.priority:
                        break
                    if _accepts(form, text, units, starts, i, count):
                        best, best_count = form, count
                        break
        if best is None:
            i += 1
        else:
            found.append((starts[i], starts[i + best_count], best))
            i += best_count
    return found


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
    if prons is None or prons.empty:
        return Substitution(text, text, ())
    view, to_start, to_end = _view(text)
    out: list[str] = []
    spans: list[tuple[int, int, int, int]] = []
    pos = new_len = 0
    for start, end, form in _find(view, prons):
        o_start, o_end = (start, end) if to_start is None or to_end is None else (to_start[start], to_end[end - 1])
        if o_start < pos:  # a match inside a character the previous one took whole (NFC pieces)
            continue
        key, alias = prons.entries[form.index]
        replacement = _match_case(alias, view[start:end], key)
        # {"&": "and"}: "R&D" -> "R and D", not "RandD" (the neighbours as compared: "é" in any form)
        before = view[start - 1] if o_start > pos else (out[-1][-1] if out else "")
        if before and _is_word(before) and replacement[0].isalnum():
            replacement = " " + replacement
        if end < len(view) and _is_word(view[end]) and replacement[-1].isalnum():
            replacement += " "
        kept = text[pos:o_start]
        out.append(kept)
        new_len += len(kept)
        spans.append((o_start, o_end, new_len, new_len + len(replacement)))
        out.append(replacement)
        new_len += len(replacement)
        pos = o_end
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
