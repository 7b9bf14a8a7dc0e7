"""What the model reads for a segment with markup (api/text/markup.py), with the word alignment kept.

    markup = parse(text)                                            # InvalidMarkupError on a bad value
    normalized = read_markup(markup, "en", "auto", pronunciations)  # a NormalizedText, as normalize's

Tags are not read and are not words: each is blanked (spaces of its length), so it separates the
words around it as whitespace would ("Sonic.<break time=\"1s\"/>Nice" is the tokens "Sonic." and
"Nice"), and the text between spell spans is read as before, pronunciation dictionary and
normalisation included (neither sees a tag). A text with no markup is ``normalize_pronounced``'s
result unchanged.

Spelling. A spell span's characters are read one by one: a letter as its capital ("b" -> "B"), a
digit as the language's digit word ("7" -> "seven", "siete"; the digit itself for a language with no
number words), and whatever else stands between two of them (spaces, "-", "(", "@") as a short pause:
a comma after the character before it. "ABC-123" -> "A B C, one two three"; "(123) 456-7890" -> "one
two three, four five six, seven eight nine zero". The dictionary and normalisation never touch it,
and with ``normalization: off`` it is spelled all the same (it is markup, not text to normalise).
Punctuation written against the span's tags ("is <spell>ABC</spell>." "(<spell>12</spell>)") belongs to
it, so the sentence still ends on its last character.

Alignment. ``alignment`` lists the client's own tokens in order, tags left out: around tags the
whitespace tokens of the blanked text, and for a spell span the tokens of what it holds, with the
punctuation against it ("ABC-123,"), so word timestamps report what the client wrote. ``original``
is the segment's text as sent, tags included; ``start_char`` is where each token starts in it (a
token with punctuation glued across a spell's tag is not one slice of it).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Optional

from api.text.markup import Markup, Spell
from api.text.normalization import NormalizedText, WordAlignment, normalize, rules_for
from api.text.normalization_rules import LanguageRules
from api.text.pronunciation import Pronunciations, normalize_pronounced

__all__ = ["read_markup", "spell_words"]

_TOKEN_RE = re.compile(r"\S+")
_BLANK_RUN_RE = re.compile(r"[ \t]{2,}")
# punctuation written against a spell span belongs to it (normalization_tokens.py's _LEAD and TRAIL)
_GLUE_BEFORE = frozenset("\"'([{¿¡«“‘„‹")
_GLUE_AFTER = frozenset("\"'.,;:!?)]}»”’›…")


def read_markup(markup: Markup, language: Optional[str], mode: object,
                pronunciations: Optional[Pronunciations] = None) -> NormalizedText:
    """The text to synthesise for ``markup``'s segment and its alignment (module docstring)."""
    text = markup.text
    if markup.plain:
        return normalize_pronounced(text, language, mode, pronunciations)
    lang = normalize("", language, mode).language  # the mode's language ("es-MX" overrides); a bad mode raises
    blanked = _blank(markup)
    spoken: list[str] = []
    alignment: list[WordAlignment] = []

    def read_run(start: int, end: int) -> None:
        if start >= end:
            return
        run = normalize_pronounced(blanked[start:end], language, mode, pronunciations)
        spoken.append(run.text)
        alignment.extend(WordAlignment(a.original, a.normalized, a.start_char + start) for a in run.alignment)

    pos = 0
    spells = sorted(markup.spells, key=lambda s: s.start)
    for k, spell in enumerate(spells):
        limit = spells[k + 1].start if k + 1 < len(spells) else markup.end
        lead_at, trail_end = spell.start, spell.end
        if _TOKEN_RE.search(text, spell.content_start, spell.content_end):  # something to glue to
            while lead_at > pos and blanked[lead_at - 1] in _GLUE_BEFORE:
                lead_at -= 1
            while trail_end < limit and blanked[trail_end] in _GLUE_AFTER:
                trail_end += 1
        read_run(pos, lead_at)
        words, tokens = _spell_span(text, spell, lead_at, trail_end, rules_for(lang))
        spoken.append(f" {' '.join(words)} ")
        alignment.extend(tokens)
        pos = trail_end
    read_run(pos, markup.end)
    return NormalizedText(text, _BLANK_RUN_RE.sub(" ", "".join(spoken)), lang, tuple(alignment))


def _blank(markup: Markup) -> str:
    """The text with every tag (a spell span's own tags too) and whatever follows ``end`` as spaces."""
    chars = list(markup.text)
    blanks = [(t.start, t.end) for t in markup.tags] + [(markup.end, len(chars))]
    for s in markup.spells:
        blanks += [(s.start, s.content_start), (s.content_end, s.end)]
    for start, end in blanks:
        chars[start:end] = " " * (end - start)
    return "".join(chars)


def _spell_span(text: str, spell: Spell, lead_at: int, trail_end: int,
                rules: Optional[LanguageRules]) -> tuple[list[str], list[WordAlignment]]:
    """The spoken words of one spell span and its tokens, with the punctuation glued to it
    (``text[lead_at:spell.start]`` before, ``text[spell.end:trail_end]`` after)."""
    content = text[spell.content_start:spell.content_end]
    matches = list(_TOKEN_RE.finditer(content))
    per_token = spell_words([m.group() for m in matches], rules)
    flat = [w for words in per_token for w in words]
    lead, trail = text[lead_at:spell.start], text[spell.end:trail_end]
    if flat:  # the glued punctuation is spoken against the first and last characters
        first = next(i for i, words in enumerate(per_token) if words)
        last = max(i for i, words in enumerate(per_token) if words)
        per_token[first][0] = lead + per_token[first][0]
        per_token[last][-1] += trail
    tokens = []
    for i, (m, words) in enumerate(zip(matches, per_token)):
        original = m.group()
        start = spell.content_start + m.start()
        if i == 0 and lead:
            original, start = lead + original, lead_at
        if i == len(matches) - 1:
            original += trail
        tokens.append(WordAlignment(original, tuple(words), start))
    return [w for words in per_token for w in words], tokens


def spell_words(tokens: list[str], rules: Optional[LanguageRules]) -> list[list[str]]:
    """Each token's characters as spoken words (module docstring, "Spelling"); a character that is
    neither a letter nor a digit becomes a comma after the word before it when another one follows."""
    out: list[list[str]] = [[] for _ in tokens]
    last: Optional[tuple[int, int]] = None  # (token, word) of the last word spoken
    pause = False
    for t, token in enumerate(tokens):
        for ch in token:
            if not ch.isalnum():
                pause = last is not None
                continue
            if pause and last is not None:
                out[last[0]][last[1]] += ","
            pause = False
            out[t].extend(_spell_char(ch, rules).split())
            last = (t, len(out[t]) - 1)
        pause = last is not None  # the space between two tokens is a pause too
    return out


def _spell_char(ch: str, rules: Optional[LanguageRules]) -> str:
    digit = unicodedata.digit(ch, None)  # a decimal digit, or one written raised, lowered or circled: "²", "₂"
    if digit is not None:
        return rules.digits(str(digit)) if rules is not None else ch
    upper = ch.upper()
    return upper if len(upper) == 1 else ch  # "ß" stays: its capital is two letters
