"""A text's tokens, and what every reader of them asks: a token's parts, its neighbours, the words
that join numbers in each language, and whether a short form's period ends the sentence.

``TokenContext`` is the base of the token reader (``api/text/normalization.py``), whose readers are
split by topic into mixins: money (``normalization_money.py``), measures (``normalization_measures.py``),
clock times and durations (``normalization_clock.py``), dates, days and years
(``normalization_calendar.py``), ids and numbers dialled (``normalization_ids.py``) and plain numbers,
fractions and signs (``normalization_numbers.py``). They are one class once combined, so a reader of one
topic may ask another's: a year or a plain number asks the ids' ``_is_id`` and ``_flight_number``, a
fraction the calendar's ``_is_dated``, and an amount per unit or a signed number reads its parts with
the whole reader's ``_read``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from api.text.normalization_en import EnglishRules
from api.text.normalization_rules import LanguageRules
from api.text.normalization_units import UNDER_A_THOUSAND, UNIT_SYMBOLS

_LEAD = "\"'([{¿¡«“‘„‹"
TRAIL = "\"'.,;:!?)]}»”’›…"
SENTENCE_END = set(".!?…")
DASHES = frozenset("-–")
RANGE_WORD = {"en": "to", "es": "a", "pt": "a", "nl": "tot"}
# "between 1-2 p.m." is "between one and two": the range's "to" after "between" is its "and"
BETWEEN = {"en": "between", "es": "entre", "pt": "entre", "nl": "tussen"}
BETWEEN_AND = {"en": "and", "es": "y", "pt": "e", "nl": "en"}
OR_WORD = {"en": "or", "es": "o", "pt": "ou", "nl": "of"}
BY_WORD = {"en": "by", "es": "por", "pt": "por", "nl": "bij"}  # "3x4": dimensions
# Words between two numbers that count the same noun: "1 o 2 personas", "1 a 3 semanas", "1 ou 2".
_NUMBER_LINKS = frozenset({"o", "u", "y", "e", "a", "ou"})
DOT_WORD = {"en": "point", "es": "punto", "pt": "ponto", "nl": "punt"}
# After a whole "a/10" these make it a fraction: "3/10 of the budget", "3/10 de"
FRACTION_OF = frozenset({"of", "de", "do", "da", "del", "van"})
# Capitalised words that go on a time's sentence after "a.m."/"p.m." ("9 a.m. Monday through
# Friday", "3 p.m. Eastern", "5 p.m. EST"): the abbreviation's period is no full stop before them.
_TIME_ZONES = frozenset("ET CT MT PT EST CST MST PST EDT CDT MDT PDT AKST AKDT HST GMT UTC BST CET CEST AEST AEDT IST "
                        "JST".split())
_AFTER_TIME_WORDS = frozenset(
    {day.lower() for day in EnglishRules.weekday_abbreviations.values()} | {m.lower() for m in EnglishRules.months}
    | set("eastern central mountain pacific atlantic alaska hawaii greenwich".split())
    | {zone.lower() for zone in _TIME_ZONES})


def is_time_zone(word: str) -> bool:
    """Whether ``word`` is a time zone's short form as written, in capitals ("ET", "CET", "UTC")."""
    return word in _TIME_ZONES


def goes_on_after_meridiem(word: str) -> bool:
    """Whether a capitalised ``word`` after "a.m." or "p.m." goes on with the time: a day, a month
    or a time zone ("9 a.m. Monday", "3 p.m. Eastern", "5 p.m. EST"), so the period is no full stop."""
    return word.lower() in _AFTER_TIME_WORDS


@dataclass(frozen=True, slots=True)
class Token:
    raw: str
    lead: str
    core: str
    trail: str


def split_token(raw: str) -> Token:
    i, j = 0, len(raw)
    while i < j and raw[i] in _LEAD:
        i += 1
    while j > i and raw[j - 1] in TRAIL:
        j -= 1
    return Token(raw, raw[:i], raw[i:j], raw[j:])


def starts_upper(token: Optional[Token]) -> bool:
    return token is not None and token.core[:1].isupper()


def starts_digit(token: Optional[Token]) -> bool:
    return token is not None and token.core[:1].isdecimal()


def capitalize_like(words: str, original: str) -> str:
    return words[:1].upper() + words[1:] if original[:1].isupper() else words


class TokenContext:
    """The tokens of one text and the questions every reader asks of them."""

    rules: LanguageRules
    tokens: list[Token]

    def _next(self, i: int) -> Optional[Token]:
        return self.tokens[i + 1] if i + 1 < len(self.tokens) else None

    def _abbreviation_trail(self, rest: str, i: int, title: bool, can_end: bool) -> str:
        """Punctuation after an abbreviation that ended in '.': its period also ends the sentence
        at the end of the text, or before an uppercase word when it ``can_end`` (never for
        titles). Other punctuation after it ("St., Springfield") is the sentence's own."""
        if title or rest:
            return rest
        nxt = self._next(i)
        ends = nxt is None or (can_end and starts_upper(nxt) and not self._goes_on_after_time(i, nxt))
        return "." + rest if ends else rest

    def _goes_on_after_time(self, i: int, nxt: Token) -> bool:
        """Whether ``nxt``, after the meridiem at token ``i``, goes on with the time ("9 a.m. Monday",
        "3 p.m. Eastern", "5 p.m. EST") rather than starting a sentence."""
        return (self.rules.code == "en" and self.tokens[i].raw.lower().startswith(("a.m.", "p.m."))
                and not nxt.lead and goes_on_after_meridiem(nxt.core))

    def _adjective_amount(self, i: int, consumed: int) -> bool:
        """Whether the amount at token ``i`` (and ``consumed`` more) stands between "a" and a
        word it describes: "a $20 gift card" is "a twenty dollar gift card"; "a $20." is not.
        After "the", "your" and the like (``adjective_determiners``) only before a word that looks
        like a singular noun: "the $20 fee", 'the 65" TV'; "the $20 you paid", "the $20 covers
        it" and "the $5 drafts" keep the plural."""
        last, j = self.tokens[i + consumed], i + consumed + 1
        nxt = self.tokens[j] if j < len(self.tokens) else None
        # a unit's own period goes on to the word it describes: "a 24 x 36 in. poster", "a 5 lb. bag"
        own_period = last.trail == "." and (last.core in UNIT_SYMBOLS or last.core == "in")
        if (last.trail and not own_period) or nxt is None or nxt.lead or not nxt.core.isalpha():
            return False
        r, word = self.rules, nxt.core
        if self._after_article(i):
            return word.islower() and word not in r.amount_link_words
        prev = self.tokens[i - 1] if i > 0 else None
        if prev is None or prev.trail or prev.core.lower() not in r.adjective_determiners:
            return False
        if word.isupper():
            return 2 <= len(word) <= 4  # "the 65\" TV"
        return (word.islower() and word not in r.amount_link_words and word not in r.not_described_words
                and not (word.endswith("s") and not word.endswith("ss")) and not word.endswith("ed"))

    def _noun_after(self, i: int) -> Optional[str]:
        """The gender of the noun right after token ``i`` ("21 casas": "f"), None when the next
        word is not one a number counts ("21 de mayo") or punctuation comes between."""
        nxt = self._next(i)
        if nxt is None or self.tokens[i].trail or nxt.lead:
            return None
        return self.rules.noun_gender(nxt.core)

    def _noun_across(self, i: int) -> Optional[str]:
        """"1 o 2 personas", "1 a 3 semanas": the gender of the noun after the second number,
        which both count; None when the text is not of that form."""
        if self.rules.nouns is None or i + 3 >= len(self.tokens):
            return None
        link, number = self.tokens[i + 1], self.tokens[i + 2]
        if self.tokens[i].trail or link.trail or link.core.lower() not in _NUMBER_LINKS or not number.core.isdecimal():
            return None
        return self._noun_after(i + 2)

    def _amount_of(self, low: Optional[str], written: str, unit: str, adjective: bool = False) -> Optional[str]:
        """``written`` of ``unit`` ("five kilometers"), or the range from ``low`` ("thirty to
        thirty-five degrees Celsius"); None when a number does not parse. ``adjective``: the
        amount describes a noun ("a 10 min walk"), so the unit's singular (``read_measure``)."""
        r = self.rules
        num = r.parse_number(written)
        if num is None:
            return None
        if unit in UNDER_A_THOUSAND and len(num.integer) <= 3:  # "25 bps": basis points
            unit = UNDER_A_THOUSAND[unit]
        if low is None:
            return r.read_measure(num, unit, singular=adjective)
        first = r.parse_number(low)
        if first is None:
            return None
        return f"{r.read_number(first)} {RANGE_WORD[r.code]} {r.read_measure(num, unit, singular=adjective)}"

    def _said_date(self, i: int, year: Optional[int], month: int, day: int) -> str:
        """``LanguageRules.read_date`` for the date at token ``i``, less its article where the text
        has the same word right before it ("by the 12/3" in British English: "by the twelfth of
        March", not "by the the")."""
        said = self.rules.read_date(year, month, day)
        first, _, rest = said.partition(" ")
        prev = self.tokens[i - 1] if i > 0 else None
        if rest and first == "the" and prev is not None and not prev.trail and prev.core.lower() == first:
            return rest
        return said

    def _after_article(self, i: int) -> bool:
        """Whether token ``i`` follows an indefinite article that calls for an adjective ("a 5 km
        run" is "a five kilometer run"; LanguageRules.adjective_articles)."""
        prev = self.tokens[i - 1] if i > 0 else None
        return prev is not None and not prev.trail and prev.core.lower() in self.rules.adjective_articles

    def _more_than(self, i: int, said: str) -> str:
        """``said`` (the count at token ``i``) after the language's ``more_than_words`` ("más de"),
        unless they are the words right before it, with nothing but spaces between: "más de 50+"
        says them once."""
        words = self.rules.more_than_words or ""
        lead = words.split()
        before = self.tokens[i - len(lead):i] if i >= len(lead) else []
        if before and not any(t.trail for t in before) and [t.core.lower() for t in before] == lead:
            return said
        return f"{words} {said}"

    def _word_back(self, i: int, between: frozenset[str]) -> Optional[int]:
        """The index of the word before token ``i``, past at most two of ``between`` with
        nothing but spaces around them; None at the start of the text."""
        k = i - 1
        while (k > max(i - 3, 0) and self.tokens[k].core.lower() in between
               and not self.tokens[k].trail and not self.tokens[k - 1].trail):
            k -= 1
        return k if k >= 0 else None

    def _article_before(self, i: int) -> str:
        """"f" after a feminine article ("a las 21", "às 2"), else "m"."""
        prev = self.tokens[i - 1] if i > 0 else None
        if prev is None or prev.trail or prev.core.lower() not in self.rules.feminine_before:
            return "m"
        return "f"
