"""Text normalisation before synthesis, with a word alignment for timestamps.

``normalize(text, language, mode)`` rewrites what a TTS model cannot read into words, for
English, Spanish, Portuguese and Dutch (other languages, and ``mode="off"``, pass through
unchanged): cardinals with the locale's separators ("1,234.5" en, "1.234,5" es/pt/nl), ordinals
("1st", "2.º", "1e"), money ("$5", "€3,50", "£10", "5 USD", "$2.5M", "$1.5 million", "$10-$20"),
percentages, dates ("2024-03-05", "03/05/2024", "5.3.2024", "2026-12-05T10:30Z"), times ("3:30 pm", "15:45", "15h30"), English years
("1999" -> "nineteen ninety-nine", "1990s"), units of measure ("30°C", "50 km/h", "20 m²", "16GB";
api/text/normalization_units.py), email and web addresses (api/text/normalization_web.py), signs
said as words ("2 + 2 = 4", "#1", "~$20", "+1", "50+", "1.5x"), amounts per unit ("$9.99/month"),
scales ("1.2k", "2.5M"), ratings ("4.5/5", "9/10"), time ranges ("9am-5pm", "2-3pm"), durations
("2h 30m"), dimensions ("3x4"), day names ("Mon-Fri"), ids and numbers dialled ("A12345", "Call
911", "PIN 4821") and abbreviations ("Dr.", "e.g.", "Sra.", "bijv."). docs/text-normalisation.md
shows each rule at work in each language; its examples are tests.

Alignment. The input is split on whitespace into *tokens*, exactly as written (punctuation
attached). Each token becomes zero or more normalized words; leading punctuation of the token is
glued to its first word and trailing punctuation to its last ("$5," -> ["five", "dollars,"]). A
unit spread over two tokens is read by the first, and the second becomes no words ("5 USD" ->
"5": ["five", "dollars"], "USD": []). So ``NormalizedText.alignment`` lists every original token
in order with the words it became; ``text`` is the original with each token replaced by its
words (whitespace between tokens kept), and ``text.split() == normalized_words``. Timestamps
report ``original_words`` (what the client sent, which LiveKit aligns against) or
``normalized_words`` (``use_normalized_timestamps``); see ``api/text/timestamps.py``.

The reading rules per language live in ``normalization_{en,es,pt,nl}.py``; this module decides
which rule a token matches (``_TokenReader._read``), and the rules that tell what a token is are
mixins split by topic: money, measures, the clock, the calendar, ids and plain numbers
(``normalization_tokens.py`` names their modules). A phone number written as groups between spaces
("912 345 678") spans tokens, so it is found first, over the whole text
(``normalization_ids.phone_groups``); then, token by token, in
this order: abbreviation, short day or month name, a Roman numeral after a numbering word
("Chapter IV"), address, currency, ordinal, duration, time, time range, date, percent, measure,
amount per unit, scale, a whole number and a fraction ("2 1/2"), years (and English month-day and
day-month, decades), area code, plain number (an id digit by digit, "HTTP 404" in pairs), simple
fraction, rating, powers and formulas ("x²", "H₂O"), a number with a sign ("#1", "<5"), dimensions,
a number and unit joined by a dash ("30-min"), digits that name a thing (an IP address, "1080p",
"BP 120/80", "401(k)"), mixed digits ("COVID-19", "24/7"; phone numbers and codes such as
"555-1234" digit by digit), "&", "+", "=", "×" and comparison signs before a number.

Never failing. Digits are decimal digits (``str.isdecimal``, what ``int()`` and ``\\d`` accept,
Arabic-Indic "٣" included); "²", "½" or "①" pass ``str.isdigit`` but are not numbers: a power
("x²"), a chemical formula ("H₂O") or a fraction character ("½") is read by its own rule
(api/text/normalization_scripts.py), and anything else ("①") stays as written. Beyond that, each
rule runs under its own guard: a rule that raises on a token (num2words on an absurd value, say)
is logged at DEBUG and treated as not matching, so the next rule is tried and a token no rule reads
is kept as written. The alignment stays whole either way, and a failure outside the rules passes
the whole text through unchanged.
"""

from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional, TypeVar

from api.text.errors import NormalizationModeError
from api.text.normalization_calendar import EN_SHORT_MONTHS, CalendarReading
from api.text.normalization_clock import ClockReading
from api.text.normalization_en import BritishEnglishRules, EnglishRules
from api.text.normalization_es import LatinAmericanSpanishRules, SpanishRules
from api.text.normalization_ids import IdReading, phone_groups, stars_are_literal
from api.text.normalization_markdown import token_line_starts, without_markdown, without_path_arrows
from api.text.normalization_measures import UNITS_SECOND_WORDS, MeasureReading
from api.text.normalization_money import CODES, MoneyReading
from api.text.normalization_nl import DutchRules
from api.text.normalization_numbers import SIGN_ALIASES, NumberReading
from api.text.normalization_pt import EuropeanPortugueseRules, PortugueseRules
from api.text.normalization_rules import SOUTH_AMERICAN_PESOS, Abbreviation, LanguageRules
from api.text.normalization_tokens import (
    BETWEEN, BETWEEN_AND, BY_WORD, DASHES, RANGE_WORD, TRAIL, Token, capitalize_like, goes_on_after_meridiem,
    is_time_zone, split_token, starts_digit, starts_upper,
)
from api.text.normalization_units import UNIT_SYMBOLS
from api.text.normalization_web import read_address
from api.text.speech import without_pictographs

__all__ = [
    "NormalizationMode",
    "NormalizedText",
    "WordAlignment",
    "goes_on_after_meridiem",
    "known_abbreviations",
    "normalize",
    "numbers_a_code",
    "rules_for",
]

logger = logging.getLogger(__name__)

_RULES: dict[str, LanguageRules] = {
    r.code: r for r in (EnglishRules(), SpanishRules(), PortugueseRules(), DutchRules())
}
# Where a locale writes numbers or dates otherwise than its language's rules above (Spain's
# Spanish, American English, Brazil's Portuguese, the Netherlands' Dutch), by its region
_BRITISH = BritishEnglishRules()
_LATIN_AMERICAN, _MEXICAN = LatinAmericanSpanishRules(), LatinAmericanSpanishRules(dollar_sign_code="MXN")
_EUROPEAN_PORTUGUESE = EuropeanPortugueseRules()
_REGIONAL_RULES: dict[tuple[str, str], LanguageRules] = {
    **{("en", region): _BRITISH for region in "gb uk ie au nz za in sg hk mt ke ng gi".split()},
    **{("es", region): _LATIN_AMERICAN for region in "us pr pa sv gt hn ni do pe".split()},
    ("es", "mx"): _MEXICAN,
    # Spain's decimal comma, and "$" the country's peso
    **{("es", region): SpanishRules(dollar_sign_code=code) for region, code in SOUTH_AMERICAN_PESOS.items()},
    # Portugal's spelling, as Angola and Mozambique write it
    **{("pt", region): _EUROPEAN_PORTUGUESE for region in "pt ao mz".split()},
}

_SPACES_RE = re.compile(r"\s*")
_LOCALE_RE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*")

_SHORT_SCALES = frozenset({"mln", "mld", "mi", "bi"})  # scales written apart as short forms: "€5 mln.", "R$ 2 bi."
_COMPARISONS = frozenset({"<", ">", "≤", "≥", "<=", ">="})
_ROMAN_RE = re.compile(r"(X{0,3})(IX|IV|VI{0,3}|I{1,3}|)")
_ROMAN_UNITS = ("", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX")
_AMPERSAND_WORDS_RE = re.compile(r"[^\W\d_]+(?:&[^\W\d_]+)+")
_R = TypeVar("_R")  # what a guarded reader returns


class NormalizationMode(str, enum.Enum):
    """``auto``: apply the language's rules. ``off``: pass the text through unchanged. The
    protocol's ``normalization`` field may also carry a locale code ("en-GB"), which means
    ``auto`` in that locale's language."""

    AUTO = "auto"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class WordAlignment:
    """One original token and the normalized words it became (possibly none)."""

    original: str
    normalized: tuple[str, ...]
    start_char: int  # offset of ``original`` in NormalizedText.original


@dataclass(frozen=True, slots=True)
class NormalizedText:
    """The text to synthesise plus its token alignment (see the module docstring)."""

    original: str
    text: str
    language: Optional[str]
    alignment: tuple[WordAlignment, ...]

    @property
    def original_words(self) -> list[str]:
        return [a.original for a in self.alignment]

    @property
    def normalized_words(self) -> list[str]:
        return [w for a in self.alignment for w in a.normalized]

    def timestamp_words(self, use_normalized: bool) -> list[str]:
        """The words a ``timestamps`` event reports."""
        return self.normalized_words if use_normalized else self.original_words


def rules_for(language: Optional[str]) -> Optional[LanguageRules]:
    """Rules for a language or locale code ("pt-BR" -> Portuguese; "en-GB" and "es-MX" their
    region's dates and numbers, ``_REGIONAL_RULES``); None when unsupported."""
    if not language:
        return None
    parts = language.lower().replace("_", "-").split("-")
    region = next((part for part in parts[1:] if len(part) == 2 and part.isalpha()), None)  # "es-Latn-MX"
    return _REGIONAL_RULES.get((parts[0], region or "")) or _RULES.get(parts[0])


@lru_cache(maxsize=1)
def known_abbreviations() -> dict[str, bool]:
    """Every abbreviation of every supported language, lowercase with its dots ("e.g."), mapped
    to whether its period can also end a sentence (before an uppercase word: "etc.", "Inc.").
    Titles ("Dr.") and the rest ("e.g.") map to False. Used by the segmenter, which does not know
    the language: a title in any language wins ("Sr. García" is es/pt "señor", though English
    "Sr." can end a sentence), and so does a reading before a name ("St. Louis" is "Saint"), since
    a cut there has the normaliser read the cut-off abbreviation on its own ("Street."). One read
    only before a number ("No. 5") can end a sentence: anywhere else it is a word ("I said no.")."""
    can_end: dict[str, bool] = {}
    before_name: set[str] = set()
    for rules in _RULES.values():
        for key, abbr in rules.abbreviations.items():
            can_end[key] = can_end.get(key, False) or abbr.can_end or abbr.before_number
            if abbr.title or abbr.before_capital is not None:
                before_name.add(key)
    return {key: end and key not in before_name for key, end in can_end.items()}


def numbers_a_code(abbreviation: str, word_before: str, word_after: Optional[str]) -> bool:
    """Whether ``abbreviation`` ("no.") after ``word_before`` numbers a code in some language: a
    record's noun before it ("Model No. XR-7", "artikel nr. AB-12"), so its period ends no
    sentence. ``word_after`` None: the next word is still arriving, and it may be the code. Used by
    the segmenter, which does not know the language."""
    for rules in _RULES.values():
        abbr = rules.abbreviations.get(abbreviation.lower())
        if abbr is not None and abbr.before_code and word_before.lower() in rules.record_nouns:
            return word_after is None or bool(_CODE_RE.fullmatch(word_after.rstrip(",.;:!?)")))
    return False


def _resolve(language: Optional[str], mode: object) -> tuple[bool, Optional[str]]:
    """(enabled, language) from the request's language and normalisation mode."""
    if mode is None or mode == NormalizationMode.AUTO or mode == "auto":
        return True, language
    if mode == NormalizationMode.OFF or mode == "off":
        return False, language
    # The same locale rule as api/protocol/requests.py; an unsupported language passes through.
    if isinstance(mode, str) and _LOCALE_RE.fullmatch(mode):
        return True, mode
    raise NormalizationModeError(
        f"unsupported normalization {mode!r}; expected 'auto', 'off' or a locale code such as 'en-US'"
    )


def reading_language(language: Optional[str], mode: object = "auto") -> str:
    """The language a text is read in: a locale given as ``mode`` overrides ``language``; English
    when neither names one. NormalizationModeError for a mode ``normalize`` refuses."""
    return _resolve(language, mode)[1] or "en"


def normalize(text: str, language: Optional[str] = "en", mode: object = "auto") -> NormalizedText:
    """Normalise ``text`` for synthesis in ``language`` (an ISO code or locale; None: English).

    ``mode``: "auto" (default), "off", or a locale code that overrides ``language``. Raises
    NormalizationModeError for any other mode. Never fails on text: what no rule matches is kept.
    """
    enabled, lang = _resolve(language, mode)
    lang = lang or "en"
    matches = list(re.finditer(r"\S+", text))
    rules = rules_for(lang) if enabled else None
    if not enabled:
        return _unchanged(text, lang, matches)
    try:
        if rules is None:  # a language without rules: only the pictographs are left out
            readings = [[word] if word else [] for word in without_pictographs([m.group() for m in matches])]
        else:
            readings = _TokenReader(rules, [m.group() for m in matches], token_line_starts(text, matches)).read_all()
    except Exception:  # the rules are guarded one by one (_TokenReader._read); this is the backstop
        logger.warning("normalisation (%s) failed outside its rules; text kept as written", lang, exc_info=True)
        return _unchanged(text, lang, matches)
    # Rebuild: original whitespace between tokens, each token replaced by its words; a token
    # that became no words takes the whitespace before it along, or, when nothing was said before
    # it (a heading's "#"), the whitespace after it.
    parts, pos = [], 0
    for m, words in zip(matches, readings):
        if words:
            parts.append(text[pos : m.start()])
            parts.append(" ".join(words))
            pos = m.end()
        elif not any(parts):
            parts.append(text[pos : m.start()])
            pos = _SPACES_RE.match(text, m.end()).end()
        else:
            pos = m.end()
    parts.append(text[pos:])
    alignment = tuple(
        WordAlignment(m.group(), tuple(words), m.start()) for m, words in zip(matches, readings)
    )
    return NormalizedText(text, "".join(parts), lang, alignment)


def _unchanged(text: str, lang: str, matches: list[re.Match[str]]) -> NormalizedText:
    alignment = tuple(WordAlignment(m.group(), (m.group(),), m.start()) for m in matches)
    return NormalizedText(text, text, lang, alignment)


# --- the token reader ---------------------------------------------------------------------------


class _TokenReader(MoneyReading, MeasureReading, ClockReading, CalendarReading, IdReading, NumberReading):
    """Reads the tokens of one text; ``read_all()[i]`` is the word list of token i."""

    def __init__(self, rules: LanguageRules, raws: list[str], line_starts: Optional[list[bool]] = None) -> None:
        self.rules = rules
        self.line_starts = line_starts or [False] * len(raws)
        if rules.code == "en":
            raws = _hearts_said(raws)
        raws = without_path_arrows(without_pictographs(raws, keep_rating_stars=True))
        self.tokens = [split_token(r) for r in without_markdown(raws, line_starts, literal=stars_are_literal)]
        self.phone_groups = phone_groups(self.tokens)

    def read_all(self) -> list[list[str]]:
        out: list[list[str]] = []
        i = 0
        while i < len(self.tokens):
            if not self.tokens[i].raw:  # markup only ("#" of a heading): no words
                out.append([])
                i += 1
                continue
            reading, consumed = self._read(i)
            tok = self.tokens[i]  # an abbreviation may have adjusted its trailing punctuation
            if reading is None:
                out.append([tok.raw])
                i += 1
                continue
            if self._after_between(i) and any(d in t.core for t in self.tokens[i: i + 1 + consumed] for d in DASHES):
                # "between 1-2 p.m.": "between one and two", not "between one to two"
                code = self.rules.code
                reading = reading.replace(f" {RANGE_WORD[code]} ", f" {BETWEEN_AND[code]} ", 1)
            words, last_trail = reading.split(), tok.trail
            if consumed:
                last_trail = self._consumed_trail(i + consumed)
            elif self._airline_code_before_its_number(i) or self._country_code_before_number(i):
                last_trail = ","
            if not words:  # defensive: a rule never returns "", keep the token
                out.append([tok.raw])
                i += 1
                continue
            words[0] = tok.lead + words[0]
            words[-1] = words[-1] + last_trail
            out.append(words)
            out.extend([] for _ in range(consumed))
            i += 1 + consumed
        return out

    def _zone_before_slash(self, i: int) -> bool:
        """Whether token ``i`` is a time's zone before a slash alone and the time in another zone:
        "3pm ET / 12pm PT", "15:00 CET / 9:00 ET"."""
        tok = self.tokens[i]
        if not is_time_zone(tok.core) or tok.trail or i == 0 or i + 2 >= len(self.tokens):
            return False
        time, slash, after = self.tokens[i - 1], self.tokens[i + 1], self.tokens[i + 2]
        meridiem = time.core.lower() in ("a.m", "p.m", "am", "pm") and time.trail in ("", ".")
        return slash.raw == "/" and starts_digit(after) and (meridiem or (starts_digit(time) and not time.trail))

    def _after_between(self, i: int) -> bool:
        prev = self.tokens[i - 1] if i > 0 else None
        return prev is not None and not prev.trail and prev.core.lower() == BETWEEN[self.rules.code]

    def _consumed_trail(self, j: int) -> str:
        """Trailing punctuation of a token read together with the one before it."""
        tok = self.tokens[j]
        key = tok.raw.lower()
        for short in ("a.m.", "p.m.", "a.a."):  # the abbreviation's own period is not punctuation
            if key.startswith(short):
                return self._abbreviation_trail(tok.raw[len(short) :], j, title=False, can_end=True)
        if tok.trail.startswith(".") and (tok.core in UNIT_SYMBOLS or tok.core in UNITS_SECOND_WORDS or tok.core == "in"
                                          or tok.core.lower() in self.rules.rooms
                                          or tok.core in EN_SHORT_MONTHS or tok.core.lower() in _SHORT_SCALES):
            # "5 lbs. of flour", "21 Sept. at noon", "€5 mln. voor": a short form's own period, a
            # full stop only where one ends
            return self._abbreviation_trail(tok.trail[1:], j, title=False, can_end=True)
        return tok.trail


    # each reader returns (reading or None, number of following tokens consumed)
    def _read(self, i: int) -> tuple[Optional[str], int]:
        tok = self.tokens[i]
        if not tok.core:
            return None, 0
        if i in self.phone_groups:  # "912 345 678", "020-123 4567": digit by digit, a pause between groups
            return ", ".join(self.rules.digits(group) for group in tok.core.split("-")) + self.phone_groups[i], 0
        abbreviation = self._guarded(self._read_abbreviation, i)
        if abbreviation is not None:
            return abbreviation
        calendar = self._guarded(self._read_calendar_word, i)
        if calendar is not None:
            return calendar, 0
        roman = self._guarded(self._read_roman, i)
        if roman is not None:
            return roman, 0
        if tok.core in ("x", "×") and self._between_measures(i):  # '12" x 8"', "10 cm x 20 cm"
            return BY_WORD[self.rules.code], 0
        if tok.core in ("x", "×") and self._between_count_and_price(i):  # "2 x $19.99"
            return self.rules.symbol_words["×"], 0
        if tok.core == "x" and self.rules.code == "en" and self._leads_a_course(i):  # "1 tab BID x 10 days"
            return "for", 0
        named = _LETTERS_WITH_SIGNS.get(tok.core) or _read_keys(tok.core) or _read_hex(tok.core, self.rules)
        if named is None and self.rules.code == "en":
            named = _EN_FIXED_READINGS.get(tok.core)
        if named is not None:
            return named, 0
        if self.rules.code == "en":
            street = self._street_word(i)
            if street is not None:
                return street, 0
        if tok.core[:1] == "@" and _HANDLE_RE.fullmatch(tok.core[1:]):  # "@AcmeSupport": a social media handle
            return f"{self.rules.symbol_words['@']} {tok.core[1:]}", 0
        if (tok.core == "/" and i > 0 and self.tokens[i - 1].core.lower() in self.rules.rooms
                and starts_digit(self._next(i))):
            return BETWEEN_AND[self.rules.code], 0  # "3 bd / 2 ba": "and"
        slashed = self._slash_word(tok.core)
        if slashed is not None:
            return slashed, 0
        if tok.core == "@" and self.rules.code == "en" and not tok.trail and starts_digit(self._next(i)):
            return "at", 0  # "Tue 12/8 @ 3:15pm"
        graded = _GRADE_RE.fullmatch(tok.core)
        if graded:  # "an A+", "O+ blood": the letter and "plus"
            return f"{graded.group('letters')} {self.rules.symbol_words['+']}", 0
        sizes = self._clothing_sizes(i)
        if sizes is not None:
            return sizes, 0
        if self._zone_before_slash(i):  # "3pm ET / 12pm PT": the same time in another zone, after a pause
            return tok.core + ",", 1
        if tok.core.isalpha() and tok.core not in CODES:  # a word of letters only: no rule below reads one
            return None, 0  # (most tokens are); a currency's code may lead its amount ("USD 50")
        for reader in (
            self._read_keypad,
            self._read_extension,
            self._read_address,
            self._read_money,
            self._read_ordinal,
            self._read_duration,
            self._read_clock_duration,
            self._read_height,
            self._read_inch_mark,
            self._read_time,
            self._read_military_time,
            self._read_dose_interval,
            self._read_time_range,
            self._read_date,
            self._read_day_month_word,
            self._read_percent,
            self._read_measure,
            self._read_rooms,
            self._read_per,
            self._read_scaled,
            self._read_mixed_number,
            self._read_room_number,
            self._read_house_number,
            self._read_year_like,
            self._read_area_code,
            self._read_number,
            self._read_fraction,
            self._read_rating,
            self._read_scripts,
            self._read_signed,
            self._read_dimensions,
            self._read_sum,
            self._read_compound_measure,
            self._read_decimal_before_word,
            self._read_fraction_before_word,
            self._read_named_number,
            self._read_masked_digits,
            self._read_ratio,
            self._read_date_range,
            self._read_mixed,
        ):
            reading, consumed = self._guarded(reader, i) or (None, 0)
            if reading is not None:
                return reading, consumed
        if tok.core == "&":
            return self.rules.ampersand_word, 0
        if tok.core == "#" and self._numbers_the_word_before(i):  # "account # is", "Order #: 123"
            return self.rules.symbol_words["#"], 0
        if _AMPERSAND_WORDS_RE.fullmatch(tok.core):  # "Q&A", "AT&T", "R&D"
            return f" {self.rules.ampersand_word} ".join(tok.core.split("&")), 0
        if tok.core in ("+", "=", "×", "±", "+/-") and self._between_terms(i):  # "2 + 2 = 4", "5 ± 0.1"
            return self.rules.symbol_words["±" if tok.core == "+/-" else tok.core], 0
        if tok.core in _COMPARISONS and not tok.trail and self._number_follows(i):  # "> 10 items", "x < 5"
            return self.rules.symbol_words[SIGN_ALIASES.get(tok.core, tok.core)], 0
        if tok.core in DASHES and not tok.trail and (
                (self._number_follows(i) and (self._after_meridiem(i) or self._ends_a_short_range(i - 1)))
                or self._between_percents(i)):
            # "9am - 5pm", "9:00 AM – 5:00 PM", "9a - 6p", "5 % - 10 %"; "between 9 am - 5 pm": "and"
            start = i - 2 if self.tokens[i - 1].core.lower() in ("%", "am", "pm", "a.m", "p.m") else i - 1
            return (BETWEEN_AND if self._after_between(start) else RANGE_WORD)[self.rules.code], 0
        if tok.core in DASHES and not tok.trail and i > 0 and self._in_day_range(i - 1):
            return RANGE_WORD[self.rules.code], 0  # "Mon. - Fri."
        return None, 0

    def _street_word(self, i: int) -> Optional[str]:
        """An English street's type written short without its period, after the street's name
        ("Main St, Springfield", "5th Ave NW", "Elm Rd and"), and a compass point after one ("NW"
        -> "Northwest"); None elsewhere: before a capitalised word "St" may be "Saint"."""
        tok = self.tokens[i]
        if tok.core not in _STREET_TYPES and tok.core not in _COMPASS_POINTS:
            return None
        prev, nxt = self.tokens[i - 1] if i > 0 else None, self._next(i)
        if prev is None or tok.lead:
            return None
        if tok.core in _COMPASS_POINTS and prev.core.removesuffix(".") in _STREET_NAMES and prev.trail in ("", "."):
            return _COMPASS_POINTS[tok.core]  # "5th Ave NW", "Main St. NW", "Pennsylvania Avenue NW"
        if tok.core in _COMPASS_POINTS and tok.trail in ("", ".") and prev.core.isdecimal() and not prev.trail \
                and self._street_name_after(i):
            # "1200 N. Market St.", "45 W 34th St": before the street's name, its period is the short form's
            self.tokens[i] = Token(tok.raw, tok.lead, tok.core, "")  # the reader attaches tok.trail
            return _COMPASS_POINTS[tok.core]
        if prev.trail:
            return None
        if tok.core not in _STREET_TYPES or not (prev.core[:1].isupper() or _EN_ORDINAL_RE.fullmatch(prev.core)):
            return None
        ends = bool(tok.trail) or nxt is None or nxt.core in _COMPASS_POINTS or nxt.core[:1].islower()
        return _STREET_TYPES[tok.core] if ends else None

    def _street_name_after(self, i: int) -> bool:
        """Whether one to three capitalised words or ordinals after token ``i`` end in a street's
        type: "Market St.", "34th St", "Martin Luther King Jr Blvd"."""
        for k in range(i + 1, min(i + 5, len(self.tokens))):
            word = self.tokens[k]
            if word.lead or not (word.core[:1].isupper() or _EN_ORDINAL_RE.fullmatch(word.core)):
                return False
            if k > i + 1 and word.core in _STREET_NAMES:
                return True
            if word.trail:
                return False
        return False

    def _read_house_number(self, i: int) -> tuple[Optional[str], int]:
        """An English house number before its street, said in pairs as addresses are: "123 Main St"
        -> "one twenty-three Main Street", "2200 Oak Ave." -> "twenty-two hundred". Only three or
        four digits, then capitalised words and a street's type within three words."""
        r, tok = self.rules, self.tokens[i]
        if r.code != "en" or not (tok.core.isdecimal() and 3 <= len(tok.core) <= 4) or tok.core[0] == "0" or tok.trail:
            return None, 0
        for k in range(i + 1, min(i + 5, len(self.tokens))):
            word = self.tokens[k]
            if word.lead or not word.core[:1].isupper():
                return None, 0
            if k > i + 1 and word.core.removesuffix(".") in _STREET_NAMES:
                pairs = r.digit_pairs(tok.core)
                return (pairs, 0) if pairs else (None, 0)
            if word.trail:
                return None, 0
        return None, 0

    def _read_room_number(self, i: int) -> tuple[Optional[str], int]:
        """An English room's, suite's or apartment's number of three or four digits (a letter may
        follow), said in pairs as they are: "Room 204" -> "two oh four", "Suite 310" -> "three ten",
        "rm 1207" -> "twelve oh seven", "Room 204B" -> "two oh four B"."""
        r, tok = self.rules, self.tokens[i]
        m = _ROOM_NUMBER_RE.fullmatch(tok.core) if r.code == "en" and i > 0 and not tok.lead else None
        if m is None:
            return None, 0
        prev = self.tokens[i - 1]
        named = prev.trail in ("", ".") and prev.core.lower().rstrip(".") in _ROOM_WORDS
        if not named and not self._in_room_list(i):
            return None, 0
        pairs = r.digit_pairs(m.group("digits"))
        if pairs is None:
            return None, 0
        return (f"{pairs} {m.group('letter')}" if m.group("letter") else pairs), 0

    def _country_code_before_number(self, i: int) -> bool:
        """Whether token ``i`` is a phone number's country code ("+54", "+1") before the rest of the
        number: a pause after it, as people say it ("más cincuenta y cuatro, nueve, once...")."""
        tok = self.tokens[i]
        if _COUNTRY_CODE_RE.fullmatch(tok.core) is None or tok.trail:
            return False
        digits = 0  # the rest of the number: digit groups with nothing but dashes and brackets around
        for word in self.tokens[i + 1: i + 6]:
            if not _PHONE_GROUP_RE.fullmatch(word.core) or word.lead not in ("", "("):
                break
            digits += sum(c.isdecimal() for c in word.core)
            if word.trail not in ("", ")"):
                break
        return digits >= 6

    def _slash_word(self, core: str) -> Optional[str]:
        """A short form with a slash written against its word (``LanguageRules.slash_words``,
        ``slash_prepositions``): "c/u" -> "cada uno", "c/queso" -> "con queso", "s/juros" -> "sem
        juros"; a word of three letters at least, in lowercase ("C/Mayor" may be an address)."""
        r = self.rules
        if core.lower() in r.slash_words and core.islower():
            return r.slash_words[core.lower()]
        m = _SLASH_WORD_RE.fullmatch(core)
        if m is None or m.group("letter") not in r.slash_prepositions:
            return None
        return f"{r.slash_prepositions[m.group('letter')]} {m.group('word')}"

    def _in_room_list(self, i: int) -> bool:
        """Whether the number at token ``i`` goes on a list of rooms' numbers after a comma, "and"
        or "or" ("Rooms 204 and 206", "Suites 310, 312 and 314"), and counts no plural after it
        ("Room 204 and 300 guests")."""
        if self._counts_a_plural(i):
            return False
        k = i - 1  # back over the list: "<word> 310, 312 and" before "314"
        while k > 0:
            if self.tokens[k].core.lower() in ("and", "or", "&") and not self.tokens[k].trail:
                k -= 1  # "204 and 206"
            elif self.tokens[k].trail != ",":
                return False  # "Room 204 206": no list
            number = self.tokens[k]
            if k == 0 or number.trail not in ("", ",") or not _ROOM_NUMBER_RE.fullmatch(number.core):
                return False
            before = self.tokens[k - 1]
            if before.trail in ("", ".") and before.core.lower().rstrip(".") in _ROOM_WORDS:
                return True
            k -= 1
        return False

    def _clothing_sizes(self, i: int) -> Optional[str]:
        """Clothing sizes joined by slashes or a dash: "S/M/L" -> "S, M, L", "XS-XXL" -> "XS to XXL".
        Single letters only three or more, or after a word for sizes ("tallas S-M"); None elsewhere."""
        core = self.tokens[i].core
        dash = "-" in core or "–" in core
        if not dash and "/" not in core:  # most tokens: no joined sizes, nothing to split
            return None
        parts = re.split(r"[-–]", core) if dash else core.split("/")
        if len(parts) < 2 or not all(part in _CLOTHING_SIZES for part in parts) or (dash and len(parts) != 2):
            return None
        prev = self.tokens[i - 1] if i > 0 else None
        named = prev is not None and not prev.trail and prev.core.lower() in _SIZE_WORDS
        if all(len(part) == 1 for part in parts) and not (named or len(parts) >= 3):
            return None
        return f" {RANGE_WORD[self.rules.code]} ".join(parts) if dash else ", ".join(parts)

    def _address_unit_after(self, i: int) -> bool:
        """Whether an English address's unit or a compass point follows token ``i`` ("Oak St. Suite
        200", "Elm St. Apt. 4B", "Main St. NW"): the street's name goes on."""
        nxt = self._next(i)
        return (self.rules.code == "en" and nxt is not None and not nxt.lead
                and (nxt.core.lower() in _EN_ADDRESS_UNITS or nxt.core in _COMPASS_POINTS or nxt.core.startswith("#")))

    def _ends_a_street_name(self, i: int) -> bool:
        """Whether the short form at token ``i`` ends an English street's name: after one to three
        capitalised words that follow a house number or "on"/"at" ("500 Oak St. He left", "on Main
        St. Then"); "Visit St. Louis" and "I love St. Louis" name a saint."""
        if self.rules.code != "en":
            return False
        k = i - 1
        while k >= 0 and i - k <= 3 and not self.tokens[k].trail and starts_upper(self.tokens[k]) \
                and self.tokens[k].core.isalpha():
            k -= 1
        if k == i - 1 or k < 0 or self.tokens[k].trail:
            return False
        return starts_digit(self.tokens[k]) or self.tokens[k].core in _STREET_PREPOSITIONS

    def _numbers_the_word_before(self, i: int) -> bool:
        """Whether a lone "#" at token ``i`` stands for "number" after the word it numbers: before
        its number ("Order # 12345"), a colon ("Order #:") or "is" ("your account # is")."""
        tok, prev, nxt = self.tokens[i], self.tokens[i - 1] if i > 0 else None, self._next(i)
        if prev is None or prev.trail or not _WORD_RE.fullmatch(prev.core) or tok.lead:
            return False  # after a word ("account", "e-ticket")
        if tok.trail == ":":
            return True
        return not tok.trail and nxt is not None and not nxt.lead and (
            nxt.core[:1].isdecimal() or nxt.core.lower() in self.rules.copulas)


    def _number_follows(self, i: int) -> bool:
        """Whether the token after ``i`` begins with a number or an amount ("10", "$5", "18+")."""
        nxt = self._next(i)
        return nxt is not None and not nxt.lead and bool(re.match(r"[$€£¥₹]?\d", nxt.core))

    def _between_terms(self, i: int) -> bool:
        """Whether token ``i`` stands between two terms of an expression: not first, not after
        punctuation ("Fruit: + Apples", a list bullet), not last."""
        return 0 < i < len(self.tokens) - 1 and not self.tokens[i - 1].trail and not self.tokens[i].trail

    def _guarded(self, reader: Callable[[int], _R], i: int) -> Optional[_R]:
        """``reader(i)``, or None when it raises: one odd token must never fail the request, so
        the next rule is tried."""
        try:
            return reader(i)
        except Exception:
            logger.debug("normalisation (%s): rule %s failed on token %r; trying the next one", self.rules.code,
                         reader.__name__.removeprefix("_read_"), self.tokens[i].raw[:80], exc_info=True)
            return None

    def _read_abbreviation(self, i: int) -> Optional[tuple[Optional[str], int]]:
        tok = self.tokens[i]
        rest = tok.raw[len(tok.lead) :]
        for k in range(len(rest), 0, -1):
            abbr: Optional[Abbreviation] = self.rules.abbreviations.get(rest[:k].lower())
            if abbr is None or any(c not in TRAIL for c in rest[k:]):
                continue
            nxt = self._next(i)
            if rest[k - 1] == "." and is_time_zone(rest[: k - 1]) and not starts_digit(nxt):
                return None  # "3:30 PM EST." is the zone in capitals, its period the full stop; "Est." is estimated
            if abbr.not_before_number and starts_digit(nxt):
                return None  # "S/ 25": Peru's soles, not "sin"
            numbered = abbr.before_number and (starts_digit(nxt) or (abbr.before_code and self._numbers_a_code(i)))
            # "la temperatura máx. será": an adjective that agrees follows its noun
            described = abbr.agrees and i > 0 and not self.tokens[i - 1].trail \
                and self.rules.noun_gender(self.tokens[i - 1].core) is not None
            if ((abbr.before_number or abbr.nouns) and not numbered and not described
                    and (nxt is None or nxt.core.lower() not in abbr.nouns)):
                return None  # no abbreviation here ("I said no."); a short month may still be one ("in Oct.")
            # "St. Louis" is Saint; "Main St., Springfield": punctuation after it ends a street name, and
            # an address's unit goes on with it ("Oak St. Suite 200": Street, no full stop)
            in_address = self._address_unit_after(i)
            alternative = (abbr.before_capital is not None and starts_upper(nxt) and rest[k:] in ("", ".")
                           and not in_address and not self._ends_a_street_name(i))
            if alternative:
                said = abbr.before_capital
            elif abbr.at_end is not None and (nxt is None or rest[k:] != ""):
                said = abbr.at_end  # "utilities incl."
            elif abbr.before_digit is not None and starts_digit(nxt) and rest[k:] in ("", "."):
                said = abbr.before_digit  # "Est. 1998"
            elif abbr.after_number is not None and i > 0 and not self.tokens[i - 1].trail \
                    and self.tokens[i - 1].core[-1:].isdecimal():
                said = abbr.after_number  # "R$ 10 p/ pessoa"
            else:
                said = abbr.expansion
            if abbr.agrees and said.endswith("o") and i > 0 and not self.tokens[i - 1].trail \
                    and (self.rules.noun_gender(self.tokens[i - 1].core) == "f" or self._article_before(i) == "f"):
                said = said[:-1] + "a"  # "capacidad máx.": "máxima"; "la mín. de 15 °C": "mínima"
            words = capitalize_like(said, rest)
            trail = rest[k:]
            if rest[k - 1] == ".":
                trail = self._abbreviation_trail(trail, i, abbr.title or alternative, abbr.can_end and not in_address)
            # The reader attaches tok.trail; hand back the adjusted one through a 1-token view.
            self.tokens[i] = Token(tok.raw, tok.lead, rest[:k], trail)
            return words, 0
        return None

    def _leads_a_course(self, i: int) -> bool:
        """Whether the "x" at token ``i`` stands for "for" before a treatment's length, as a
        prescription writes it: "1 tab BID x 10 days", "x 2 wks" (not after a number: "3 x 4")."""
        after = self.tokens[i + 1: i + 3]
        return (len(after) == 2 and not self.tokens[i].trail and not after[0].trail and after[0].core.isdecimal()
                and after[1].core.lower() in _COURSE_UNITS and (i == 0 or not starts_digit(self.tokens[i - 1])))

    def _numbers_a_code(self, i: int) -> bool:
        """Whether the abbreviation at token ``i`` numbers the code after it, or after a verb of being,
        a record's noun before it: "Model No. XR-7", "Part no. A12B", "your tracking no. is 1Z99..."
        ("I said no. OK" stays)."""
        nxt = self._next(i)
        if not (i > 0 and not self.tokens[i - 1].trail and self.tokens[i - 1].core.lower() in self.rules.record_nouns
                and nxt is not None and not nxt.lead):
            return False
        if nxt.core in self.rules.copulas and not nxt.trail:  # "is", not "Is" (a question after a full stop)
            nxt = self._next(i + 1)
            if nxt is None or nxt.lead:
                return False
        return starts_digit(nxt) or bool(_CODE_RE.fullmatch(nxt.core))

    def _read_roman(self, i: int) -> Optional[str]:
        """A Roman numeral after a word that numbers things (``LanguageRules.roman_lead_words``):
        "Chapter IV" -> "Chapter four", "World War II", "Type 2" written "Type II", "siglo XXI"."""
        value = _roman_value(self.tokens[i].core)
        if value is None:
            return None
        leads = self.rules.roman_lead_words
        before = self.tokens[max(0, i - 2):i]
        if not before or before[-1].trail:
            return None
        one = before[-1].core.lower()
        two = f"{before[0].core.lower()} {one}" if len(before) == 2 and not before[0].trail else None
        return self.rules.cardinal(value) if one in leads or two in leads else None


    def _read_address(self, i: int) -> tuple[Optional[str], int]:
        """"support@acme.com", "https://acme.io/docs", "acme.com" (api/text/normalization_web.py)."""
        return read_address(self.tokens[i].core, self.rules), 0


def _hearts_said(raws: list[str]) -> list[str]:
    """English tokens with a heart between "I" or "we" and a word said as the verb it stands for:
    "I ❤️ NY" -> "I love NY", "We ❤ our customers". Elsewhere ("Thanks ❤️") it is left out with
    the other pictographs."""
    out = list(raws)
    for k in range(1, len(out) - 1):
        if out[k - 1] in _HEART_LOVERS and out[k].replace("\ufe0f", "") in _HEARTS and out[k + 1][:1].isalnum():
            out[k] = "love"
    return out


def _read_keys(core: str) -> Optional[str]:
    """A keyboard shortcut, its keys said in a row: "Ctrl+Shift+Delete" -> "Control Shift Delete",
    "Cmd+C" -> "Command C"."""
    if not _KEY_COMBO_RE.fullmatch(core):
        return None
    return " ".join(_KEY_NAMES.get(key.lower(), key) for key in core.split("+"))


def _read_hex(core: str, rules: LanguageRules) -> Optional[str]:
    """A hexadecimal number, as an error code is read: "0x80070005" -> "zero x eight zero zero
    seven zero zero zero five", its letters as capitals ("0x1F" -> "zero x one F")."""
    if not _HEX_RE.fullmatch(core):
        return None
    return " ".join([rules.digits("0"), "x"] + [rules.digits(c) if c.isdecimal() else c.upper() for c in core[2:]])


def _roman_value(core: str) -> Optional[int]:
    """"XXI" -> 21: a Roman numeral from I to XXXIX, in capitals, written the standard way; None
    for anything else ("IIII", "VX", "xi")."""
    m = _ROMAN_RE.fullmatch(core)
    if m is None or not core:
        return None
    tens, units = m.group(1), m.group(2)
    return 10 * len(tens) + _ROMAN_UNITS.index(units) if units or tens else None


# Names written with signs, said alike in every language: programming languages
_LETTERS_WITH_SIGNS = {"C++": "C plus plus", "C#": "C sharp", "F#": "F sharp"}
# English short forms that are words only in one case ("MoM", not "Mom"), and an even split
_HEARTS = frozenset("❤♥💙💚💛💜🧡🖤🤍🤎💗💖💕")
_HEART_LOVERS = frozenset({"I", "i", "We", "we"})
_EN_FIXED_READINGS = {"YoY": "year over year", "QoQ": "quarter over quarter", "MoM": "month over month",
                      "50-50": "fifty-fifty", "50/50": "fifty-fifty", "24/7/365": "twenty-four seven three sixty-five",
                      "N/A": "not applicable"}
_GRADE_RE = re.compile(r"(?P<letters>[A-DF]|AB|O)\+")  # a grade, a rating or a blood group: "A+", "AB+"
_WORD_RE = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")  # letters, maybe hyphenated: "e-ticket"
_COURSE_UNITS = frozenset("day days d week weeks wk wks month months mo mos".split())  # "x 10 days"
_CODE_RE = re.compile(r"(?=[A-Z-]*\d)[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)*")  # capitals and a digit: "XR-7", "A12B"
_KEY_NAMES = {"ctrl": "Control", "control": "Control", "shift": "Shift", "alt": "Alt", "cmd": "Command",
              "command": "Command", "opt": "Option", "option": "Option", "win": "Windows", "fn": "Function",
              "del": "Delete", "esc": "Escape", "enter": "Enter", "tab": "Tab", "space": "Space"}
_KEY_COMBO_RE = re.compile(r"(?i:ctrl|control|shift|alt|cmd|command|opt|option|win|fn)(?:\+[A-Za-z0-9]{1,6})+")
_HEX_RE = re.compile(r"0x[0-9A-Fa-f]{2,16}")  # "0x80070005"
_ROOM_NUMBER_RE = re.compile(r"(?P<digits>[1-9]\d{2,3})(?P<letter>[A-Z]?)")
_COUNTRY_CODE_RE = re.compile(r"\+\d{1,3}")  # a phone number's country code: "+1", "+54", "+351"
_PHONE_GROUP_RE = re.compile(r"\d+(?:-\d+)*")  # "11", "1234-5678"
_SLASH_WORD_RE = re.compile(r"(?P<letter>[a-z])/(?P<word>[a-záéíóúâêôãõçñü]{3,})")  # "c/queso", "s/juros"
_ROOM_WORDS = frozenset({"room", "rm", "suite", "ste", "apt", "apartment", "unit", "office",  # before a number
                         "rooms", "suites", "apts", "apartments", "units", "offices"})
_STREET_PREPOSITIONS = frozenset({"on", "at", "off", "along", "down", "up", "onto"})  # "on Main St."
_STREET_TYPES = {"St": "Street", "Ave": "Avenue", "Rd": "Road", "Blvd": "Boulevard", "Ln": "Lane", "Hwy": "Highway",
                 "Pkwy": "Parkway"}
# a street's type, short or in full, after its name: "123 Main St", "2200 Oak Avenue"
_STREET_NAMES = frozenset(_STREET_TYPES) | frozenset(_STREET_TYPES.values()) | frozenset(
    "Drive Dr Way Court Ct Place Pl Terrace Circle Cir Square Sq Trail Plaza".split())
_COMPASS_POINTS = {"N": "North", "S": "South", "E": "East", "W": "West", "NE": "Northeast", "NW": "Northwest",
                   "SE": "Southeast", "SW": "Southwest"}
# clothing sizes, and the words that name them: "sizes S/M/L", "tallas XS-XXL"
_CLOTHING_SIZES = frozenset("XXS XS S M L XL XXL XXXL 2XL 3XL 4XL".split())
_SIZE_WORDS = frozenset("size sizes talla tallas tamanho tamanhos maat maten".split())
# the parts of an English address after its street: "Oak St. Suite 200", "Elm St. Apt. 4B"
_EN_ADDRESS_UNITS = frozenset("apt apartment suite ste unit fl floor bldg building rm room dept".split())
_EN_ORDINAL_RE = re.compile(r"\d+(?:st|nd|rd|th)")  # "5th" before "Ave"
_HANDLE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{1,29}")
