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
which rule a token matches. A phone number written as groups between spaces ("912 345 678") spans
tokens, so it is found first, over the whole text (``_phone_groups``); then, token by token, in
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

import datetime
import enum
import logging
import re
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Callable, Optional, TypeVar

from api.text.errors import NormalizationModeError
from api.text.normalization_en import EnglishRules
from api.text.normalization_es import SpanishRules
from api.text.normalization_markdown import token_line_starts, without_markdown, without_path_arrows
from api.text.normalization_nl import DutchRules
from api.text.normalization_pt import PortugueseRules
from api.text.normalization_rules import Abbreviation, LanguageRules, ParsedNumber
from api.text.normalization_scripts import fraction_character, mixed_fraction, read_mixed_number, read_scripts
from api.text.normalization_units import ATTACHED_ONLY, STANDALONE, UNIT_SYMBOLS, attached_unit, number_range
from api.text.normalization_web import read_address
from api.text.speech import without_pictographs

__all__ = [
    "NormalizationMode",
    "NormalizedText",
    "WordAlignment",
    "goes_on_after_meridiem",
    "known_abbreviations",
    "normalize",
    "rules_for",
]

logger = logging.getLogger(__name__)

_RULES: dict[str, LanguageRules] = {
    r.code: r for r in (EnglishRules(), SpanishRules(), PortugueseRules(), DutchRules())
}

_EXTENSION_RE = re.compile(r"x(\d{1,5})")  # "555-0100 x123"
_KEYPAD_CODE_RE = re.compile(r"\*(?P<digits>\d{2,3})#?")  # "*67", "*69": a service code, dialled
_SPACES_RE = re.compile(r"\s*")
_LOCALE_RE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*")
_LEAD = "\"'([{¿¡«“‘„‹"
_TRAIL = "\"'.,;:!?)]}»”’›…"
_SENTENCE_END = set(".!?…")

_SYMBOLS = {"$": "USD", "US$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY", "R$": "BRL", "MX$": "MXN", "₹": "INR",
            "C$": "CAD", "CA$": "CAD", "A$": "AUD", "AU$": "AUD"}
_CODES = {"USD", "EUR", "GBP", "JPY", "BRL", "MXN", "INR", "CAD", "AUD"}
# a mask of three or more "*", "•", "x" or "X" (more groups of two or more may follow, joined by
# "-"), then the digits it leaves: "****1234", "XXXX-XXXX-1234", "xxx-xx-1234"
_MASK_RE = re.compile(r"(?:[*•]{3,}|x{3,}|X{3,})(?:-?(?:[*•]{2,}|x{2,}|X{2,}))*")
_MASKED_DIGITS_RE = re.compile(rf"{_MASK_RE.pattern}[-\s]?(?P<digits>\d{{2,6}})")
_ELLIPSIS_DIGITS_RE = re.compile(r"(?:\.{3}|…)(?P<digits>\d{4})")  # "checking (...4821)": an account's last four
_SHORT_SCALES = frozenset({"mln", "mld"})  # scales written apart as short forms: "€5 mln."
_DOLLAR_CODES = frozenset({"USD", "MXN", "CAD", "AUD"})  # what a bare "$" may be: "$1.500 MXN" is pesos
_SYM = r"US\$|R\$|MX\$|CA?\$|AU?\$|[$€£¥₹]"
_MONEY_SCALE = "k|K|m|M|bn|b|B|T|mln|mld"  # "$5M", "€2,5mld": keys of ``scale_words``, any case
# what a money scale multiplies by, to tell a range's order ("$500K-$1M" rises)
_SCALE_VALUES = {"k": 10**3, "m": 10**6, "mln": 10**6, "b": 10**9, "bn": 10**9, "mld": 10**9, "t": 10**12}
# ",-" after a whole amount is the Dutch/German "no cents": "€5,-".
# "$.99": cents alone, as prices are written
_PREFIX_MONEY_RE = re.compile(
    rf"(?P<sign>[-\u2212])?(?P<sym>{_SYM})(?P<num>\d[\d.,]*?|[.,]\d{{1,2}})(?:,--?)?(?P<scale>{_MONEY_SCALE})?"
)
_CENTS_RE = re.compile(r"(?P<num>\d{1,3}(?:\.\d{1,2})?)\s?¢")  # "99¢", "12.5¢": cents of a dollar
_SUFFIX_MONEY_RE = re.compile(rf"(?P<num>[-\u2212]?\d[\d.,]*?)(?:,--?)?\s?(?P<sym>{_SYM})")
# "$10-$20", "$10-20", "€5–€10", "$1-2M", "$80K-$120K": a range of amounts with its symbol in front
_PREFIX_MONEY_RANGE_RE = re.compile(
    rf"(?P<sym>{_SYM})(?P<low>\d[\d.,]*?)(?P<low_scale>{_MONEY_SCALE})?[-–](?:(?P=sym))?"
    rf"(?P<high>\d[\d.,]*?)(?P<scale>{_MONEY_SCALE})?"
)
_AMOUNT_RANGE_RE = re.compile(r"(?P<low>\d[\d.,]*?)[-–](?P<high>\d[\d.,]*)")  # "10-20 €"
_TIME_RE = re.compile(r"(\d{1,2}):(\d{2})(?:\s?([ap])\.?m\.?)?", re.IGNORECASE)
_HOUR_MERIDIEM_RE = re.compile(r"(\d{1,2})\s?([ap])\.?m\.?", re.IGNORECASE)
_CLOCK_DURATION_RE = re.compile(r"(\d{1,2}):(\d{2}):(\d{2})")  # "1:05:30"
_CLOCK_LEADS = {"en": {"at"}, "es": {"las"}, "pt": {"às", "as"}, "nl": {"om"}}  # a time of day follows
_H_TIME_RE = re.compile(r"(\d{1,2})h(\d{2})?")
_TIME_H_RE = re.compile(r"(\d{1,2}):(\d{2})h")  # "9:00h" (es, pt): a time and its unit
_DOT_TIME_RE = re.compile(r"(\d{1,2})\.(\d{2})")  # "14.30 uur": a time only before its unit
# signs written two ways: stuck to a number "×" is "x" ("2×": "two times"); "+/-" is "±"
_SIGN_ALIASES = {"×": "x", "+/-": "±", "<=": "≤", ">=": "≥"}
_COMPARISONS = frozenset({"<", ">", "≤", "≥", "<=", ">="})
_FLIGHT_WORDS = frozenset({"flight", "flights", "flt", "flt."})
_AIRLINE_CODE_RE = re.compile(r"[A-Z]{2}|[A-Z]\d|\d[A-Z]")  # "DL", "B6", "9W"
_STATUS_LEADS = frozenset({"http", "error", "status"})
_IPV4_RE = re.compile(r"(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})")
_RESOLUTION_RE = re.compile(r"(480|576|720|1080|1440|2160|4320)p")
_PRESSURE_RE = re.compile(r"(\d{2,3})/(\d{1,3})")  # "120/80" after "BP"
# "401k", "401(k" (its ")" is split off as trailing punctuation), "403b", "457(b"
_PLAN_NAME_RE = re.compile(r"(?P<section>401|403|457)(?P<open>\(?)(?P<letter>[kb])")
_ROMAN_RE = re.compile(r"(X{0,3})(IX|IV|VI{0,3}|I{1,3}|)")
_ROMAN_UNITS = ("", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX")
_SQUARE_UNITS = {"ft": "ft2", "m": "m2", "km": "km2", "cm": "cm2", "mm": "mm2"}  # after "sq"
_AMPERSAND_WORDS_RE = re.compile(r"[^\W\d_]+(?:&[^\W\d_]+)+")
_COUNTRY_CODE_RE = re.compile(r"\+\d{1,3}")  # "+34" before a phone number's groups
_BARE_HOUR_RE = re.compile(r"1[0-2]|0?[1-9]")  # an hour of a 12-hour clock, "2" in "2-3pm"
_MERIDIEM_TOKENS = {"am": "am", "pm": "pm", "a.m": "am", "p.m": "pm", "a.m.": "am", "p.m.": "pm"}
# "9 a.m.–5 p.m.", "9 AM-5 PM": a meridiem that runs on, through a dash, into the range's end
_MERIDIEM_THEN_RE = re.compile(r"(?P<meridiem>[ap]\.?m\.?)[-–](?P<rest>\d.*)", re.IGNORECASE)
_ISO_DATE_RE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_ISO_DATETIME_RE = re.compile(r"(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})T(?P<h>\d{2}):(?P<mi>\d{2})(?::\d{2}(?:\.\d+)?)?"
                              r"(?P<zone>Z|[+-]\d{2}:?\d{2})?")
# the word before a time of day (the second where the hour is one): "at ten", "a la una", "à uma"
_NAMED_TIMES = frozenset({"noon", "midnight", "mediodía", "medianoche", "meio-dia", "meia-noite", "middag",
                          "middernacht"})
_AT_WORDS = {"en": ("at", "at"), "es": ("a las", "a la"), "pt": ("às", "à"), "nl": ("om", "om")}
_DAY_MONTH_RE = re.compile(r"(\d{1,2})-(\d{1,2})")
_NUMERIC_DATE_RE = re.compile(r"(\d{1,2})([/.-])(\d{1,2})\2(\d{4}|\d{2})")
_FRACTION_RE = re.compile(r"(\d{1,2})/(\d{1,2})")
_MONTH_YEAR_RE = re.compile(r"(0?[1-9]|1[0-2])/((?:19|20)\d\d)")  # "12/2025", "03/2027": a month of a year
_MIXED_DENOMINATORS = frozenset({2, 3, 4, 8, 16})  # "2 1/2 cups", "5 3/8 in"
_ROUND_PLURALS = {"100s": "hundreds", "1000s": "thousands", "1000000s": "millions"}  # English
_SHORT_DECADE_RE = re.compile(r"’?([1-9]0)s")  # "90s" outside English: "los noventa"
_ELIDED_YEAR_RE = re.compile(r"’?(0[1-9]|[1-9]\d)")  # "'23", "’05" (English)
_DECADE_RE = re.compile(r"’?(\d{3}0|\d0)s")  # "1990s", "90s", "’90s" (an apostrophe of elision)
_PIECE_RE = re.compile(r"\d+|[^\W\d_]+|\s+|.", re.UNICODE)
# "~20", "~$20", "~5km", "+1"; "#1" ("#" before a number only: "#2024goals" is a hashtag)
# "±5%", "+/-5", "<5 min", ">=18"
_SIGN_BEFORE_RE = re.compile(r"(?P<sign>[~+±≤≥]|\+/-|[<>]=?)(?P<rest>[$€£¥₹]?\d\S*)")
_NUMBER_SIGN_RE = re.compile(r"(?P<sign>#)(?P<rest>\d[\d.,]*|[A-Z]{1,3}-?\d[A-Z\d-]*)")  # "#1", "#A12345", "#A-12345"
# "50+", "1.5x", "2×", "$1M+" (an amount with its scale)
_SIGN_AFTER_RE = re.compile(
    r"(?P<rest>\d(?:[\d.,]*\d)?(?:[-–]\d(?:[\d.,]*\d)?)?|[$€£¥₹]\d(?:[\d.,]*\d)?(?:k|M|bn)?)(?P<sign>[+x×])")
# "1.2k", "2.5M", "3bn": a whole number before "k" or "M" is often a name ("401k", "4k TV", "a 5k race", "3M")
_SCALED_RE = re.compile(r"(?P<num>\d+[.,]\d+)(?P<scale>k|M|B)|(?P<whole>\d[\d.,]*)(?P<bn>bn)")
_PERCENT_BEFORE_DASH_RE = re.compile(r"\s?%(?=\s?[-–])")
_HOURS_MINUTES_RE = re.compile(r"(?P<h>\d{1,3})h(?P<m>[0-5]?\d)(?P<unit>m|min)?")
_HOURS_RE = re.compile(r"(?P<h>\d{1,3})h")
_MINUTES_RE = re.compile(r"(?P<m>[0-5]?\d)(?:m|min)")
# "1M+", "100k+": a count, with the "+" that "401k" and "3M" never have
_SCALED_PLUS_RE = re.compile(r"(?P<num>\d{1,3}(?:[.,]\d+)?)(?P<scale>k|M)\+")
_RATING_RE = re.compile(r"(?P<score>\d+[.,]\d+)/(?P<scale>\d{1,3})")  # "4.5/5"
_WHOLE_RATING_RE = re.compile(r"(?P<score>\d{1,3})/(?P<scale>\d{1,3})")  # "10/10", when ``_is_score``
# After a whole "a/10" these make it a fraction: "3/10 of the budget", "3/10 de"
_STARS = frozenset({"star", "stars", "estrella", "estrellas", "estrela", "estrelas", "ster", "sterren"})
# measures a recipe counts in halves and quarters: after one, "3/4" is a fraction even where a date
# could stand ("Tuesday 3/4 cup"); the other units are in the languages' unit tables
_FRACTION_NOUNS = frozenset("""cup cups taza tazas cucharada cucharadas cucharadita cucharaditas xícara xícaras
    colher colheres kop kopje kopjes theelepel theelepels eetlepel eetlepels""".split())
_FRACTION_OF = frozenset({"of", "de", "do", "da", "del", "van"})
# "$9.99/month", "5€/kg", "20km/day": an amount, "/" and a word (_read_per)
_PER_AMOUNT_RE = re.compile(
    rf"(?:{_SYM})?(?:\d[\d.,]*|[.,]\d{{1,2}})(?P<suffix>[$€£¥₹¢]|[A-Za-z]{{1,3}})?/[^\W\d_]{{1,12}}")
# a word after "/" is "per" it when lowercase ("month", "mes"): "3D/VR", "10/Jan", "101/B" are not
_PER_WORD_RE = re.compile(r"[^\W\d_A-Z]{2,12}")
_R = TypeVar("_R")  # what a guarded reader returns
_EN_MONTHS = {m.lower() for full in EnglishRules.months for m in (full, full[:3])} | {"sept"}
# capitalised short days and months said in full before a date ("Sat 10-2", "Nov 3"); "May" is itself
_EN_SHORT_DAYS = frozenset(day.title() for day in EnglishRules.weekday_abbreviations)
# words after which a short day name is one ("on Fri.", "by Wed"): "Sat" and "Sun" stay words elsewhere
_EN_DAY_LEADS = frozenset("on by every next this last until till from through before after since each".split())
# Nouns after four digits that make them a count, not a year ("1999 people"); a year to 1899 is a
# count before any plural (``_looks_plural``), a later one only before these: "2024 models" is a year
_EN_COUNT_NOUNS = frozenset("""people persons men women children kids staff users customers clients employees
members students participants patients applicants attendees guests visitors subscribers followers viewers
listeners readers fans residents households families workers volunteers passengers voters votes units items
products orders tickets calls messages emails texts reviews downloads copies pages words points miles
kilometers steps calories seats rooms homes houses jobs cases books songs files records rows entries requests
transactions accounts shares hours minutes seconds days weeks nights feet meters acres servings signatures
registrations bookings reservations questions answers""".split())
# Words before four digits that make them a year: "in 1999 people were", "the 2024 models"
_EN_YEAR_LEADS = frozenset("""in since of from until till by the this that before after during circa ca c early
late mid year years spring summer fall autumn winter class vintage model fiscal fy season""".split())
_NOT_PLURALS = frozenset("was has his its this thus plus yes always perhaps across unless whereas besides".split())
_EN_TIMES_OF_DAY = frozenset("morning afternoon evening night at".split())
_EN_SHORT_MONTHS = {full[:3]: full for full in EnglishRules.months if len(full) > 3} | {"Sept": "September"}
# Capitalised words that go on a time's sentence after "a.m."/"p.m." ("9 a.m. Monday through
# Friday", "3 p.m. Eastern", "5 p.m. EST"): the abbreviation's period is no full stop before them.
_AFTER_TIME_WORDS = frozenset(
    {day.lower() for day in EnglishRules.weekday_abbreviations.values()} | {m.lower() for m in EnglishRules.months}
    | set("eastern central mountain pacific atlantic alaska hawaii greenwich".split())
    | set("et ct mt pt est cst mst pst edt cdt mdt pdt akst akdt hst gmt utc bst cet cest aest aedt ist jst".split()))
_DAY_SPAN_RE = re.compile(r"(\d{1,2})(?:st|nd|rd|th)?[-–](\d{1,2})(?:st|nd|rd|th)?")  # "1-5", "24th-26th"
_DAY_RANGE_RE = re.compile(r"(?P<first>[^\W\d_]{2,5})\.?[-–](?P<last>[^\W\d_]{2,5})")
# English opening hours' one- and two-letter days: "M-F", "M–Th", "Tu-Sa"
_EN_LETTER_DAYS = {"M": "Monday", "T": "Tuesday", "Tu": "Tuesday", "W": "Wednesday", "Th": "Thursday",
                   "F": "Friday", "Sa": "Saturday", "Su": "Sunday"}
_LETTER_DAY_RANGE_RE = re.compile(r"(?P<first>Tu|Th|Sa|Su|[MTWF])[-–](?P<last>Tu|Th|Sa|Su|[MTWF])")
# Spanish one-letter days, in the week's order ("X" is miércoles): "L-V", "L-S"; a range only forward
_ES_LETTER_DAYS = {"L": "lunes", "M": "martes", "X": "miércoles", "J": "jueves", "V": "viernes", "S": "sábado",
                   "D": "domingo"}
_ES_LETTER_DAY_RANGE_RE = re.compile(r"(?P<first>[LMXJVSD])[-–](?P<last>[LMXJVSD])")


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
    """Rules for a language or locale code ("pt-BR" -> Portuguese); None when unsupported."""
    if not language:
        return None
    return _RULES.get(language.lower().replace("_", "-").split("-")[0])


def goes_on_after_meridiem(word: str) -> bool:
    """Whether a capitalised ``word`` after "a.m." or "p.m." goes on with the time: a day, a month
    or a time zone ("9 a.m. Monday", "3 p.m. Eastern", "5 p.m. EST"), so the period is no full stop."""
    return word.lower() in _AFTER_TIME_WORDS


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


@dataclass(frozen=True, slots=True)
class _Token:
    raw: str
    lead: str
    core: str
    trail: str


def _split_token(raw: str) -> _Token:
    i, j = 0, len(raw)
    while i < j and raw[i] in _LEAD:
        i += 1
    while j > i and raw[j - 1] in _TRAIL:
        j -= 1
    return _Token(raw, raw[:i], raw[i:j], raw[j:])


def _stars_are_literal(raw: str) -> bool:
    """Whether the stars of ``raw`` are no Markdown: a keypad's service code ("*67") or masked
    digits ("****1234")."""
    return _is_mask(raw) or _KEYPAD_CODE_RE.fullmatch(raw.rstrip(".,;:!?")) is not None


def _is_mask(raw: str) -> bool:
    """Whether ``raw`` is masked digits or their mask ("***-**-6789", "****"), whose stars are no
    emphasis."""
    core = raw.rstrip(".,;:!?")
    return _MASKED_DIGITS_RE.fullmatch(core) is not None or _MASK_RE.fullmatch(core) is not None


def _starts_upper(token: Optional[_Token]) -> bool:
    return token is not None and token.core[:1].isupper()


def _starts_digit(token: Optional[_Token]) -> bool:
    return token is not None and token.core[:1].isdecimal()


def _capitalize_like(words: str, original: str) -> str:
    return words[:1].upper() + words[1:] if original[:1].isupper() else words


def _pluralize(words: str) -> str:
    """"nineteen ninety" -> "nineteen nineties" (English decades)."""
    head, _, last = words.rpartition(" ")
    last = last[:-1] + "ies" if last.endswith("y") else last + "s"
    return f"{head} {last}" if head else last


class _TokenReader:
    """Reads the tokens of one text; ``read_all()[i]`` is the word list of token i."""

    def __init__(self, rules: LanguageRules, raws: list[str], line_starts: Optional[list[bool]] = None) -> None:
        self.rules = rules
        self.line_starts = line_starts or [False] * len(raws)
        raws = without_path_arrows(without_pictographs(raws))
        self.tokens = [_split_token(r) for r in without_markdown(raws, line_starts, literal=_stars_are_literal)]
        self.phone_groups = _phone_groups(self.tokens)

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
            if self._after_between(i) and any(d in t.core for t in self.tokens[i: i + 1 + consumed] for d in _DASHES):
                # "between 1-2 p.m.": "between one and two", not "between one to two"
                code = self.rules.code
                reading = reading.replace(f" {_RANGE_WORD[code]} ", f" {_BETWEEN_AND[code]} ", 1)
            words, last_trail = reading.split(), tok.trail
            if consumed:
                last_trail = self._consumed_trail(i + consumed)
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

    def _after_between(self, i: int) -> bool:
        prev = self.tokens[i - 1] if i > 0 else None
        return prev is not None and not prev.trail and prev.core.lower() == _BETWEEN[self.rules.code]

    def _consumed_trail(self, j: int) -> str:
        """Trailing punctuation of a token read together with the one before it."""
        tok = self.tokens[j]
        key = tok.raw.lower()
        for meridiem in ("a.m.", "p.m."):  # the abbreviation's own period is not punctuation
            if key.startswith(meridiem):
                return self._abbreviation_trail(tok.raw[len(meridiem) :], j, title=False, can_end=True)
        if tok.trail.startswith(".") and (tok.core in UNIT_SYMBOLS or tok.core in _SQUARE_UNITS
                                          or tok.core in _EN_SHORT_MONTHS or tok.core.lower() in _SHORT_SCALES):
            # "5 lbs. of flour", "21 Sept. at noon", "€5 mln. voor": a short form's own period, a
            # full stop only where one ends
            return self._abbreviation_trail(tok.trail[1:], j, title=False, can_end=True)
        return tok.trail

    def _next(self, i: int) -> Optional[_Token]:
        return self.tokens[i + 1] if i + 1 < len(self.tokens) else None

    def _abbreviation_trail(self, rest: str, i: int, title: bool, can_end: bool) -> str:
        """Punctuation after an abbreviation that ended in '.': its period also ends the sentence
        at the end of the text, or before an uppercase word when it ``can_end`` (never for
        titles). Other punctuation after it ("St., Springfield") is the sentence's own."""
        if title or rest:
            return rest
        nxt = self._next(i)
        ends = nxt is None or (can_end and _starts_upper(nxt) and not self._goes_on_after_time(i, nxt))
        return "." + rest if ends else rest

    def _goes_on_after_time(self, i: int, nxt: _Token) -> bool:
        """Whether ``nxt``, after the meridiem at token ``i``, goes on with the time ("9 a.m. Monday",
        "3 p.m. Eastern", "5 p.m. EST") rather than starting a sentence."""
        return (self.rules.code == "en" and self.tokens[i].raw.lower().startswith(("a.m.", "p.m."))
                and not nxt.lead and goes_on_after_meridiem(nxt.core))

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
            return _BY_WORD[self.rules.code], 0
        if tok.core in ("x", "×") and self._between_count_and_price(i):  # "2 x $19.99"
            return self.rules.symbol_words["×"], 0
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
        if tok.core == "/" and i > 0 and self.tokens[i - 1].core.lower() in _ROOMS and _starts_digit(self._next(i)):
            return _BETWEEN_AND[self.rules.code], 0  # "3 bd / 2 ba": "and"
        if tok.core == "@" and self.rules.code == "en" and not tok.trail and _starts_digit(self._next(i)):
            return "at", 0  # "Tue 12/8 @ 3:15pm"
        graded = _GRADE_RE.fullmatch(tok.core)
        if graded:  # "an A+", "O+ blood": the letter and "plus"
            return f"{graded.group('letters')} {self.rules.symbol_words['+']}", 0
        if tok.core.isalpha() and tok.core not in _CODES:  # a word of letters only: no rule below reads one
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
            self._read_time_range,
            self._read_date,
            self._read_percent,
            self._read_measure,
            self._read_rooms,
            self._read_per,
            self._read_scaled,
            self._read_mixed_number,
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
            return self.rules.symbol_words[_SIGN_ALIASES.get(tok.core, tok.core)], 0
        if tok.core in _DASHES and not tok.trail and self._number_follows(i) and self._after_meridiem(i):
            return _RANGE_WORD[self.rules.code], 0  # "9am - 5pm", "9:00 AM – 5:00 PM"
        if tok.core in _DASHES and not tok.trail and i > 0 and self._in_day_range(i - 1):
            return _RANGE_WORD[self.rules.code], 0  # "Mon. - Fri."
        return None, 0

    def _street_word(self, i: int) -> Optional[str]:
        """An English street's type written short without its period, after the street's name
        ("Main St, Springfield", "5th Ave NW", "Elm Rd and"), and a compass point after one ("NW"
        -> "Northwest"); None elsewhere: before a capitalised word "St" may be "Saint"."""
        tok = self.tokens[i]
        if tok.core not in _STREET_TYPES and tok.core not in _COMPASS_POINTS:
            return None
        prev, nxt = self.tokens[i - 1] if i > 0 else None, self._next(i)
        if prev is None or prev.trail or tok.lead:
            return None
        if tok.core in _COMPASS_POINTS and prev.core in _STREET_TYPES:
            return _COMPASS_POINTS[tok.core]
        if tok.core not in _STREET_TYPES or not (prev.core[:1].isupper() or _EN_ORDINAL_RE.fullmatch(prev.core)):
            return None
        ends = bool(tok.trail) or nxt is None or nxt.core in _COMPASS_POINTS or nxt.core[:1].islower()
        return _STREET_TYPES[tok.core] if ends else None

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

    def _after_meridiem(self, i: int) -> bool:
        """Whether token ``i`` follows a time with its meridiem ("9am", "5:00 PM", "9 a.m.")."""
        prev = self.tokens[i - 1] if i > 0 else None
        if prev is None or prev.trail not in ("", "."):
            return False
        word = (prev.core + prev.trail).lower()
        return word in _MERIDIEM_TOKENS or bool(_HOUR_MERIDIEM_RE.fullmatch(prev.core))

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
            if abbr is None or any(c not in _TRAIL for c in rest[k:]):
                continue
            nxt = self._next(i)
            if abbr.before_number and not _starts_digit(nxt) and (nxt is None or nxt.core.lower() not in abbr.nouns):
                return None, 0
            # "St. Louis" is Saint; "Main St., Springfield": punctuation after it ends a street name
            alternative = abbr.before_capital is not None and _starts_upper(nxt) and rest[k:] in ("", ".")
            words = _capitalize_like(abbr.before_capital if alternative else abbr.expansion, rest)
            trail = rest[k:]
            if rest[k - 1] == ".":
                trail = self._abbreviation_trail(trail, i, abbr.title or alternative, abbr.can_end)
            # The reader attaches tok.trail; hand back the adjusted one through a 1-token view.
            self.tokens[i] = _Token(tok.raw, tok.lead, rest[:k], trail)
            return words, 0
        return None

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

    def _read_calendar_word(self, i: int) -> Optional[str]:
        """Short day and month names: a range of days in every language ("Mon-Fri" -> "Monday
        to Friday", "lun-vie" -> "lunes a viernes", "seg. a sex."; in English "M-F" too), and in
        English a capitalised one before a date or time ("Sat 10-2", "Mon, Nov 3" -> "Monday,
        November third"), and a capitalised day after a word that leads one ("on Fri.", "by Wed",
        "every Tues"). Elsewhere "Sat", "Sun", "mar" and "do" are words."""
        r, tok = self.rules, self.tokens[i]
        days = r.weekday_abbreviations
        m = _DAY_RANGE_RE.fullmatch(tok.core)
        letter_days = self._letter_day_range(tok.core)
        if letter_days is not None:
            said = letter_days
        elif m:
            first, last = days.get(m.group("first").lower()), days.get(m.group("last").lower())
            if first is None or last is None:
                return None
            said = _capitalize_like(f"{first} {_RANGE_WORD[r.code]} {last}", tok.core)
        elif tok.trail in ("", ".", ",", ".,") and self._in_day_range(i):
            said = _capitalize_like(days[tok.core.lower()], tok.core)  # "Mon to Fri", "seg. a sex.", "ma t/m vr"
        elif (
            r.code == "en"
            # "Nov. 3" is an abbreviation ("nov."); "Tue. 5" has none
            and (tok.core in _EN_SHORT_DAYS or (tok.core in _EN_SHORT_MONTHS and not tok.trail))
            and tok.trail in ("", ".", ",", ".,")
            and (self._before_date(i) or (tok.core in _EN_SHORT_DAYS and self._after_day_lead(i)))
        ):
            said = days.get(tok.core.lower()) or _EN_SHORT_MONTHS[tok.core]
        elif r.code != "en" and tok.trail in (".", ".,"):
            said = self._short_date_word(i)  # "8 de dic.", "mar. 8"
            if said is None:
                return None
        elif r.code != "en" and tok.trail in ("", ",") and tok.core.lower() in days and self._before_day_and_month(i):
            said = _capitalize_like(days[tok.core.lower()], tok.core)  # "di 12 dec", "mar 8 de diciembre"
        elif r.code != "en" and not tok.trail.startswith(".") and (month := self._short_month_after_day(i)):
            said = month  # "12 dec", "8 de dic": no period
        else:
            return None
        if tok.trail.startswith("."):  # the short form's own dot: a full stop only where one ends
            trail = self._abbreviation_trail(tok.trail[1:], i, title=False, can_end=True)
            self.tokens[i] = _Token(tok.raw, tok.lead, tok.core, trail)
        return said

    def _letter_day_range(self, core: str) -> Optional[str]:
        """A range of days written with their letters: English "M-F", "Tu-Sa"; Spanish "L-V", "L-S"
        (forward in the week only, so that sizes such as "S-M" stay); None elsewhere."""
        code = self.rules.code
        if code == "en" and (m := _LETTER_DAY_RANGE_RE.fullmatch(core)) and m.group("first") != m.group("last"):
            first, last = _EN_LETTER_DAYS[m.group("first")], _EN_LETTER_DAYS[m.group("last")]
        elif code == "es" and (m := _ES_LETTER_DAY_RANGE_RE.fullmatch(core)):
            order = list(_ES_LETTER_DAYS)
            if order.index(m.group("first")) >= order.index(m.group("last")):
                return None
            first, last = _ES_LETTER_DAYS[m.group("first")], _ES_LETTER_DAYS[m.group("last")]
        else:
            return None
        return f"{first} {_RANGE_WORD[code]} {last}"

    def _in_day_range(self, i: int) -> bool:
        """Whether the short day name at token ``i`` is an end of a range of short day names
        written apart: "Mon to Fri", "Mon. - Fri.", "lun. a vie.", "seg. a sex.", "ma t/m vr"."""
        days, links = self.rules.weekday_abbreviations, _DAY_RANGE_LINKS[self.rules.code]
        if self.tokens[i].core.lower() not in days:
            return False

        def day(k: int, last: bool) -> bool:  # in English capitalised only: "sun", "sat" are words
            if not 0 <= k < len(self.tokens) or self.tokens[k].lead:
                return False
            tok = self.tokens[k]
            named = tok.core in _EN_SHORT_DAYS if self.rules.code == "en" else tok.core.lower() in days
            return named and (last or tok.trail in ("", "."))

        def link(k: int) -> bool:
            return 0 <= k < len(self.tokens) and self.tokens[k].raw.lower() in links

        return ((day(i, False) and link(i + 1) and day(i + 2, True))
                or (day(i, True) and link(i - 1) and day(i - 2, False)))

    def _before_day_and_month(self, i: int) -> bool:
        """Whether a day of the month and its month follow token ``i``: "12 dec", "8 de diciembre"."""
        r, link = self.rules, 1 if self.rules.day_month_link else 0
        after = self.tokens[i + 1: i + 3 + link]
        if len(after) < 2 + link or any(t.lead for t in after) or any(t.trail for t in after[:-1]):
            return False
        day, month = after[0].core, after[-1].core.lower()
        if link and after[1].core.lower() != r.day_month_link:
            return False
        return (day.isdecimal() and 1 <= int(day) <= 31
                and (month in r.month_abbreviations or month in (name.lower() for name in r.months)))

    def _short_month_after_day(self, i: int) -> Optional[str]:
        """Outside English, the short month at token ``i`` in full after its day ("8 de dic", "12
        dec"), with or without its period; None elsewhere."""
        r, tok = self.rules, self.tokens[i]
        month = r.month_abbreviations.get(tok.core.lower())
        if month is None:
            return None
        link = 1 if r.day_month_link else 0
        before = self.tokens[i - 1 - link: i] if i > link else []
        if (len(before) == 1 + link and not any(t.trail or t.lead for t in before)
                and (not link or before[1].core.lower() == r.day_month_link)
                and before[0].core.isdecimal() and 1 <= int(before[0].core) <= 31):
            return _capitalize_like(month, tok.core)
        return None

    def _short_date_word(self, i: int) -> Optional[str]:
        """Outside English, a short month after its day ("8 de dic.", "8 dec.") or a short day before
        a date ("mar. 8", "seg., 8") in full, as written in capitals or not; None elsewhere."""
        r, tok = self.rules, self.tokens[i]
        key = tok.core.lower()
        month = self._short_month_after_day(i)
        if month is not None:
            return month
        day = r.weekday_abbreviations.get(key)
        if day is not None and _starts_digit(self._next(i)):
            return _capitalize_like(day, tok.core)
        return None

    def _before_date(self, i: int) -> bool:
        """Whether the next token is a day, a time or a month: "3", "10-2", "5pm", "Nov"."""
        nxt = self._next(i)
        return _starts_digit(nxt) or (nxt is not None and not nxt.lead and nxt.core.lower() in _EN_MONTHS
                                      and nxt.core[:1].isupper())

    def _read_address(self, i: int) -> tuple[Optional[str], int]:
        """"support@acme.com", "https://acme.io/docs", "acme.com" (api/text/normalization_web.py)."""
        return read_address(self.tokens[i].core, self.rules), 0

    def _read_money(self, i: int) -> tuple[Optional[str], int]:
        """An amount of money: "$5", "-€3", "5 USD", "€ 5", "USD 50", "9,99 €/mes"; with its scale, a suffix
        ("$2.5M") or a word ("$1.5 million": ``_spelled_scale``); a range ("$10-$20", "10-20 €")."""
        r, tok, nxt = self.rules, self.tokens[i], self._next(i)
        m = _PREFIX_MONEY_RE.fullmatch(tok.core)
        if m:
            num = r.parse_amount(m.group("num"), dollar_sign="$" in m.group("sym"))
            scale = m.group("scale")
            if num is not None and (scale is None or scale.lower() in r.scale_words):
                if m.group("sign"):
                    num = ParsedNumber(num.integer, num.fraction, True)
                code = _SYMBOLS[m.group("sym")]
                scale, consumed = (scale.lower(), 0) if scale else self._spelled_scale(i, 0, code)
                code, consumed = self._code_after(i, consumed, m.group("sym"), code)
                return r.read_currency(num, code, scale, singular=self._adjective_amount(i, consumed)), consumed
        if tok.core.count("/") == 1 and all(_PREFIX_MONEY_RE.fullmatch(part) for part in tok.core.split("/")):
            # "$35/$45": two prices, each read as one ("first and second bag"), a pause between them
            said = [_TokenReader(r, [part])._read_money(0)[0] for part in tok.core.split("/")]
            if None not in said:
                return ", ".join(said), 0
        m = _PREFIX_MONEY_RANGE_RE.fullmatch(tok.core)
        if m and all(s is None or s.lower() in r.scale_words for s in m.group("low_scale", "scale")):
            code, scale, low_scale = _SYMBOLS[m.group("sym")], m.group("scale"), m.group("low_scale")
            scale, consumed = (scale.lower(), 0) if scale else self._spelled_scale(i, 0, code)
            code, consumed = self._code_after(i, consumed, m.group("sym"), code)
            said = self._money_range(m.group("low"), m.group("high"), code, scale, i, consumed,
                                     low_scale.lower() if low_scale else None)
            if said is not None:
                return said, consumed
        m = _SUFFIX_MONEY_RE.fullmatch(tok.core)
        if m:
            num = r.parse_amount(m.group("num"), dollar_sign="$" in m.group("sym"))
            if num is not None:
                return r.read_currency(num, _SYMBOLS[m.group("sym")], singular=self._adjective_amount(i, 0)), 0
        m, consumed = _CENTS_RE.fullmatch(tok.core), 0
        if m is None and nxt is not None and nxt.core == "¢" and not tok.trail and not nxt.lead:  # "99 ¢"
            m, consumed = _CENTS_RE.fullmatch(tok.core + "¢"), 1
        if m is not None:
            return self._cents(m.group("num"), i, consumed)
        if nxt is None or tok.trail:
            return None, 0
        nxt_core, per = self._split_per(nxt.core)  # "€ 5/kg", "9,99 €/mes"
        negative = tok.core[:1] in "-\u2212" and tok.core[1:] in _SYMBOLS  # "-€ 23,50"
        symbol = tok.core[1:] if negative else tok.core
        if symbol in _SYMBOLS or symbol in _CODES:  # "€ 5", "USD 50"
            code = _SYMBOLS.get(symbol, symbol)
            num = r.parse_amount(nxt_core, dollar_sign=code in _DOLLAR_CODES)
            if num is not None and negative:
                num = ParsedNumber(num.integer, num.fraction, True)
            if num is not None and not nxt.lead:
                if per:
                    return r.read_currency(num, code) + per, 1
                scale, consumed = self._spelled_scale(i, 1, code)
                return r.read_currency(num, code, scale, singular=self._adjective_amount(i, consumed)), consumed
            return None, 0
        code = (
            _SYMBOLS.get(nxt_core)
            or (nxt_core if nxt_core in _CODES else None)
            or r.currency_by_name.get(nxt_core.lower())
        )
        if not code or nxt.lead:
            return None, 0
        num = r.parse_amount(tok.core, dollar_sign=code in _DOLLAR_CODES)
        if num is not None:  # "5 USD", "3,50 €", "1.000.000 euros"
            return r.read_currency(num, code, singular=not per and self._adjective_amount(i, 1)) + per, 1
        m = _AMOUNT_RANGE_RE.fullmatch(tok.core)  # "10-20 €"
        said = self._money_range(m.group("low"), m.group("high"), code, None, i, 1) if m else None
        return (said + per, 1) if said is not None else (None, 0)

    def _code_after(self, i: int, consumed: int, symbol: str, code: str) -> tuple[str, int]:
        """The currency an ISO code right after an amount with a symbol names, and the tokens read
        with it: "$100 USD" says "dollars" once; "$1.500 MXN" is pesos and "$20 CAD" Canadian
        dollars, as a bare "$" is the sign of many dollars and pesos. So does the currency's name
        ("$1,234 pesos", "$5 dollars" say it once). (code, consumed) when neither follows, or one the
        symbol cannot mean ("€5 USD")."""
        last, nxt = self.tokens[i + consumed], self._next(i + consumed)
        if nxt is None or last.trail or nxt.lead:
            return code, consumed
        named = nxt.core if nxt.core in _CODES else self.rules.currency_by_name.get(nxt.core.lower())
        if named is not None and (named == code or (symbol == "$" and named in _DOLLAR_CODES)):
            return named, consumed + 1
        return code, consumed

    def _cents(self, written: str, i: int, consumed: int) -> tuple[Optional[str], int]:
        """"99¢" -> "ninety-nine cents", "a 50¢ stamp" -> "a fifty cent stamp", "12.5¢" -> "twelve
        point five cents": the language's cents of a dollar."""
        names = self.rules.currencies.get("USD")
        if names is None:
            return None, 0
        if "." in written:  # a decimal of cents (a rate per kilowatt hour), always many
            num = ParsedNumber(*written.split("."))
            return f"{self.rules.read_number(num, names.cent_gender)} {names.cent[1]}", consumed
        n = int(written)
        if self._adjective_amount(i, consumed):
            return f"{self.rules.cardinal(n)} {names.cent[0]}", consumed
        return self.rules.count_noun(n, names.cent, names.cent_gender), consumed

    def _spelled_scale(self, i: int, consumed: int, code: str) -> tuple[Optional[str], int]:
        """The scale written as a word after the amount at token ``i`` (and ``consumed`` tokens
        more), as a key of ``scale_words`` and the tokens read with it: ("m", consumed + 1) for
        "$1.5 million", ("b", consumed + 2) for "$2 mil millones"; a name of the same currency
        after it is read too ("$5 million dollars" says "dollars" once). (None, consumed) without."""
        r, tokens = self.rules, self.tokens
        if not r.spelled_scales or tokens[i + consumed].trail:  # "$5. Million people came."
            return None, consumed
        for width in (2, 1):  # the longer name first: "mil millones" before "mil"
            words = tokens[i + consumed + 1: i + consumed + 1 + width]
            if (len(words) < width or any(w.lead for w in words) or any(w.trail for w in words[:-1])):
                continue
            key = r.spelled_scales.get(" ".join(w.core.lower() for w in words))
            if key is None:
                continue
            consumed += width
            after = tokens[i + consumed + 1] if i + consumed + 1 < len(tokens) else None
            if (not tokens[i + consumed].trail and after is not None and not after.lead
                    and r.currency_by_name.get(after.core.lower()) == code):
                consumed += 1
            return key, consumed
        return None, consumed

    def _money_range(self, low_text: str, high_text: str, code: str, scale: Optional[str], i: int,
                     consumed: int, low_scale: Optional[str] = None) -> Optional[str]:
        """"$10-$20" -> "ten to twenty dollars", "$9.99-$19.99" with both amounts in full, "$1-2M"
        and "$1M-$2M" -> "one to two million dollars", "$500K-$1M" -> "five hundred thousand to one
        million dollars". A first amount that is not the lower ("$20-$10", "$5-$5") is no range of
        prices: both amounts are said in full, "twenty dollars to ten dollars". None unless both
        are amounts. ``scale``, ``low_scale``: keys of ``scale_words`` (an unscaled first amount
        shares the second's scale, as in "$1-2M")."""
        r = self.rules
        dollars = code in _DOLLAR_CODES
        low, high = r.parse_amount(low_text, dollar_sign=dollars), r.parse_amount(high_text, dollar_sign=dollars)
        names = r.currencies.get(code)
        if low is None or high is None or names is None:
            return None
        said_high = r.read_currency(high, code, scale, singular=self._adjective_amount(i, consumed))
        low_value = _amount_value(low) * _SCALE_VALUES.get(low_scale or scale or "", 1)
        if low_value >= _amount_value(high) * _SCALE_VALUES.get(scale or "", 1):
            said_low = r.read_currency(low, code, low_scale)
        elif low_scale is not None and low_scale != scale:
            said_low = self._scaled(low_text, low_scale)
        elif low.fraction and scale is None:
            said_low = r.read_currency(low, code)
        else:
            said_low = r.read_number(low, names.unit_gender)
        return f"{said_low} {_RANGE_WORD[r.code]} {said_high}" if said_low and said_high else None

    def _adjective_amount(self, i: int, consumed: int) -> bool:
        """Whether the amount at token ``i`` (and ``consumed`` more) stands between "a" and a
        word it describes: "a $20 gift card" is "a twenty dollar gift card"; "a $20." is not."""
        if not self._after_article(i):
            return False
        last, j = self.tokens[i + consumed], i + consumed + 1
        nxt = self.tokens[j] if j < len(self.tokens) else None
        return (not last.trail and nxt is not None and not nxt.lead and nxt.core.isalpha() and nxt.core.islower()
                and nxt.core not in self.rules.amount_link_words)

    def _split_per(self, core: str) -> tuple[str, str]:
        """("5", " per kilogram") for "5/kg", (core, "") when it has no "/word" at its end."""
        head, slash, per = core.rpartition("/")
        if not slash or not head or not (per in UNIT_SYMBOLS or _PER_WORD_RE.fullmatch(per)):
            return core, ""
        r = self.rules
        said = r.read_unit_name(UNIT_SYMBOLS[per]) if per in UNIT_SYMBOLS else r.per_words.get(per, per)
        if said is None:
            return core, ""
        return head, f" {r.symbol_words['per']} {said}"

    def _read_ordinal(self, i: int) -> tuple[Optional[str], int]:
        return self.rules.match_ordinal(self.tokens[i].core, self._noun_after(i)), 0

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

    def _read_duration(self, i: int) -> tuple[Optional[str], int]:
        """Hours and minutes: "2h30m", "2h 30m", "2h 30min" -> "two hours thirty minutes" (the "m"
        is minutes after hours, and says the "2h" is not a time of day); in English "1h30" too."""
        r, tok, nxt = self.rules, self.tokens[i], self._next(i)
        if not r.units:
            return None, 0
        m = _HOURS_MINUTES_RE.fullmatch(tok.core)
        consumed = 0
        if m is None:
            hours = _HOURS_RE.fullmatch(tok.core)
            minutes = _MINUTES_RE.fullmatch(nxt.core) if nxt is not None and not tok.trail and not nxt.lead else None
            if hours is None or minutes is None:
                return None, 0
            said = (hours.group("h"), minutes.group("m"))
            consumed = 1
        elif m.group("unit") or r.code == "en":  # "1h30" without its "m" is a time in es/pt/nl
            said = (m.group("h"), m.group("m"))
        else:
            return None, 0
        h, mins = self._amount_of(None, said[0], "h"), self._amount_of(None, said[1], "min")
        return (f"{h} {mins}", consumed) if h and mins else (None, 0)

    def _read_clock_duration(self, i: int) -> tuple[Optional[str], int]:
        """Hours, minutes and seconds written as a clock: "1:05:30" -> "one hour, five minutes and
        thirty seconds", "00:04:10" -> "four minutes and ten seconds" (a race, a video's position,
        a time left); after "at" ("a las", "às", "om") a time of day: "at ten thirty and fifteen
        seconds"."""
        r = self.rules
        m = _CLOCK_DURATION_RE.fullmatch(self.tokens[i].core)
        if m is None or not r.units or int(m.group(2)) > 59 or int(m.group(3)) > 59:
            return None, 0
        prev = self.tokens[i - 1] if i > 0 else None
        if prev is not None and not prev.trail and prev.core.lower() in _CLOCK_LEADS.get(r.code, ()):
            hour, minute, second = (int(g) for g in m.groups())
            if hour > 24:
                return None, 0
            said = r.read_time(hour, minute, None)
            seconds = self._amount_of(None, str(second), "s") if second else None
            return (f"{said} {r.ampersand_word} {seconds}" if seconds else said), 0
        parts = [self._amount_of(None, str(int(value)), unit)
                 for value, unit in zip(m.groups(), ("h", "min", "s")) if int(value)]
        if not parts:
            return self._amount_of(None, "0", "s"), 0
        if None in parts:
            return None, 0
        said = ", ".join(parts[:-1]) + f" {r.ampersand_word} {parts[-1]}" if len(parts) > 1 else parts[0]
        return said, 0

    def _meridiem_after(self, i: int) -> Optional[str]:
        nxt = self._next(i)
        if nxt is None or self.tokens[i].trail or nxt.lead:
            return None
        return _MERIDIEM_TOKENS.get(nxt.core.lower())

    def _read_height(self, i: int) -> tuple[Optional[str], int]:
        """Feet and inches, as a height is said in English: 6'2" -> "six foot two"."""
        tok = self.tokens[i]
        m = _HEIGHT_RE.fullmatch(tok.core) if self.rules.reads_feet_and_inches else None
        if m is None:
            return None, 0
        if not m.group("mark"):
            if not tok.trail.startswith(_INCH_MARKS):
                return None, 0  # "6'2" alone may be anything
            self.tokens[i] = _Token(tok.raw, tok.lead, tok.core, tok.trail[1:])  # the mark is said
        r = self.rules
        return f"{r.cardinal(int(m.group('feet')))} foot {r.cardinal(int(m.group('inches')))}", 0

    def _read_inch_mark(self, i: int) -> tuple[Optional[str], int]:
        """A number with an inch mark, as sizes are written: '4.7" display', '12" x 8"' -> "four
        point seven inches", "twelve inches"; not a number that closes a quotation ('"I am 12"').
        Where a language has a name for inches."""
        r, tok = self.rules, self.tokens[i]
        if not tok.trail.startswith(_INCH_MARKS) or tok.lead.strip("([") or "in" not in r.units:
            return None, 0  # a bracket may open before it ("(12")"), a quote may not
        num = r.parse_number(tok.core)
        if num is None or self._inside_quotation(i):
            return None, 0
        self.tokens[i] = _Token(tok.raw, tok.lead, tok.core, tok.trail[1:])  # the mark is said
        return r.read_measure(num, "in", singular=self._adjective_amount(i, 0)), 0

    def _between_measures(self, i: int) -> bool:
        """Whether token ``i`` stands alone between a measure and a number: '12" x 8"', "10 cm x 20
        cm", "10cm x 20cm" (not "2 x Widget", "1 x 23kg")."""
        tok = self.tokens[i]
        if tok.lead or tok.trail or i == 0 or i + 1 >= len(self.tokens):
            return False
        prev, nxt = self.tokens[i - 1], self.tokens[i + 1]
        measured = (prev.raw.endswith(_INCH_MARKS) or prev.core in UNIT_SYMBOLS
                    or attached_unit(prev.core) is not None)
        return measured and not prev.trail.strip("".join(_INCH_MARKS)) and _starts_digit(nxt)

    def _between_count_and_price(self, i: int) -> bool:
        """Whether token ``i`` stands alone between a count and a price: "2 x $19.99", "3 × €5",
        "2 x 5 €", "2 x 5€"."""
        tok = self.tokens[i]
        if tok.lead or tok.trail or i == 0 or i + 1 >= len(self.tokens):
            return False
        prev, nxt, after = self.tokens[i - 1], self.tokens[i + 1], self._next(i + 1)
        if not prev.core.isdecimal() or prev.trail or nxt.lead:
            return False
        if _PREFIX_MONEY_RE.fullmatch(nxt.core) or _SUFFIX_MONEY_RE.fullmatch(nxt.core):
            return True
        if nxt.core in _SYMBOLS and not nxt.trail and _starts_digit(after):  # "2 x € 5"
            return True
        return (_starts_digit(nxt) and not nxt.trail and after is not None and not after.lead
                and (after.core in _SYMBOLS or after.core in _CODES))

    def _inside_quotation(self, i: int) -> bool:
        """Whether a double quotation mark opened before token ``i`` is still open."""
        open_ = False
        for tok in self.tokens[:i]:
            if '"' in tok.lead or "“" in tok.lead:
                open_ = True
            elif open_ and ('"' in tok.trail or "”" in tok.trail):
                open_ = False
        return open_

    def _read_time(self, i: int) -> tuple[Optional[str], int]:
        r, core = self.rules, self.tokens[i].core
        hour = minute = None
        meridiem, consumed = None, 0
        unit_attached = False
        m = _TIME_RE.fullmatch(core)
        if m:
            hour, minute = int(m.group(1)), int(m.group(2))
            meridiem = m.group(3) and m.group(3).lower() + "m"
        elif r.time_unit and (m := _TIME_H_RE.fullmatch(core)):
            hour, minute, unit_attached = int(m.group(1)), int(m.group(2)), True
        elif r.time_unit and (m := _DOT_TIME_RE.fullmatch(core)) and (
                self._time_unit_after(i) or self._time_range_with_unit_after(i)):
            hour, minute = int(m.group(1)), int(m.group(2))
        elif r.read_meridiem("am") is not None and _HOUR_MERIDIEM_RE.fullmatch(core):
            m = _HOUR_MERIDIEM_RE.fullmatch(core)
            hour, minute, meridiem = int(m.group(1)), 0, m.group(2).lower() + "m"
        elif r.code != "en" and _H_TIME_RE.fullmatch(core):
            m = _H_TIME_RE.fullmatch(core)
            hour, minute = int(m.group(1)), int(m.group(2) or 0)
        elif core.isdecimal() and r.read_meridiem("am") is not None and (
                self._meridiem_after(i) or self._meridiem_runs_on(i)):
            hour, minute = int(core), 0
        if hour is None:
            return None, 0
        if meridiem is None and r.read_meridiem("am") is not None:
            meridiem = self._meridiem_after(i)
            consumed = 1 if meridiem else 0
            if meridiem is None and (until := self._range_after_meridiem(i, hour, minute)) is not None:
                return until
        if minute > 59 or hour > 24 or (meridiem and not 0 <= hour <= 12):
            return None, 0
        if meridiem and r.read_meridiem(meridiem) is None:
            return None, 0
        reading = r.read_time(hour, minute, meridiem)
        if unit_attached or (r.time_unit and self._time_unit_after(i + consumed)):
            # "9:00 uur", "15:00 horas", "14:30 h", "9:00h": the unit is said once, by the reading
            consumed += 0 if unit_attached else 1
            reading = reading.removesuffix(" en punto")
            if r.time_unit not in reading.split():
                reading = f"{reading} {r.time_unit}"
        return reading, consumed

    def _meridiem_runs_on(self, i: int) -> bool:
        """Whether the token after ``i`` is a meridiem joined by a dash to a time ("a.m.–5")."""
        nxt = self._next(i)
        return nxt is not None and not self.tokens[i].trail and not nxt.lead and bool(_MERIDIEM_THEN_RE.fullmatch(nxt.core))

    def _range_after_meridiem(self, i: int, hour: int, minute: int) -> Optional[tuple[str, int]]:
        """"9 a.m.–5 p.m.": the time at token ``i``, its meridiem joined by a dash to the next time
        in the token after it; read as "nine a m to five p m", with the tokens the end took."""
        r, nxt = self.rules, self._next(i)
        m = _MERIDIEM_THEN_RE.fullmatch(nxt.core) if self._meridiem_runs_on(i) else None
        meridiem = _MERIDIEM_TOKENS.get(m.group("meridiem").lower()) if m else None
        if meridiem is None or hour > 12 or minute > 59 or r.read_meridiem(meridiem) is None:
            return None
        self.tokens[i + 1] = _Token(nxt.raw, "", m.group("rest"), nxt.trail)  # the range's end, read as a time
        try:
            until, consumed = self._read_time(i + 1)
        finally:
            self.tokens[i + 1] = nxt
        if until is None:
            return None
        return f"{r.read_time(hour, minute, meridiem)} {_RANGE_WORD[r.code]} {until}", 1 + consumed

    def _time_range_with_unit_after(self, i: int) -> bool:
        """Whether token ``i`` starts a range whose end is a time with its unit: "9.00 tot 17.30 uur"."""
        link, end = self.tokens[i + 1: i + 3] if i + 2 < len(self.tokens) else (None, None)
        return (link is not None and end is not None and not self.tokens[i].trail and not link.trail
                and link.core.lower() in (_RANGE_WORD[self.rules.code], "-", "–")
                and bool(_DOT_TIME_RE.fullmatch(end.core)) and self._time_unit_after(i + 2))

    def _time_unit_after(self, i: int) -> bool:
        """Whether the language's word for "o'clock" ("uur", "horas") or "h" follows token i."""
        nxt, unit = self._next(i), self.rules.time_unit
        return (unit is not None and nxt is not None and not self.tokens[i].trail and not nxt.lead
                and nxt.core.lower() in (unit, "h"))

    def _read_date(self, i: int) -> tuple[Optional[str], int]:
        r, core = self.rules, self.tokens[i].core
        if stamp := _ISO_DATETIME_RE.fullmatch(core):
            return self._date_and_time(stamp), 0
        m = _ISO_DATE_RE.fullmatch(core)
        prev = self.tokens[i - 1] if i > 0 else None
        if (not m and prev is not None and not prev.trail and prev.core.lower() in r.dash_date_lead_words
                and (day_month := _DAY_MONTH_RE.fullmatch(core))):
            day, month = int(day_month.group(1)), int(day_month.group(2))  # "op 15-12": a date, not a range
            try:
                datetime.date(2000, month, day)
            except ValueError:
                return None, 0
            return r.read_date(None, month, day), 0
        if m:
            year, month, day = int(m.group(1)), int(m.group(2)), int(m.group(3))
        else:
            m = _NUMERIC_DATE_RE.fullmatch(core)
            if not m:
                month_year = _MONTH_YEAR_RE.fullmatch(core)  # "12/2025"
                if month_year is None:
                    return None, 0
                return r.read_month_year(int(month_year.group(1)), int(month_year.group(2))), 0
            a, b, y = int(m.group(1)), int(m.group(3)), m.group(4)
            year = int(y) if len(y) == 4 else (2000 + int(y) if int(y) < 50 else 1900 + int(y))
            if r.date_order == "mdy" and a <= 12:
                month, day = a, b
            else:
                day, month = a, b
        try:
            datetime.date(year, month, day)
        except ValueError:
            return None, 0
        return r.read_date(year, month, day), 0

    def _date_and_time(self, stamp: re.Match[str]) -> Optional[str]:
        """An ISO 8601 date and time ("2026-12-05T10:30:00Z", as tools write them and an LLM may
        pass on): "December fifth twenty twenty-six at ten thirty UTC"; seconds and fractions are
        not said, an offset is ("UTC plus five thirty"). None for a date or time that is none."""
        r = self.rules
        year, month, day, hour, minute = (int(stamp.group(k)) for k in ("y", "mo", "d", "h", "mi"))
        try:
            datetime.datetime(year, month, day, hour, minute)
        except ValueError:
            return None
        at = _AT_WORDS[r.code][1 if hour == 1 else 0]
        said = f"{r.read_date(year, month, day)} {at} {r.read_time(hour, minute, None)}"
        zone = stamp.group("zone")
        if zone is None:
            return said
        if zone == "Z" or not int(zone[1:3] + zone[-2:]):
            return f"{said} UTC"
        sign = r.symbol_words["+"] if zone[0] == "+" else r.minus_word
        offset = r.cardinal(int(zone[1:3])) + (f" {r.cardinal(int(zone[-2:]))}" if int(zone[-2:]) else "")
        return f"{said} UTC {sign} {offset}"

    def _read_percent(self, i: int) -> tuple[Optional[str], int]:
        tok, nxt = self.tokens[i], self._next(i)
        if tok.core.endswith("%"):
            return self._percent(tok.core[:-1].rstrip()), 0
        if nxt is not None and nxt.core == "%" and not tok.trail and not nxt.lead:
            reading = self._percent(tok.core)
            if reading is not None:
                return reading, 1
        return None, 0

    def _percent(self, written: str) -> Optional[str]:
        """"5" -> "five percent"; a range "5-10" -> "five to ten percent"."""
        r = self.rules
        num = r.parse_number(written)
        if num is not None:
            return r.read_percent(num)
        written = _PERCENT_BEFORE_DASH_RE.sub("", written)  # "6.75%–7%": the sign on both ends
        parts = number_range(written)  # the same ranges as before a unit ("100-120 km/h")
        low, high = (r.parse_number(parts[0]), r.parse_number(parts[1])) if parts else (None, None)
        if low is None or high is None:
            return None
        return f"{r.read_number(low)} {_RANGE_WORD[r.code]} {r.read_percent(high)}"

    def _read_measure(self, i: int) -> tuple[Optional[str], int]:
        """A number and a unit of measure (api/text/normalization_units.py): "30°C", "50 km/h",
        "30° C" (the scale a token of its own), and a unit with a superscript alone ("per m²")."""
        r, tok, nxt = self.rules, self.tokens[i], self._next(i)
        if not r.units:
            return None, 0
        joins_next = nxt is not None and not tok.trail and not nxt.lead
        seconds = _DECIMAL_SECONDS_RE.fullmatch(tok.core)
        # "in 3.2s": seconds, with the language's decimal sign ("1,000s" in English are thousands);
        # "5s" and "30s" may be plurals and decades
        if seconds and seconds.group("sep") == r.decimal_sep:
            return self._amount_of(None, seconds.group("num"), "s", self._after_article(i)), 0
        if joins_next and nxt.core == "in" and r.code == "en" and self._after_feet(i) and self._ends_a_height(i + 1):
            reading = self._amount_of(None, tok.core, "in")
            return (reading, 1) if reading is not None else (None, 0)
        attached = attached_unit(tok.core)
        if attached is not None:
            low, written, symbol = attached
            unit, consumed = UNIT_SYMBOLS[symbol], 0
            if unit == "°" and joins_next and nxt.core in ("C", "F"):  # "30° C"
                unit, consumed = "°" + nxt.core, 1
            elif unit == "°" and low is None and r.degree_sign_ordinal and joins_next and nxt.core.islower() \
                    and nxt.core not in ("de", "a"):
                return r.match_ordinal(written + "º", self._noun_after(i)), 0  # "1° lugar": typed for "1º"
            reading = self._amount_of(low, written, unit, self._after_article(i))
            if reading is None:
                return None, 0
            if consumed == 0 and tok.trail.startswith("."):  # "5lbs. of flour": the short form's period
                self.tokens[i] = _Token(tok.raw, tok.lead, tok.core,
                                        self._abbreviation_trail(tok.trail[1:], i, title=False, can_end=True))
            return reading, consumed
        if tok.core in STANDALONE:
            return r.read_unit_name(UNIT_SYMBOLS[tok.core]), 0
        if joins_next and nxt.core in UNIT_SYMBOLS and nxt.core not in ATTACHED_ONLY:
            low, written = number_range(tok.core) or (None, tok.core)
            reading = self._amount_of(low, written, UNIT_SYMBOLS[nxt.core], self._after_article(i))
            if reading is not None:
                return reading, 1
        square = self._square_unit(i + 1) if joins_next else None
        if square is not None:  # "1,200 sq ft", "20 sq. m"
            low, written = number_range(tok.core) or (None, tok.core)
            reading = self._amount_of(low, written, square, self._after_article(i))
            if reading is not None:
                return reading, 2
        return None, 0

    def _after_feet(self, i: int) -> bool:
        """Whether a number of feet comes right before token ``i`` ("6 ft", "6 feet", "6ft")."""
        before = [t for t in self.tokens[max(0, i - 2):i] if not t.trail and not t.lead]
        if len(before) == 2 and before[1].core.lower() in ("ft", "feet", "foot"):
            return before[0].core.isdecimal()
        return len(before) >= 1 and bool(re.fullmatch(r"\d+ft", before[-1].core))

    def _ends_a_height(self, j: int) -> bool:
        """Whether the "in" at token ``j`` ends a measure ("6 ft 2 in.", "6 ft 2 in tall"), not
        a preposition ("6 feet 2 in the morning")."""
        after = self._next(j)
        return bool(self.tokens[j].trail) or after is None or after.core.lower() in _AFTER_MEASURE_WORDS

    def _square_unit(self, j: int) -> Optional[str]:
        """The unit key of "sq ft", "sq. m" written as two tokens from ``j`` ("ft2"), or None."""
        sq, unit = self.tokens[j], self._next(j)
        if sq.core.lower().rstrip(".") != "sq" or sq.trail not in ("", ".") or unit is None or unit.lead:
            return None
        return _SQUARE_UNITS.get(unit.core.rstrip("."))

    def _amount_of(self, low: Optional[str], written: str, unit: str, adjective: bool = False) -> Optional[str]:
        """``written`` of ``unit`` ("five kilometers"), or the range from ``low`` ("thirty to
        thirty-five degrees Celsius"); None when a number does not parse. ``adjective``: the
        amount describes a noun ("a 10 min walk"), so the unit's singular (``read_measure``)."""
        r = self.rules
        num = r.parse_number(written)
        if num is None:
            return None
        if low is None:
            return r.read_measure(num, unit, singular=adjective)
        first = r.parse_number(low)
        if first is None:
            return None
        return f"{r.read_number(first)} {_RANGE_WORD[r.code]} {r.read_measure(num, unit, singular=adjective)}"

    def _after_article(self, i: int) -> bool:
        """Whether token ``i`` follows an indefinite article that calls for an adjective ("a 5 km
        run" is "a five kilometer run"; LanguageRules.adjective_articles)."""
        prev = self.tokens[i - 1] if i > 0 else None
        return prev is not None and not prev.trail and prev.core.lower() in self.rules.adjective_articles

    def _read_per(self, i: int) -> tuple[Optional[str], int]:
        """An amount per something: "$9.99/month" -> "nine dollars and ninety-nine cents per
        month", "$20/hr" -> "... per hour", "5 €/kg"; the amount is read by the other rules."""
        tok = self.tokens[i]
        m = _PER_AMOUNT_RE.fullmatch(tok.core)
        suffix = m.group("suffix") if m else None
        if m is None or (suffix is not None and suffix.isalpha() and suffix not in UNIT_SYMBOLS and suffix != "x"):
            return None, 0  # "3pm/EST", "3D/VR": letters that are no unit
        amount, per = self._split_per(tok.core)
        if not per:
            return None, 0
        self.tokens[i] = _Token(tok.raw, tok.lead, amount, "")  # the amount alone, read by the other rules
        try:
            said, _ = self._read(i)
        finally:
            self.tokens[i] = tok
        return (said + per, 0) if said is not None else (None, 0)

    def _read_year_like(self, i: int) -> tuple[Optional[str], int]:
        """Years where the language reads them ("1999"), and in English "March 5" -> "March
        fifth" and "1990s" -> "nineteen nineties"."""
        r, core = self.rules, self.tokens[i].core
        if core.isdecimal() and len(core) == 4:  # "PIN 1999" is no year: its digits, decided once here
            if self._is_id(i):
                return r.digits(core), 0
            if self._counts_what_follows(i):
                return None, 0  # "1234 people": a number, read as one (``_read_number``)
            return self._flight_number(i) or r.bare_year(int(core)), 0
        if r.code != "en":
            m = _SHORT_DECADE_RE.fullmatch(core)  # "los 90s", "os anos 80s": the decade is its number
            return (r.cardinal(int(m.group(1))) if m else None), 0
        tok = self.tokens[i]
        elided = _ELIDED_YEAR_RE.fullmatch(core)
        if elided and (core[0] == "’" or tok.lead.endswith("'")) and not any(q in tok.trail for q in "'’"):
            # "Q4 '23", "Class of '99", "Summer ’05": a year with its century elided
            if core[0] != "’":
                self.tokens[i] = _Token(tok.raw, tok.lead[:-1], tok.core, tok.trail)
            year = elided.group(1)
            return (f"oh {r.cardinal(int(year))}" if year[0] == "0" else r.cardinal(int(year))), 0
        prev = self.tokens[i - 1] if i > 0 else None
        if (
            core.isdecimal()
            and len(core) <= 2
            and 1 <= int(core) <= 31
            and prev is not None
            and prev.core.lower().rstrip(".") in _EN_MONTHS
            # "Jan." before a number is an abbreviation whose period is in its core; a period
            # after a full month name is a full stop: "In May. 5 people came."
            and not prev.trail
        ):
            return r.ordinal(int(core)), 0
        span = _DAY_SPAN_RE.fullmatch(core)
        if (  # "Jan 1-5", "Dec. 24th-26th": days of that month
            span and prev is not None and prev.core.lower().rstrip(".") in _EN_MONTHS and not prev.trail
            and 1 <= int(span.group(1)) < int(span.group(2)) <= 31
        ):
            return f"{r.ordinal(int(span.group(1)))} {_RANGE_WORD[r.code]} {r.ordinal(int(span.group(2)))}", 0
        month = self._month_after(i)
        if month is not None and core.isdecimal() and len(core) <= 2 and 1 <= int(core) <= 31:
            # "3 March 2026", "on 21 Sept.": the day first, as British English writes and says it
            the = "" if prev is not None and prev.core.lower() == "the" and not prev.trail else "the "
            return f"{the}{r.ordinal(int(core))} of {month}", 1
        plural = _ROUND_PLURALS.get(core.replace(",", ""))
        if plural is not None:  # "100s of users", "1,000s"
            return plural, 0
        m = _DECADE_RE.fullmatch(core)
        if m:
            value = int(m.group(1))
            base = r.bare_year(value) if value >= 1000 else r.cardinal(value)
            tok = self.tokens[i]
            if base and tok.lead.endswith("'") and "'" not in tok.trail:  # "'90s": elision, not a quote
                self.tokens[i] = _Token(tok.raw, tok.lead[:-1], tok.core, tok.trail)
            return (_pluralize(base) if base else None), 0
        return None, 0

    def _counts_what_follows(self, i: int) -> bool:
        """Whether the four digits at token ``i`` count the English plural after them rather than
        name a year: "1234 people", "over 1999 customers", "1876 votes" (a year up to 1899 before
        any plural), unless a word that leads a year is before them ("in 1999 people were", "the
        2024 models"). A round hundred keeps its year's reading ("1500 units": "fifteen hundred")."""
        tok, nxt = self.tokens[i], self._next(i)
        value = int(tok.core)
        if self.rules.code != "en" or value % 100 == 0 or tok.trail or nxt is None or nxt.lead:
            return False
        prev = self.tokens[i - 1] if i > 0 else None
        if prev is not None and not prev.trail and (
                prev.core.lower() in _EN_YEAR_LEADS or prev.core.lower().rstrip(".") in _EN_MONTHS):
            return False
        noun = nxt.core
        if noun.lower() in _EN_COUNT_NOUNS:
            return True
        return value < 1900 and _looks_plural(noun)

    def _after_day_lead(self, i: int) -> bool:
        """Whether the short day at token ``i`` follows a word that leads a day ("on Fri.", "by
        Wed", "every Tues"), or another day of a list ("on Sat, Sun", "Tues and Thurs"). "Sat"
        and "Sun" then still need a day's end after them: a stop, the text's end, or a time of
        day ("on Sun morning"), as "on Sun loungers" is no day."""
        tok, prev = self.tokens[i], self.tokens[i - 1] if i > 0 else None
        if prev is None or tok.lead:
            return False
        if prev.core in _EN_SHORT_DAYS and prev.trail == ",":
            led = True
        elif prev.trail:
            led = False
        elif prev.core.lower() in ("and", "or", "&"):
            led = i > 1 and self.tokens[i - 2].core in _EN_SHORT_DAYS and self.tokens[i - 2].trail in ("", ".")
        else:
            led = prev.core.lower() in _EN_DAY_LEADS
        if not led or tok.core not in ("Sat", "Sun") or tok.trail:
            return led
        nxt = self._next(i)
        return nxt is None or nxt.core.lower() in _EN_TIMES_OF_DAY

    def _month_after(self, i: int) -> Optional[str]:
        """The English month named, capitalised, right after token ``i`` ("March", "Sept."), in full."""
        tok, nxt = self.tokens[i], self._next(i)
        if nxt is None or tok.trail or nxt.lead:
            return None
        if nxt.core in EnglishRules.months:
            return nxt.core
        return _EN_SHORT_MONTHS.get(nxt.core)

    def _read_area_code(self, i: int) -> tuple[Optional[str], int]:
        """"(555) 123-4567": a bracketed area code before a phone number, digit by digit."""
        tok, nxt = self.tokens[i], self._next(i)
        if not (len(tok.core) == 3 and tok.core.isdecimal() and tok.lead.endswith("(") and tok.trail == ")"):
            return None, 0
        if nxt is None or nxt.lead or not _is_phone_number(nxt.core):
            return None, 0
        return self.rules.digits(tok.core), 0

    def _read_number(self, i: int) -> tuple[Optional[str], int]:
        core = self.tokens[i].core
        num = self.rules.parse_number(core)
        if num is None:
            return None, 0
        prev = self.tokens[i - 1] if i > 0 else None
        # "HTTP 404", "error 503", "error code 500": a status code is a name, said in pairs where the
        # language does
        if (
            len(core) == 3 and core.isdecimal() and 100 <= int(core) <= 599 and prev is not None and not prev.trail
            and (prev.core.lower() in _STATUS_LEADS
                 or (prev.core.lower() == "code" and i > 1 and not self.tokens[i - 2].trail
                     and self.tokens[i - 2].core.lower() in _STATUS_LEADS))
            and (pairs := self.rules.digit_pairs(core)) is not None
        ):
            return pairs, 0
        if core.isdecimal() and self._is_id(i):
            return self.rules.digits(core), 0
        flight = self._flight_number(i)
        if flight is not None:
            return flight, 0
        # A number agrees with the noun it counts ("veintiuna horas", "duas semanas"), and Spanish
        # shortens "uno" before one ("veintiún años", but "el veintiuno de mayo").
        gender = self._noun_after(i)
        if gender is not None:
            return self.rules.read_number(num, gender, before_noun=True), 0
        return self.rules.read_number(num, self._noun_across(i) or self._article_before(i)), 0

    def _after_digits_lead(self, i: int) -> bool:
        """Whether token ``i`` follows a word after which digits are read one by one ("PIN 4821",
        "your code is 123-456", "OTP: 4821"), past a copula."""
        lead = self._word_back(i, self.rules.copulas) if i > 0 and not self.tokens[i].lead else None
        return (lead is not None and self.tokens[lead].trail in ("", ":")
                and self.tokens[lead].core.lower() in self.rules.digits_lead_words)

    def _numbers_a_record(self, i: int) -> bool:
        """Whether the number at token ``i`` is a record's (an order's, a booking's, a case's):
        after "<record> number" or "<record> #" or "no.", past "is" or a colon ("your order number
        is 4821", "case no. 5521", "pedido nº 4821"), after "número de <record>" ("su número de
        pedido es 4821"), after a Dutch "<record>nummer" ("klantnummer: 4821"), or written "#4821"
        after the record's noun ("Order #4821"). A record's number is said digit by digit."""
        r, tok = self.rules, self.tokens[i]
        if not r.record_nouns:
            return False
        prev = self.tokens[i - 1]
        if tok.raw[len(tok.lead):].startswith("#"):  # "Order #4821": the sign's rest, read in its place
            return not prev.trail and prev.core.lower() in r.record_nouns
        lead = self._word_back(i, r.copulas)
        if lead is None or self.tokens[lead].trail not in ("", ":", ".", ".:"):
            return False
        word = self.tokens[lead].core.lower()
        if r.code == "nl" and word.endswith("nummer") and word[:-6] in r.record_nouns:
            return True  # "bestelnummer", "klantnummer"
        before = [t.core.lower() for t in self.tokens[max(0, lead - 2): lead] if not t.trail]
        if word in r.record_number_words:  # "order number", "pedido nº"
            return bool(before) and before[-1] in r.record_nouns
        # "número de pedido": the number's word, a link, the record
        return (word in r.record_nouns and len(before) == 2 and before[0] in r.record_number_words
                and before[1] in _FRACTION_OF)

    def _flight_number(self, i: int) -> Optional[str]:
        """A flight's number, said in pairs where the language does ("Flight 2005", "flight DL
        2345" -> "twenty oh five", "DL twenty-three forty-five"), as "DL2345" written together is:
        three or four digits after "flight", or after an airline's code that follows it."""
        core = self.tokens[i].core
        if not (core.isdecimal() and len(core) in (3, 4)) or i == 0 or self.tokens[i].lead:
            return None
        before = self.tokens[max(0, i - 2): i]
        if before[-1].trail:
            return None
        if before[-1].core.lower() not in _FLIGHT_WORDS:
            if (len(before) < 2 or before[0].trail or before[0].core.lower() not in _FLIGHT_WORDS
                    or not _AIRLINE_CODE_RE.fullmatch(before[-1].core)):
                return None
        return self.rules.digit_pairs(core)

    def _is_id(self, i: int) -> bool:
        """Digits that name rather than count, read one by one: six or more written with no
        group separator and not round ("order 123456"; "1000000", "250500" count), a ZIP code after
        its state ("IL 62704"), a number after "PIN" or "ZIP", a record's number ("your order
        number is 4821", ``_numbers_a_record``), and a number dialled ("Call 911", "llama al 112";
        a round one counts: "call 100 people")."""
        r, core = self.rules, self.tokens[i].core
        if len(core) >= 6 and not core.endswith("00"):
            return True
        prev = self.tokens[i - 1] if i > 0 else None
        if prev is None or prev.lead or len(core) < 3:
            return False
        lead = self._word_back(i, r.copulas)  # "PIN 4821", "PIN: 4821", "your PIN is 4821", "ending in 4242"
        if lead is not None and self.tokens[lead].trail in ("", ":"):
            word = self.tokens[lead].core.lower()
            if len(core) == 4 and lead > 0 and not self.tokens[lead - 1].trail:  # a card's last four
                if f"{self.tokens[lead - 1].core.lower()} {word}" in r.last_digits_phrases:
                    return True
        if self._after_digits_lead(i) or self._numbers_a_record(i):
            return True
        if prev.trail:
            return False
        if len(core) == 5 and prev.core in r.postcode_lead_words:
            return True
        if len(core) == 5 and prev.core.lower() in r.short_code_links and i >= 3:  # "Text STOP to 55555"
            keyword, verb = self.tokens[i - 2], self.tokens[i - 3]
            if (keyword.core.isalpha() and keyword.core.isupper() and not keyword.trail.strip("\"'”’")
                    and not verb.trail and verb.core.lower() in r.dial_words):
                return True
        verb = self._word_back(i, r.dial_articles)  # "call 911", "llama al 112", "ligue para o 190"
        return not core.endswith("00") and verb is not None and self.tokens[verb].core.lower() in r.dial_words

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

    def _read_fraction(self, i: int) -> tuple[Optional[str], int]:
        """"3/4" -> "three quarters"; where it is dated (``_is_dated``: "el 5/6", "on 5/6", "Fri
        9/12", "ships 12/15") a day and month without a year ("el cinco de junio", "Friday
        September twelfth")."""
        r = self.rules
        m = _FRACTION_RE.fullmatch(self.tokens[i].core)
        if not m:
            return None, 0
        a, b = int(m.group(1)), int(m.group(2))
        nxt = self._next(i) if not self.tokens[i].trail else None
        of_a_unit = nxt is not None and not nxt.lead and (  # "el 1/2 litro", "Tuesday 3/4 cup", "on 3/4 of it"
            self._is_unit_word(nxt.core) or nxt.core.lower() in _FRACTION_NOUNS or nxt.core.lower() in _FRACTION_OF)
        if self._is_dated(i, a, b) and not of_a_unit:
            month, day = (a, b) if r.date_order == "mdy" else (b, a)
            try:
                datetime.date(2000, month, day)  # a leap year: "29/2" is a day
            except ValueError:
                return None, 0
            return r.read_date(None, month, day), 0
        if _is_score(a, b, nxt):
            return None, 0  # "10/10", "9/10 dentists": out of ten (``_read_rating``)
        return self._fraction_of(i, a, b)

    def _is_dated(self, i: int, a: int, b: int) -> bool:
        """Whether "a/b" at token ``i`` is a day and month: after a word that leads a date ("on 5/6",
        "ships 12/15"), after one that leads a date or a fraction unless it is a plain fraction ("by
        12/3", but "cut by 1/3"), after a day's name, before a time of day ("12/3 at noon"), or
        ending a range or a list that a date starts ("from 12/1 to 12/24", "on 12/25 and 1/1",
        "on 12/24, 12/31")."""
        r, prev = self.rules, self.tokens[i - 1] if i > 0 else None
        lead = prev.core.lower() if prev is not None and not prev.trail else None
        if lead in r.date_lead_words or self._after_weekday(i) or self._before_time_of_day(i):
            return True
        if lead in r.fraction_or_date_lead_words:
            return not (a < b and b in (2, 3, 4))
        code = r.code
        before = i - 2 if lead in (_RANGE_WORD[code], _BETWEEN_AND[code], _OR_WORD[code]) else None
        if prev is not None and prev.trail == ",":
            before = i - 1
        if before is not None and before >= 0 and (first := _FRACTION_RE.fullmatch(self.tokens[before].core)):
            return self._is_dated(before, int(first.group(1)), int(first.group(2)))
        return False

    def _before_time_of_day(self, i: int) -> bool:
        """Whether a time follows token ``i`` after the language's "at" ("12/3 at noon", "12/10 at
        2:15 PM", "12/3 at 5 pm"), so that a day and month come first."""
        after, nxt = self.tokens[i + 1: i + 4], self._next(i)
        if len(after) < 2 or self.tokens[i].trail or nxt is None or nxt.trail:
            return False
        if nxt.core.lower() != _AT_WORDS[self.rules.code][0] or after[1].lead:
            return False
        time = after[1].core.lower()
        meridiem = len(after) > 2 and any(word.lower() in _MERIDIEM_TOKENS
                                          for word in (after[2].core, after[2].core + after[2].trail[:1]))
        return (time in _NAMED_TIMES or bool(_TIME_RE.fullmatch(time) or _HOUR_MERIDIEM_RE.fullmatch(time))
                or (meridiem and bool(_BARE_HOUR_RE.fullmatch(time))))

    def _after_weekday(self, i: int) -> bool:
        """Whether a day's name stands right before token ``i``, so that "3/4" after it is a date:
        "Tuesday 3/4", "Fri, 9/12", "martes 3/4". In English a short name counts capitalised only
        ("Sat"; "sat" is a verb), elsewhere only full names ("mar" is also the sea)."""
        prev = self.tokens[i - 1] if i > 0 else None
        if prev is None or prev.trail not in ("", ","):
            return False
        r = self.rules
        if prev.core.lower() in _weekday_names(r):
            return True
        return r.code == "en" and prev.core in _EN_SHORT_DAYS

    def _fraction_of(self, i: int, a: int, b: int) -> tuple[Optional[str], int]:
        """The fraction a/b written at token ``i`` ("3/4", "¾"), with the noun or unit after it
        when the language says them together (``LanguageRules.fraction_before``): "1/2 taza" ->
        "media taza", "¼ kg" -> "un cuarto de kilogramo", "3/4 mi" -> "three quarters of a mile"."""
        r = self.rules
        fraction = r.read_fraction(a, b)
        nxt = self._next(i) if not self.tokens[i].trail else None
        if fraction is None or nxt is None or nxt.lead or not nxt.core:  # no word after it (an emoji left out)
            return fraction, 0
        unit = r.read_unit_name(UNIT_SYMBOLS[nxt.core]) if nxt.core in UNIT_SYMBOLS else None
        # a unit written as a word is a unit too ("1/2 hour" -> "half an hour"), and stays as written
        of_a_unit = unit is not None or self._is_unit_word(nxt.core)
        said = r.fraction_before(a, b, unit or nxt.core, of_a_unit)
        if said is None:
            return fraction, 0
        return (f"{said} {unit}", 1) if unit else (said, 0)

    def _is_unit_word(self, core: str) -> bool:
        """A unit's symbol or one of its names in this language ("kg", "litro", "tazas" is not)."""
        if core in UNIT_SYMBOLS:
            return True
        word = core.lower()
        return any(word in (names.one, names.many) for names in self.rules.units.values())

    def _read_scripts(self, i: int) -> tuple[Optional[str], int]:
        """"x²", "10³", "H₂O", "½" (api/text/normalization_scripts.py); a fraction character
        alone is a fraction as "1/2" is, with its noun or unit ("½ taza" -> "media taza")."""
        parts = fraction_character(self.tokens[i].core)
        if parts is not None:
            return self._fraction_of(i, *parts)
        mixed = mixed_fraction(self.tokens[i].core)
        if mixed is not None:
            said = self._mixed_fraction_of(i, *mixed)
            if said is not None:
                return said
        return read_scripts(self.tokens[i].core, self.rules), 0

    def _mixed_fraction_of(self, i: int, whole: int, a: int, b: int, last: Optional[int] = None
                           ) -> Optional[tuple[str, int]]:
        """A whole number and a fraction ("1½" at token ``i``, or "1 1/2" ending at token ``last``)
        before a unit or a noun: "1½ kg" -> "one and a half kilograms"; in Spanish and Portuguese the
        number and the half agree with the noun ("1½ tazas" -> "una y media tazas", "2½ kg" -> "dos y
        medio kilogramos"). None: read as ``read_mixed_number`` reads it alone."""
        last = i if last is None else last
        r, nxt = self.rules, self._next(last)
        if nxt is None or self.tokens[last].trail or nxt.lead:
            return None
        names = r.units.get(UNIT_SYMBOLS[nxt.core]) if nxt.core in UNIT_SYMBOLS else None
        gender = names.gender if names is not None else (r.noun_gender(nxt.core) if r.half_words else None)
        said = read_mixed_number(str(whole), a, b, r)
        if said is None or (names is None and gender is None):
            return None
        if (a, b) == (1, 2) and r.half_words and gender is not None:
            said = f"{r.cardinal(whole, gender)} {r.ampersand_word} {r.half_words[gender]}"
        consumed = last - i
        return (f"{said} {names.many}", consumed + 1) if names is not None else (said, consumed)

    def _read_mixed_number(self, i: int) -> tuple[Optional[str], int]:
        """A whole number and a fraction written apart, as recipes and imperial measures do: "2 1/2
        cups" -> "two and a half cups", "1 3/4 in" -> "one and three quarters inches", as "2½" is
        read. Only a proper fraction with a denominator such amounts use (``_MIXED_DENOMINATORS``):
        "3 4/5" stays two numbers."""
        tok, nxt = self.tokens[i], self._next(i)
        if tok.trail or nxt is None or nxt.lead or not (tok.core.isdecimal() and len(tok.core) <= 3):
            return None, 0
        m = _FRACTION_RE.fullmatch(nxt.core)
        if m is None or int(tok.core[0]) == 0 and len(tok.core) > 1:
            return None, 0
        a, b = int(m.group(1)), int(m.group(2))
        if not 0 < a < b or b not in _MIXED_DENOMINATORS:
            return None, 0
        with_noun = self._mixed_fraction_of(i, int(tok.core), a, b, last=i + 1)
        if with_noun is not None:
            return with_noun
        said = read_mixed_number(tok.core, a, b, self.rules)
        return (said, 1) if said is not None else (None, 0)

    def _read_scaled(self, i: int) -> tuple[Optional[str], int]:
        """A number with a scale: "1.2k" -> "one point two thousand", "2.5M" -> "two point five
        million", "8.1B", "3bn". Only a decimal before lowercase "k" or uppercase "M" or "B": "10k",
        "401k", "4k", "3M", "8B" are as often names, races, resolutions or seats, and "5m" may be
        meters (``_SCALED_RE``);
        a whole number with a "+" after its scale is a count ("1M+ users", "100k+")."""
        core = self.tokens[i].core
        if m := _SCALED_RE.fullmatch(core):
            return self._scaled(m.group("num") or m.group("whole"), m.group("scale") or m.group("bn")), 0
        if m := _SCALED_PLUS_RE.fullmatch(core):  # "1M+" -> "one million plus", "más de un millón"
            said = self._scaled(m.group("num"), m.group("scale"))
            if said is None:
                return None, 0
            more_than = self.rules.more_than_words
            if not more_than:
                return f"{said} {self.rules.symbol_words['+']}", 0
            if self._noun_after(i) is not None:  # "1M+ usuarios" -> "más de un millón de usuarios"
                said += " " + self.rules.scale_connector(m.group("scale").lower()).strip()
            return self._more_than(i, said.strip()), 0
        return None, 0

    def _scaled(self, written: str, scale: str) -> Optional[str]:
        r = self.rules
        num, names = r.parse_number(written), r.scale_words.get(scale.lower())
        if num is None or names is None:
            return None
        one = num.integer.lstrip("0") == "1" and not num.fraction
        return f"{r.read_number(num, before_noun=True)} {names[0] if one else names[1]}"  # "un millón"

    def _read_time_range(self, i: int) -> tuple[Optional[str], int]:
        """Two times joined by a dash: "9am-5pm" -> "nine a m to five p m", "9:00-17:30", "10am-noon",
        and hours that share the meridiem after the last: "2-3pm", "2-3 pm" -> "two to three p m",
        "noon-2 pm"."""
        r = self.rules
        parts = re.split(r"[-–]", self.tokens[i].core)
        if len(parts) != 2 or not all(parts):
            return None, 0
        said = [part if part.lower() in _NAMED_TIMES else _TokenReader(r, [part])._read_time(0)[0] for part in parts]
        consumed = 0
        dotted = [_DOT_TIME_RE.fullmatch(part) for part in parts]
        if all(dotted) and self._time_unit_after(i):  # "9.00-17.30 uur": times before their unit, said with it
            said = [r.read_time(int(m.group(1)), int(m.group(2)), None) for m in dotted]
            consumed = 1
        if said[0] is not None and said[1] is None and parts[0].lower() in _NAMED_TIMES \
                and _BARE_HOUR_RE.fullmatch(parts[1]) and (meridiem := self._meridiem_after(i)):
            said[1], consumed = r.read_time(int(parts[1]), 0, meridiem), 1  # "noon-2 pm"
        if parts[0].lower() in _NAMED_TIMES and parts[1].lower() in _NAMED_TIMES:
            return None, 0  # words only: no time written
        if said[0] is None and _BARE_HOUR_RE.fullmatch(parts[0]) and r.read_meridiem("am") is not None:
            if said[1] is not None and not parts[1][-1].isdigit():  # "2-3pm"
                said[0] = r.read_integer(parts[0])
            elif _BARE_HOUR_RE.fullmatch(parts[1]) and (meridiem := self._meridiem_after(i)):  # "2-3 pm"
                said = [r.read_integer(parts[0]), r.read_time(int(parts[1]), 0, meridiem)]
                consumed = 1
        if None in said:
            return None, 0
        return f"{said[0]} {_RANGE_WORD[r.code]} {said[1]}", consumed

    def _read_rating(self, i: int) -> tuple[Optional[str], int]:
        """A score out of a scale: "4.5/5" -> "four point five out of five", and a whole one out
        of ten or a hundred: "10/10", "9/10 dentists", "95/100" (but "3/10 of it" is a fraction)."""
        r, core = self.rules, self.tokens[i].core
        m = _RATING_RE.fullmatch(core)
        if m is None and (w := _WHOLE_RATING_RE.fullmatch(core)):
            nxt = self._next(i) if not self.tokens[i].trail else None
            m = w if _is_score(int(w.group("score")), int(w.group("scale")), nxt) else None
        score = r.parse_number(m.group("score")) if m else None
        if score is None or int(m.group("scale")) == 0:
            return None, 0
        return f"{r.read_number(score)} {r.symbol_words['out of']} {r.read_integer(m.group('scale'))}", 0

    def _read_signed(self, i: int) -> tuple[Optional[str], int]:
        """A number with a sign that is a word: "#1" -> "number one", "~$20" -> "about twenty
        dollars", "+1" -> "plus one", "<5 min" -> "less than five minutes", ">=18" -> "at least
        eighteen", "50+" -> "fifty plus", "1.5x" -> "one point five times"; the
        number is read by the other rules as if the sign were not there."""
        tok, words = self.tokens[i], self.rules.symbol_words
        m = _SIGN_BEFORE_RE.fullmatch(tok.core) or _NUMBER_SIGN_RE.fullmatch(tok.core)
        before = m is not None
        m = m or _SIGN_AFTER_RE.fullmatch(tok.core)
        if m is None:
            return None, 0
        sign, rest = words[_SIGN_ALIASES.get(m.group("sign"), m.group("sign"))], m.group("rest")
        prev = self.tokens[i - 1] if i > 0 else None
        if before and prev is not None and prev.core.lower() == sign and not prev.trail:
            sign = ""  # "Nummer #1", "about ~20": the word is said already
        # the rest read in the token's place, so it may take the next token along ("~20 min")
        self.tokens[i] = _Token(tok.raw, tok.lead, rest, tok.trail)
        try:
            said, consumed = self._read(i)
        finally:  # the sign back, with the trail the rest's reading settled ("~5lbs. of": no full stop)
            self.tokens[i] = _Token(tok.raw, tok.lead, tok.core, self.tokens[i].trail)
        if said is None:
            return None, 0  # no rule read it: the token is left to the mixed reading
        more_than = self.rules.more_than_words
        if not before and m.group("sign") == "+" and more_than:
            # "50+ personas" -> "más de cincuenta personas", agreeing with the noun ("21+ casas")
            if consumed == 0 and (num := self.rules.parse_number(rest)) is not None:
                said = self.rules.read_number(num, self._noun_after(i) or "m", before_noun=True)
            return self._more_than(i, said), consumed
        if (not before and m.group("sign") in ("x", "×") and consumed == 0 and self.rules.code == "en"
                and _starts_upper(self._next(i)) and rest.isdecimal()):
            return self.rules.read_integer(rest), 0  # "2x Margherita": an order's count of a dish
        if not before and consumed == 0 and (num := self.rules.parse_number(rest)) is not None:
            # "2x": the number counts the sign's word, so agrees with it ("duas vezes")
            said = self.rules.read_number(num, self.rules.noun_gender(sign) or "m")
            if num == ParsedNumber("1", ""):
                sign = self.rules.sign_singulars.get(sign, sign)  # "1x" -> "una vez"
        elif not before and consumed == 0 and (span := _AMOUNT_RANGE_RE.fullmatch(rest)):
            # "1-2x": both ends count it ("una a dos veces")
            ends = [self.rules.parse_number(span.group(k)) for k in ("low", "high")]
            if None not in ends:
                gender = self.rules.noun_gender(sign) or "m"
                said = f" {_RANGE_WORD[self.rules.code]} ".join(self.rules.read_number(n, gender) for n in ends)
        return (f"{sign} {said}".strip() if before else f"{said} {sign}"), consumed

    def _read_dimensions(self, i: int) -> tuple[Optional[str], int]:
        """"3x4" -> "three by four", "10x20 cm" -> "ten by twenty centimeters"; in English a size
        with a four-digit side is read in pairs, as screens are: "1920x1080" -> "nineteen twenty
        by ten eighty"."""
        r, tok, nxt = self.rules, self.tokens[i], self._next(i)
        if not _DIMENSIONS_RE.fullmatch(tok.core):
            return None, 0
        parts = re.split("[x×]", tok.core)
        nums = [r.parse_number(part) for part in parts]
        if any(num is None for num in nums):
            return None, 0
        said = [r.read_number(num) for num in nums]
        if any(len(part) == 4 and part.isdecimal() for part in parts):
            said = [r.digit_pairs(part) or words for part, words in zip(parts, said)]
        consumed = 0
        if nxt is not None and not tok.trail and not nxt.lead and nxt.core in UNIT_SYMBOLS and r.units:
            last = r.read_measure(nums[-1], UNIT_SYMBOLS[nxt.core])
            if last is not None:
                said[-1], consumed = last, 1
        return f" {_BY_WORD[r.code]} ".join(said), consumed

    def _read_sum(self, i: int) -> tuple[Optional[str], int]:
        """Sums written without spaces: "2+2=4" -> "two plus two equals four", "1+1" (spaced,
        each sign is a token of its own, read between its terms by ``_read``)."""
        core = self.tokens[i].core
        if not _SUM_RE.fullmatch(core):
            return None, 0
        words = []
        for piece in re.split(r"([+=])", core):
            if piece in ("+", "="):
                words.append(self.rules.symbol_words[piece])
                continue
            num = self.rules.parse_number(piece)
            if num is None:
                return None, 0
            words.append(self.rules.read_number(num))
        return " ".join(words), 0

    def _read_compound_measure(self, i: int) -> tuple[Optional[str], int]:
        """A number and a unit joined by a dash, an English adjective: "a 30-min call" -> "a
        thirty minute call", "a 5-km run"."""
        r = self.rules
        m = _COMPOUND_MEASURE_RE.fullmatch(self.tokens[i].core)
        if m is None or not r.adjective_articles or m.group("unit") not in UNIT_SYMBOLS:
            return None, 0
        num = r.parse_number(m.group("num"))
        if num is None:
            return None, 0
        return r.read_measure(num, UNIT_SYMBOLS[m.group("unit")], singular=True), 0

    def _read_fraction_before_word(self, i: int) -> tuple[Optional[str], int]:
        """A fraction dashed to the word it qualifies, in English: "1/2-price apps" -> "half price
        apps", "3/4-inch pipe" -> "three quarter inch pipe"."""
        m = _FRACTION_BEFORE_WORD_RE.fullmatch(self.tokens[i].core)
        if m is None or self.rules.code != "en":
            return None, 0
        a, b = int(m.group(1)), int(m.group(2))
        if not 0 < a < b:
            return None, 0
        said = "half" if (a, b) == (1, 2) else self.rules.read_fraction(a, b)
        if said is None:
            return None, 0
        if a > 1 and said.endswith("s"):
            said = said[:-1]  # "three quarter inch": an adjective, singular
        return f"{said} {m.group(3)}", 0

    def _read_decimal_before_word(self, i: int) -> tuple[Optional[str], int]:
        """A decimal joined by a dash to the word it measures, an English adjective: "a 0.25-acre
        lot" -> "a zero point two five acre lot" (digit by digit after the point, as a decimal)."""
        m = _DECIMAL_BEFORE_WORD_RE.fullmatch(self.tokens[i].core)
        prev = self.tokens[i - 1] if i > 0 else None
        if m is None or self.rules.code != "en" or (prev is not None and prev.core.lower() in _VERSION_WORDS):
            return None, 0  # "version 2.10-beta": a version's number, left to the mixed reading
        return f"{self.rules.read_number(ParsedNumber(m.group('int'), m.group('frac')))} {m.group('word')}", 0

    def _read_rooms(self, i: int) -> tuple[Optional[str], int]:
        """A listing's rooms, in English: "3 bd" -> "three bedrooms", "2BR/1BA" -> "two bedrooms,
        one bathroom", "1.5 ba". Only these short forms after a number of one or two digits."""
        r, tok, nxt = self.rules, self.tokens[i], self._next(i)
        if r.code != "en":
            return None, 0
        parts = tok.core.split("/")
        matches = [_ROOMS_RE.fullmatch(part) for part in parts]
        if len(parts) <= 2 and all(m and m.group("abbr").lower() in _ROOMS for m in matches):
            return ", ".join(self._rooms(m.group("num"), m.group("abbr")) for m in matches), 0
        if (re.fullmatch(r"\d{1,2}(?:\.5)?", tok.core) and nxt is not None and not tok.trail and not nxt.lead
                and nxt.core.lower() in _ROOMS):
            return self._rooms(tok.core, nxt.core), 1
        return None, 0

    def _rooms(self, written: str, abbreviation: str) -> str:
        num = self.rules.parse_number(written)
        room = _ROOMS[abbreviation.lower()]
        return f"{self.rules.read_number(num)} {room if num == ParsedNumber('1', '') else room + 's'}"

    def _read_named_number(self, i: int) -> tuple[Optional[str], int]:
        """Digits that name a thing, said as people say that thing: an IP address ("192.168.1.1":
        each number digit by digit, "dot" between), a video resolution ("1080p": "ten eighty p"), a
        blood pressure after the language's word for it ("BP 120/80": "one twenty over eighty") and
        the US retirement plans named by their tax code section ("401(k)": "four oh one k")."""
        r, tok = self.rules, self.tokens[i]
        core = tok.core
        if (m := _IPV4_RE.fullmatch(core)) and all(int(part) <= 255 for part in m.groups()):
            return f" {r.symbol_words['.']} ".join(r.digits(part) for part in m.groups()), 0
        if m := _RESOLUTION_RE.fullmatch(core):
            return f"{r.digit_pairs(m.group(1)) or r.read_integer(m.group(1))} p", 0
        prev = self.tokens[i - 1] if i > 0 else None
        m = _PRESSURE_RE.fullmatch(core)
        if m and prev is not None and not prev.trail and prev.core.lower() in r.pressure_lead_words:
            high, low = m.group(1), m.group(2)
            said = f"{r.digit_pairs(high) or r.read_integer(high)} {r.pressure_word} {r.read_integer(low)}"
            nxt = self._next(i)
            if nxt is not None and not tok.trail and not nxt.lead and UNIT_SYMBOLS.get(nxt.core) == "mmHg":
                return f"{said} {r.units['mmHg'].many}", 1  # "120/80 mmHg": the unit after both numbers
            return said, 0
        m = _PLAN_NAME_RE.fullmatch(core)
        if m and (not m.group("open") or tok.trail.startswith(")")):
            if m.group("open"):  # the bracket is the name's, not punctuation
                self.tokens[i] = _Token(tok.raw, tok.lead, tok.core, tok.trail[1:])
            section = m.group("section")  # digit by digit, English saying "oh" for 0: "four oh one k"
            said = " ".join("oh" if d == "0" else r.cardinal(int(d)) for d in section) if r.code == "en" else r.digits(section)
            return f"{said} {m.group('letter')}", 0
        return None, 0

    def _read_keypad(self, i: int) -> tuple[Optional[str], int]:
        """Keys of a phone's keypad: a service code ("*67" -> "star six seven", dialled digit by
        digit), a lone "*" or "#" after a verb that presses it ("press #" -> "press pound"), before
        or after the word for a key ("the # key", "la tecla #"), and one that goes on a list of keys that such a verb
        began in its sentence ("press 1, then #", "press 1 or # to repeat")."""
        r, tok = self.rules, self.tokens[i]
        if not r.keypad_words:
            return None, 0
        m = _KEYPAD_CODE_RE.fullmatch(tok.core)
        if m:
            said = f"{r.keypad_words['*']} {r.digits(m.group('digits'))}"
            return (f"{said} {r.keypad_words['#']}" if tok.core.endswith("#") else said), 0
        if tok.core not in r.keypad_words or tok.lead or i == 0:
            return None, 0
        prev, nxt = self.tokens[i - 1], self._next(i)
        if not prev.trail and (prev.core.lower() in r.keypad_verbs or prev.core.lower() in r.keypad_key_words):
            return r.keypad_words[tok.core], 0  # "press #", "la tecla #"
        if not tok.trail and nxt is not None and not nxt.lead and nxt.core.lower() in r.keypad_key_words:
            return r.keypad_words[tok.core], 0
        goes_on = prev.trail == "," or (not prev.trail and prev.core.lower() in r.keypad_list_words)
        return (r.keypad_words[tok.core] if goes_on and self._key_pressed_before(i) else None), 0

    def _key_pressed_before(self, i: int) -> bool:
        """Whether a verb that presses a key ("press", "dial") comes before token ``i`` in its
        sentence, at most 12 tokens back."""
        for j in range(i - 1, max(-1, i - 13), -1):
            tok = self.tokens[j]
            if j < i - 1 and any(mark in tok.trail for mark in _SENTENCE_END):
                return False
            if tok.core.lower() in self.rules.keypad_verbs:
                return True
        return False

    def _read_date_range(self, i: int) -> tuple[Optional[str], int]:
        """Two days of the year joined by a dash: "11/25–11/30" -> "November twenty-fifth to
        November thirtieth" ("1/12-5/12" in Spanish: "uno de diciembre a cinco de diciembre"). Two
        plain fractions are a range of them: "1/2-3/4 cup" -> "one half to three quarters cup"."""
        m = _DATE_RANGE_RE.fullmatch(self.tokens[i].core)
        if not m:
            return None, 0
        r = self.rules
        a, b, c, d = (int(g) for g in m.groups())
        if all(x < y and y in (2, 3, 4, 8, 16) for x, y in ((a, b), (c, d))):
            low, high = r.read_fraction(a, b), r.read_fraction(c, d)
            return (f"{low} {_RANGE_WORD[r.code]} {high}" if low and high else None), 0
        (m1, d1), (m2, d2) = ((a, b), (c, d)) if r.date_order == "mdy" else ((b, a), (d, c))
        try:
            datetime.date(2000, m1, d1), datetime.date(2000, m2, d2)
        except ValueError:
            return None, 0
        return f"{r.read_date(None, m1, d1)} {_RANGE_WORD[r.code]} {r.read_date(None, m2, d2)}", 0

    def _read_ratio(self, i: int) -> tuple[Optional[str], int]:
        """A ratio or odds whose second term has one digit, so no time: "3:1" -> "three to one",
        "a 2:1 win". After a capitalised name inside a sentence it is a verse ("read Genesis 1:1")
        and stays."""
        m = _RATIO_RE.fullmatch(self.tokens[i].core)
        if not m:
            return None, 0
        prev = self.tokens[i - 1] if i > 0 else None
        starts_sentence = i < 2 or any(mark in self.tokens[i - 2].trail for mark in _SENTENCE_END)
        if prev is not None and not prev.trail and prev.core[:1].isupper() and not starts_sentence:
            return None, 0
        r = self.rules
        return f"{r.cardinal(int(m.group(1)))} {_RANGE_WORD[r.code]} {r.cardinal(int(m.group(2)))}", 0

    def _read_extension(self, i: int) -> tuple[Optional[str], int]:
        """A phone number's extension written "x123" right after it: "extension one two three"
        (in the languages with an "ext." abbreviation)."""
        r, tok = self.rules, self.tokens[i]
        m = _EXTENSION_RE.fullmatch(tok.core)
        ext = r.abbreviations.get("ext.")
        prev = self.tokens[i - 1] if i > 0 else None
        if m is None or ext is None or prev is None or prev.trail.strip(",") or tok.lead:
            return None, 0
        if sum(c.isdecimal() for c in prev.core) < 7:  # "x123" after anything but a phone number is no extension
            return None, 0
        return f"{ext.expansion} {r.digits(m.group(1))}", 0

    def _read_masked_digits(self, i: int) -> tuple[Optional[str], int]:
        """The last digits of a card or account shown behind a mask: "****1234", "XXXX-1234",
        "•••• 1234", "(...1234)" -> "ending in one two three four" (the mask is not said; nor is the phrase again
        after "ending in")."""
        r, tok, nxt = self.rules, self.tokens[i], self._next(i)
        m = _MASKED_DIGITS_RE.fullmatch(tok.core) or _ELLIPSIS_DIGITS_RE.fullmatch(tok.core)
        consumed = 0
        if (m is None and _MASK_RE.fullmatch(tok.core) and nxt is not None and not tok.trail and not nxt.lead
                and not self.line_starts[i + 1]):  # "***" alone on its line is a Markdown rule
            m, consumed = _MASKED_DIGITS_RE.fullmatch(tok.core + nxt.core), 1
        if m is None:
            return None, 0
        said = r.digits(m.group("digits"))
        prev = self.tokens[i - 2: i]
        after_phrase = (len(prev) == 2 and not prev[0].trail and not prev[1].trail
                        and f"{prev[0].core} {prev[1].core}".lower() in r.last_digits_phrases)
        if r.masked_digits_phrase and not after_phrase:
            said = f"{r.masked_digits_phrase} {said}"
        return said, consumed

    def _read_mixed(self, i: int) -> tuple[Optional[str], int]:
        """Digits inside other text: "COVID-19" -> "COVID nineteen", "10-20" -> "ten to twenty",
        "555-1234" -> "five five five, one two three four" (see ``_is_code``)."""
        r, tok = self.rules, self.tokens[i]
        core = tok.core
        if not any(c.isdecimal() for c in core):
            return None, 0
        # "1,000-2,000" (en) / "1.000-2.000" (es): grouped numbers are one number each, so the run
        # is a range of two, not four digit groups read as a code
        pieces = _PIECE_RE.findall(_ungroup_numbers(core, r.group_sep))
        code = _code_pieces(pieces) | _id_digits(pieces)
        if self._after_digits_lead(i) and all(p.isdecimal() or p in _DASHES for p in pieces):
            code = set(range(len(pieces)))  # "your code is 123-456": digit groups, not a range
        if (  # "(555)123-4567": the area code belongs to the number
            tok.lead.endswith("(") and len(pieces) > 2 and len(pieces[0]) == 3 and pieces[0].isdecimal()
            and pieces[1] == ")" and _is_phone_number("".join(pieces[2:]))
        ):
            code.add(0)
        words: list[str] = []
        said_before: set[int] = set()  # pieces said with the one before them: "st" of "1st", "s" of "1990s"
        for k, piece in enumerate(pieces):
            if k in said_before:
                continue
            if k in code:
                if piece.isdecimal():
                    words.append(r.digits(piece))
                else:  # the break between groups is a short pause, as when it is said
                    words[-1] += ","
            elif piece.isdecimal():
                # "1st-class", "3rd-party": digits and the ordinal's letters, then a break
                ordinal = (r.match_ordinal(piece + pieces[k + 1])
                           if k + 1 < len(pieces) and pieces[k + 1].isalpha()
                           and (k + 2 == len(pieces) or pieces[k + 2] in _DASHES or pieces[k + 2] == "/") else None)
                if ordinal is not None:
                    said_before.add(k + 1)
                year = _year_after_word(pieces, k, r)
                if year is not None and k + 1 < len(pieces):
                    said_before.add(k + 1)
                # "UA1234", "A380", "RX7900": three or four digits after capitals name a flight or
                # a model, read in pairs where the language does ("UA twelve thirty-four"); so do
                # they after capitals and a dash when nothing else follows ("F-150", "A-380")
                named = (r.digit_pairs(piece) if k > 0 and _CAPITALS_RE.fullmatch(pieces[k - 1])
                         and (k + 1 == len(pieces) or not pieces[k + 1].isalpha()) else None)
                if (named is None and k == 2 == len(pieces) - 1 and pieces[1] in _DASHES
                        and _CAPITALS_RE.fullmatch(pieces[0])):
                    named = r.digit_pairs(piece)
                words.append(ordinal or named or year or _year_of_range(pieces, k, r) or r.read_integer(piece))
            elif piece.isalpha():
                words.append(piece)
            elif piece in "-–.,:" and _between_digits(pieces, k):
                # between digits: "10-20" is a range, "3.5.1" a version; "," and ":" just separate
                if piece in "-–":
                    words.append(_RANGE_WORD[r.code])
                elif piece == ".":
                    words.append(_DOT_WORD[r.code])
            elif piece in _DASHES and _between_labels(pieces, k):
                words.append(_RANGE_WORD[r.code])  # "Q1-Q3", "FY24-FY26": a range of labelled numbers
            elif piece == "&":
                words.append(r.ampersand_word)
            elif piece in "-–/_" or piece.isspace():
                continue  # a word break
            elif piece in ("'", "’") and k + 1 < len(pieces) and _year_after_word(pieces, k + 1, r):
                continue  # the elision of "mid-'70s"
            elif words:
                words[-1] += piece  # other punctuation stays glued to the word before it
            else:
                words.append(piece)
        return (" ".join(words) if words else None), 0


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


def _looks_plural(word: str) -> bool:
    """Whether an English ``word`` looks like a plural noun: lowercase letters ending in "s", not
    "ss", "us" or "is", and not a word such as "was" or "always"."""
    return (len(word) >= 4 and word.isalpha() and word.islower() and word.endswith("s")
            and not word.endswith(("ss", "us", "is")) and word not in _NOT_PLURALS)


def _ungroup_numbers(core: str, group_sep: str) -> str:
    """``core`` with the locale's thousands separators taken out of every grouped number
    ("1,000-2,000" -> "1000-2000" in English); a run like "555.123.4567" is no such number (its
    last group has four digits) and stays as it is."""
    g = re.escape(group_sep)
    grouped = re.compile(rf"(?<![\d{g}])\d{{1,3}}(?:{g}\d{{3}})+(?![\d{g}])")
    return grouped.sub(lambda m: m.group().replace(group_sep, ""), core)


def _between_digits(pieces: list[str], k: int) -> bool:
    return 0 < k < len(pieces) - 1 and pieces[k - 1].isdecimal() and pieces[k + 1].isdecimal()


def _between_labels(pieces: list[str], k: int) -> bool:
    """Whether the piece at ``k`` joins two numbers with the same letters before them: "Q1-Q3"."""
    return (2 <= k < len(pieces) - 2 and pieces[k - 1].isdecimal() and pieces[k + 2].isdecimal()
            and pieces[k + 1].isalpha() and pieces[k + 1] == pieces[k - 2])


_DASHES = frozenset("-–")
_INCH_MARKS = ('"', "″", "”")
_HEIGHT_RE = re.compile(r"(?P<feet>[1-9])['′’](?P<inches>1[01]|\d)(?P<mark>[\"″”]?)")
_CAPITALS_RE = re.compile(r"[A-Z]{1,3}")  # an airline's or a maker's code before a number
_GROUP_SEPARATORS = "-–.,:"


def _code_pieces(pieces: list[str]) -> set[int]:
    """Indices of the pieces (digit groups and the separators between them) of every run of
    digit groups that ``_is_code`` says is a phone number or another code."""
    out: set[int] = set()
    k = 0
    while k < len(pieces):
        if not pieces[k].isdecimal():
            k += 1
            continue
        end = k
        while end + 2 < len(pieces) and pieces[end + 1] in _GROUP_SEPARATORS and pieces[end + 2].isdecimal():
            end += 2
        # "1-800-FLOWERS": digit groups and a word of capitals after a dash are a phone number
        vanity = (end > k and end + 2 < len(pieces) and pieces[end + 1] in _DASHES
                  and pieces[end + 2].isupper() and len(pieces[end + 2]) >= 3)
        if vanity or _is_code(pieces[k : end + 1 : 2], set(pieces[k + 1 : end : 2])):
            out.update(range(k, end + 1))
        k = end + 1
    return out


def _phone_groups(tokens: list[_Token]) -> dict[int, str]:
    """Token indices of phone numbers written as digit groups between spaces ("912 345 678",
    "+1 555 123 4567", "020 123 4567"), each with the comma said after it (none after the last).
    A run needs three groups (two after a country code "+34"), seven digits or more and a group
    of three or more digits, and is not all round: "10 20 30" and "100 200 300" are counts."""
    out: dict[int, str] = {}
    i = 0
    while i < len(tokens):
        j = i
        while j < len(tokens) and _is_digit_group(tokens[j]) and (j == i or not (tokens[j - 1].trail or tokens[j].lead)):
            j += 1
        groups = [t.core for t in tokens[i:j]]
        after_code = i > 0 and not tokens[i - 1].trail and _COUNTRY_CODE_RE.fullmatch(tokens[i - 1].core) is not None
        if (
            len(groups) >= (2 if after_code else 3)
            and sum(map(len, groups)) >= 7
            and any(len(g) >= 3 for g in groups)
            and not all(g.endswith("00") for g in groups)
        ):
            out.update((k, "," if k < j - 1 else "") for k in range(i, j))
        elif j == i and _TRUNK_AREA_RE.fullmatch(tokens[i].core) and not tokens[i].trail:
            # "020-123 4567", "085-123 45 67": a trunk "0" and the area code dashed to the first group,
            # then the other groups, all digit by digit
            k = i + 1
            while (k < len(tokens) and k - i <= 3 and not tokens[k].lead and not tokens[k - 1].trail
                   and _is_digit_group(tokens[k]) and 2 <= len(tokens[k].core) <= 4):
                k += 1
            if k > i + 1 and sum(len(t.core) for t in tokens[i:k]) >= 10:  # with the dash: 9 digits or more
                out.update((m, "," if m < k - 1 else "") for m in range(i, k))
        i = max(j, i + 1)
    return out


_TRUNK_AREA_RE = re.compile(r"0\d{1,3}-\d{3,4}")  # a trunk "0", the area code and the first group: "020-123"


def _is_digit_group(tok: _Token) -> bool:
    return 1 <= len(tok.core) <= 5 and tok.core.isdecimal()  # "11 98765 4321" (Brazil)


def _is_score(a: int, b: int, nxt: Optional[_Token]) -> bool:
    """Whether "a/b" is a score out of ten or a hundred ("10/10", "9/10 dentists", "95/100"),
    or of stars ("4/5 stars"), not a fraction: "1/10" is a tenth, and so is "3/10 of it"."""
    if nxt is not None and not nxt.lead and nxt.core.lower() in _STARS and 1 <= a <= b <= 10:
        return True  # "4/5 stars", "3/5 estrellas"
    if b not in (10, 100) or not 2 <= a <= b:
        return False
    return nxt is None or nxt.lead != "" or nxt.core.lower() not in _FRACTION_OF


def _id_digits(pieces: list[str]) -> set[int]:
    """Indices of the digit groups of an id of letters and digits (a dash between them or not),
    read digit by digit: five digits or more ("A12345", "A-12345", "1Z999AA1"), or three or more
    with letters on both sides ("ABC123DEF", "ABC-1234-XYZ").
    Short groups after letters are names and numbers: "MP3", "COVID-19", "B12", "UA1234"; so is
    a decade ("mid-1990s")."""
    out: set[int] = set()
    for k, piece in enumerate(pieces):
        if not piece.isdecimal():
            continue
        before = k > 0 and (pieces[k - 1].isalpha() or (k > 1 and pieces[k - 1] in _DASHES and pieces[k - 2].isalpha()))
        after = k + 1 < len(pieces) and (pieces[k + 1].isalpha()
                                         or (k + 2 < len(pieces) and pieces[k + 1] in _DASHES and pieces[k + 2].isalpha()))
        if pieces[k + 1:] == ["s"] and len(piece) == 4 and piece.endswith("0"):
            after = False  # a decade's "s": "mid-1990s"
        if (before or after) and (len(piece) >= 5 or (before and after and len(piece) >= 3)):
            out.add(k)
    return out


def _is_phone_number(core: str) -> bool:
    """"123-4567" after an area code "(555)": a code that starts with a three-digit group."""
    pieces = _PIECE_RE.findall(core)
    return bool(pieces) and len(pieces[0]) == 3 and _code_pieces(pieces) == set(range(len(pieces)))


def _is_code(groups: list[str], separators: set[str]) -> bool:
    """Whether digit groups joined by ``separators`` are read digit by digit: a phone number,
    ZIP+4 code or id ("1-800-555-1234", "555-1234", "94103-1234", "555.123.4567"), not a range
    ("10-20", "1990-1995"), a version or IP address ("3.11.4", "192.168.1.1") or a decimal."""
    if len(groups) < 2:
        return False
    if separators <= _DASHES:
        return len(groups) >= 3 or not _is_range(groups[0], groups[1])
    if separators == {"."}:  # phone numbers only: the last two groups are 3 and 4 digits long
        return len(groups) >= 3 and len(groups[-2]) == 3 and len(groups[-1]) == 4
    return False  # mixed separators ("1,000-2,000"): no code


@lru_cache(maxsize=None)
def _weekday_names(rules: LanguageRules) -> frozenset[str]:
    """The language's full day names, lowercase ("monday", "martes")."""
    return frozenset(day.lower() for day in rules.weekday_abbreviations.values())


def _roman_value(core: str) -> Optional[int]:
    """"XXI" -> 21: a Roman numeral from I to XXXIX, in capitals, written the standard way; None
    for anything else ("IIII", "VX", "xi")."""
    m = _ROMAN_RE.fullmatch(core)
    if m is None or not core:
        return None
    tens, units = m.group(1), m.group(2)
    return 10 * len(tens) + _ROMAN_UNITS.index(units) if units or tens else None


def _amount_value(num: ParsedNumber) -> Decimal:
    return Decimal(f"{'-' if num.negative else ''}{num.integer or '0'}.{num.fraction or '0'}")


def _year_of_range(pieces: list[str], k: int, rules: LanguageRules) -> Optional[str]:
    """``pieces[k]`` read as a year (``bare_year``, as a lone "1999" is) where it is an end of a
    range ("1990-1995", "1914-18", "1200-1500 calories": English says "twelve hundred to fifteen
    hundred") or a year of a season ("2019/20", "2019/2020"); None elsewhere, and in the
    languages whose years are cardinals."""
    year = pieces[k]
    if len(year) != 4 or not year.isdecimal():
        return None

    def number_at(j: int) -> Optional[str]:
        return pieces[j] if 0 <= j < len(pieces) and pieces[j].isdecimal() else None

    after, before = number_at(k + 2), number_at(k - 2)
    link_after = pieces[k + 1] if after is not None else None
    in_range = (link_after in _DASHES and _is_range(year, after)) or (
        before is not None and pieces[k - 1] in _DASHES and _is_range(before, year))
    season = (link_after == "/" and after is not None and (
        (len(after) == 2 and int(after) == (int(year) + 1) % 100) or (len(after) == 4 and int(after) == int(year) + 1))
    ) or (before is not None and pieces[k - 1] == "/" and len(before) == 4 and int(year) == int(before) + 1)
    return rules.bare_year(int(year)) if in_range or season else None


def _year_after_word(pieces: list[str], k: int, rules: LanguageRules) -> Optional[str]:
    """``pieces[k]`` read as a year (``bare_year``, as a lone "2024" is) where it ends the token
    after a word and a dash ("mid-2024", "pre-2020", "Class-of-2024"), and with an "s" after it as
    an English decade ("mid-1990s" -> "mid nineteen nineties", "mid-70s" and "mid-'70s" -> "mid
    seventies"); None elsewhere, and in the languages whose years are cardinals."""
    year, rest = pieces[k], pieces[k + 1:]
    elided = k >= 3 and pieces[k - 1] in ("'", "’")  # "mid-'70s"
    before = k - 1 - elided
    if not year.isdecimal() or before < 1 or pieces[before] not in _DASHES or not pieces[before - 1].isalpha():
        return None
    if len(year) == 2 and rest == ["s"] and year.endswith("0") and year != "00" and rules.code == "en":
        return _pluralize(rules.cardinal(int(year)))  # "mid-70s": a decade, or temperatures in the seventies
    if len(year) != 4 or elided:
        return None
    said = rules.bare_year(int(year))
    if said is None or not rest:
        return said
    return _pluralize(said) if rest == ["s"] and year.endswith("0") and rules.code == "en" else None


def _is_range(a: str, b: str) -> bool:
    """Whether "a-b" is a range of numbers. Short ones are ("10-20", "9-5", "1990-95"); between
    numbers of three digits or more only an ascending pair of three-digit numbers ("pages
    123-145"), a pair below 200 either way (a score: "112-108"), years ("1990-1995") or a round
    upper bound ("500-1000") is: phone numbers ("555-1234"), ZIP+4 ("94103-1234") and ids are not
    ranges, nor is anything with a leading 0."""
    if any(len(g) > 1 and int(g[0]) == 0 for g in (a, b)):
        return False
    if min(len(a), len(b)) < 3:
        return True
    if len(a) == len(b) == 3 and int(a) < 200 and int(b) < 200:
        return True  # a score, whichever side won: "112-108"
    if (len(a), a) >= (len(b), b):  # no leading zeros: the longer number is the larger (no int() of 5,000 digits)
        return False
    years = all(len(g) == 4 and 1000 <= int(g) <= 2099 for g in (a, b))
    return (len(a) == len(b) == 3) or years or int(b[-2:]) == 0


_RANGE_WORD = {"en": "to", "es": "a", "pt": "a", "nl": "tot"}
# what joins two short day names written apart into a range: "Mon to Fri", "seg. a sex.", "ma t/m vr"
_DAY_RANGE_LINKS = {"en": {"to", "through", "thru", "-", "–"}, "es": {"a", "-", "–"},
                    "pt": {"a", "à", "até", "-", "–"}, "nl": {"t/m", "tot", "-", "–"}}
# "between 1-2 p.m." is "between one and two": the range's "to" after "between" is its "and"
_BETWEEN = {"en": "between", "es": "entre", "pt": "entre", "nl": "tussen"}
_BETWEEN_AND = {"en": "and", "es": "y", "pt": "e", "nl": "en"}
_OR_WORD = {"en": "or", "es": "o", "pt": "ou", "nl": "of"}
_BY_WORD = {"en": "by", "es": "por", "pt": "por", "nl": "bij"}  # "3x4": dimensions
# "30-min", "5-km": a unit of two letters or more ("4-H" is a name)
_COMPOUND_MEASURE_RE = re.compile(r"(?P<num>\d+(?:\.\d+)?)-(?P<unit>[A-Za-z]{2,3})")
# "2+2=4", "1+1": numbers joined by "+" and "=" with no spaces (a phone's "+34" has none before it)
_SUM_RE = re.compile(r"\d+(?:[.,]\d+)?(?:[+=]\d+(?:[.,]\d+)?)+")
_AFTER_MEASURE_WORDS = frozenset("tall long wide high deep thick and by x ×".split())  # "6 ft 2 in tall"
# Names written with signs, said alike in every language: programming languages
_LETTERS_WITH_SIGNS = {"C++": "C plus plus", "C#": "C sharp", "F#": "F sharp"}
# English short forms that are words only in one case ("MoM", not "Mom"), and an even split
_EN_FIXED_READINGS = {"YoY": "year over year", "QoQ": "quarter over quarter", "MoM": "month over month",
                      "50-50": "fifty-fifty", "50/50": "fifty-fifty", "24/7/365": "twenty-four seven three sixty-five"}
_GRADE_RE = re.compile(r"(?P<letters>[A-DF]|AB|O)\+")  # a grade, a rating or a blood group: "A+", "AB+"
_FRACTION_BEFORE_WORD_RE = re.compile(r"(\d{1,2})/(\d{1,2})-([A-Za-z]{2,})")  # "1/2-price"
_DECIMAL_BEFORE_WORD_RE = re.compile(r"(?P<int>\d+)\.(?P<frac>\d+)-(?P<word>[A-Za-z]{2,})")  # "0.25-acre"
_WORD_RE = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")  # letters, maybe hyphenated: "e-ticket"
_VERSION_WORDS = frozenset({"version", "ver", "v", "release", "build"})
# A listing's rooms (English): "3 bd / 2 ba", "2BR/1BA", "1.5 ba"
# ("4 beds", "2 baths" are words, and a bed is no bedroom)
_ROOMS = {"bd": "bedroom", "br": "bedroom", "bdr": "bedroom", "bdrm": "bedroom", "ba": "bathroom", "bth": "bathroom"}
_ROOMS_RE = re.compile(r"(?P<num>\d{1,2}(?:\.5)?)(?P<abbr>[A-Za-z]{2,4})")
_DATE_RANGE_RE = re.compile(r"(\d{1,2})/(\d{1,2})[-–](\d{1,2})/(\d{1,2})")  # "11/25–11/30"
_RATIO_RE = re.compile(r"(\d{1,3}):(\d)")  # "3:1": one digit after the colon, so no time
_KEY_NAMES = {"ctrl": "Control", "control": "Control", "shift": "Shift", "alt": "Alt", "cmd": "Command",
              "command": "Command", "opt": "Option", "option": "Option", "win": "Windows", "fn": "Function",
              "del": "Delete", "esc": "Escape", "enter": "Enter", "tab": "Tab", "space": "Space"}
_KEY_COMBO_RE = re.compile(r"(?i:ctrl|control|shift|alt|cmd|command|opt|option|win|fn)(?:\+[A-Za-z0-9]{1,6})+")
_HEX_RE = re.compile(r"0x[0-9A-Fa-f]{2,16}")  # "0x80070005"
_STREET_TYPES = {"St": "Street", "Ave": "Avenue", "Rd": "Road", "Blvd": "Boulevard", "Ln": "Lane", "Hwy": "Highway",
                 "Pkwy": "Parkway"}
_COMPASS_POINTS = {"N": "North", "S": "South", "E": "East", "W": "West", "NE": "Northeast", "NW": "Northwest",
                   "SE": "Southeast", "SW": "Southwest"}
_EN_ORDINAL_RE = re.compile(r"\d+(?:st|nd|rd|th)")  # "5th" before "Ave"
_HANDLE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{1,29}")
_DECIMAL_SECONDS_RE = re.compile(r"(?P<num>\d+(?P<sep>[.,])\d+)s")  # "3.2s", "0,8s"
_DIMENSIONS_RE = re.compile(r"\d+(?:[.,]\d+)?(?:[x×]\d+(?:[.,]\d+)?)+")
# Words between two numbers that count the same noun: "1 o 2 personas", "1 a 3 semanas", "1 ou 2".
_NUMBER_LINKS = frozenset({"o", "u", "y", "e", "a", "ou"})
_DOT_WORD = {"en": "point", "es": "punto", "pt": "ponto", "nl": "punt"}
