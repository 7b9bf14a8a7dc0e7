"""``LanguageRules``: how one language reads numbers, money, percentages, dates, times and
abbreviations. The token engine in ``api/text/normalization.py`` decides *what* a token is;
a ``LanguageRules`` subclass (``normalization_en.py``, ``_es``, ``_pt``, ``_nl``) decides how to
*say* it. Every ``read_*`` method returns plain words separated by single spaces (no
punctuation added), or None when the value cannot be read (the engine then leaves the token).

Numbers are spelled by num2words; the subclasses fix agreement where num2words does not
(Spanish "veintiún mil", feminine "doscientas libras", Portuguese "duas horas", ...).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Optional

from num2words import num2words

from api.text.normalization_gender import NounGender

__all__ = ["Abbreviation", "CurrencyNames", "LanguageRules", "ParsedNumber", "UnitNames", "spell"]

@functools.lru_cache(maxsize=4096)  # digits, small counts and years recur in every text
def spell(n: int, lang: str, to: str = "cardinal") -> str:
    """num2words without its commas ("one million, two hundred" would read as a pause)."""
    return " ".join(num2words(n, lang=lang, to=to).replace(",", " ").split())


# num2words is exact up to here; longer digit strings (ids, phone numbers) are read digit by digit.
MAX_CARDINAL_DIGITS = 15


@dataclass(frozen=True, slots=True)
class CurrencyNames:
    """How a currency is counted: ``unit`` and ``cent`` are (singular, plural); genders are
    "m"/"f" for languages with agreement."""

    unit: tuple[str, str]
    cent: tuple[str, str]
    unit_gender: str = "m"
    cent_gender: str = "m"


#: Region -> the peso a bare "$" names there (Argentina, Chile, Colombia, Uruguay), said "pesos" as Mexico's
SOUTH_AMERICAN_PESOS = {"ar": "ARS", "cl": "CLP", "co": "COP", "uy": "UYU"}


@dataclass(frozen=True, slots=True)
class UnitNames:
    """How a unit of measure is said after a number (api/text/normalization_units.py): ``one``
    after exactly 1, ``many`` otherwise (decimals too: "1.5 miles"); ``gender`` ("m"/"f") for the
    number's agreement in languages that have it ("una milla")."""

    one: str
    many: str
    gender: str = "m"


@dataclass(frozen=True, slots=True)
class Abbreviation:
    """An abbreviation's expansion.

    title: it precedes a name ("Dr.", "Sra."): its period never ends a sentence.
    can_end: it often closes a sentence ("etc.", "Inc.", "p.m."): before an uppercase word (or at
    the end of the text) its period also counts as the sentence's full stop. Other abbreviations
    ("e.g.", "vs.") only get a full stop at the very end of the text.
    before_number: only expanded when the next token starts with a digit ("No. 5"), or is one of
    ``nouns`` ("min. payment"; "wait a min. please" stays).
    nouns: the words it is expanded before; without before_number only before them ("bus. days"
    is "business days", "took the bus." stays).
    before_capital: the expansion to use instead when the next token starts with an uppercase
    letter ("St." is "Saint" before a name, "Street" otherwise); None when there is one.
    at_end: the expansion to use instead where nothing of its sentence follows: the end of the text,
    or punctuation after it ("utilities incl." and "tax incl.," are "included"); None when there is one.
    before_digit: the expansion to use instead before a number ("Est. 1998" is "Established", "Est.
    delivery" "Estimated"); None when there is one.
    agrees: an adjective that takes the gender of the noun right before it (Spanish and Portuguese
    "capacidad máx." is "capacidad máxima").
    before_code: with before_number, also expanded before a code in capitals with a digit after a
    record's noun (``LanguageRules.record_nouns``): "Model No. XR-7", "Part no. A12B".
    after_number: the expansion to use instead right after a number or an amount (Portuguese
    "p/ capitais" is "para", "R$ 10 p/ pessoa" "por"); None when there is one.
    not_before_number: no abbreviation before a number ("s/ juros" is "sem juros"; "S/ 25" is
    Peru's soles).
    """

    expansion: str
    title: bool = False
    can_end: bool = False
    before_number: bool = False
    before_capital: Optional[str] = None
    nouns: frozenset[str] = frozenset()
    at_end: Optional[str] = None
    before_digit: Optional[str] = None
    agrees: bool = False
    before_code: bool = False
    after_number: Optional[str] = None
    not_before_number: bool = False


@dataclass(frozen=True, slots=True)
class ParsedNumber:
    """A decimal number as written: digit strings without separators."""

    integer: str  # "" for ".5"
    fraction: str  # "" when none
    negative: bool = False


class LanguageRules:
    """Defaults are English-like; subclasses override data and the readings that differ."""

    code = "en"
    decimal_sep = "."
    group_sep = ","
    minus_word = "minus"
    decimal_word = "point"
    #: Whether two decimals after the sign are said as one number ("3,25": Spanish "tres coma
    #: veinticinco"); English says each digit ("three point two five"), as every language does
    #: for other decimals ("1,459", "0,05")
    two_decimals_as_number = False
    #: Whether an adjective follows its noun ("senha temporária", "clave temporal"): a word read
    #: before digits still leads them past one ("sua senha temporária é 4821")
    adjective_after_noun = False
    #: Words after which "1h30" is how long something takes, not a time of day (lowercase): "dura
    #: 1h30", "leva 2h15"; English reads "1h30" as a length everywhere
    duration_leads: frozenset[str] = frozenset()
    percent_word = "percent"
    currency_and_word = "and"
    ampersand_word = "and"
    months: tuple[str, ...] = ()
    date_order = "dmy"  # how d/m/y numeric dates are written: "dmy" or "mdy"
    currencies: dict[str, CurrencyNames] = {}
    #: the currency a bare "$" names where the text was written (a key of ``currencies``): dollars,
    #: or Mexico's pesos
    dollar_sign_code = "USD"
    # "k"/"m"/"b"/"bn" suffix of "$5M" -> (singular, plural) scale word: ("million", "million")
    scale_words: dict[str, tuple[str, str]] = {}
    #: A scale written as a word after an amount of money ("$1.5 million", "€2 mil millones") ->
    #: its key in ``scale_words``: the amount is read as "$1.5M" is, "one point five million
    #: dollars", not "one dollar and fifty cents million". A key of two words spans two tokens.
    spelled_scales: dict[str, str] = {}
    #: A scale's short form written apart after any number (lowercase, no period) -> its key in
    #: ``scale_words``: Dutch "5 mln inwoners", Portuguese "2,5 bi", "5 mi de pessoas".
    short_scales: dict[str, str] = {}
    #: A listing's rooms written short after a count (lowercase, no period): "3 bd", "2BR/1BA",
    #: "3 hab.", "3 qtos", "3 slpk"; and a booking's persons ("4 pers.").
    rooms: dict[str, UnitNames] = {}
    abbreviations: dict[str, Abbreviation] = {}  # lowercase, with the dots: "dr.", "e.g."
    #: Short day names (lowercase, no dot) -> the day: "Mon-Fri", "lun-vie" are read in full.
    weekday_abbreviations: dict[str, str] = {}
    #: Short month names (lowercase, no dot) -> the month, read in a date outside English: "8 de
    #: dic." (es, pt), "8 dec." (nl). English has its own rules (``_EN_SHORT_MONTHS``).
    month_abbreviations: dict[str, str] = {}
    #: The word between a day and its month ("8 de diciembre"; None: none, as in Dutch "8 december").
    day_month_link: Optional[str] = None
    # a unit key of api/text/normalization_units.py -> its names (a key left out is not read: "mi"
    # is "my" in Spanish); none at all: no units are read
    units: dict[str, UnitNames] = {}
    # "x²", "10³", "2⁵": words after the base for an exponent, and before any other exponent's number
    power_words: dict[int, str] = {2: "squared", 3: "cubed"}
    power_word = "to the power of"
    # how symbols are said in addresses (api/text/normalization_web.py) and around numbers
    # ("2 + 2 = 4", "#1", "~20", "50+", "1.5x"), and the words of "$9.99/month" and "4.5/5"
    symbol_words = {"@": "at", ".": "dot", "/": "slash", "-": "dash", "_": "underscore",
                    "+": "plus", "=": "equals", "±": "plus or minus", "#": "number", "~": "about", "×": "times", "x": "times", "per": "per",
                    "out of": "out of", "<": "less than", ">": "more than", "≤": "at most", "≥": "at least"}
    time_unit: Optional[str] = None  # a word that may follow a time and is already said: "uur"
    #: the words after a whole hour's time ("nueve en punto"), left out where a range joins two
    #: times ("de nueve a catorce horas"); a range says ``time_unit`` once, after its last time
    on_the_hour: Optional[str] = None
    # The group separator still parses as a decimal sign where it is not followed by exactly three
    # digits: "3.5" in Spanish, "3,5" in Mexico's Spanish ("1.234", "1,234" stay groups).
    lenient_decimal = False
    #: Whether a decimal written without its integer part (".5") is said without it ("point five")
    leading_point_alone = False

    def __init__(self) -> None:
        g, d = re.escape(self.group_sep), re.escape(self.decimal_sep)
        pattern = r"(?P<sign>[-\u2212])?(?P<int>\d{{1,3}}(?:{g}\d{{3}})+|\d+)?(?:{d}(?P<frac>\d+))?"
        self._number_re = re.compile(pattern.format(g=g, d=d))
        # The other convention, for amounts of money only: "€3,50" in English, "$5.99" in Spanish.
        self._swapped_re = re.compile(pattern.format(g=d, d=g))
        # ... and grouped in it: "$1,234.56" and "$1,234,567" in Spanish (as Mexico writes them)
        self._swapped_grouped_re = re.compile(rf"[-\u2212]?\d{{1,3}}(?:{d}\d{{3}})+(?:{g}\d{{1,2}})?")
        self.currency_by_name: dict[str, str] = {}
        for code, names in self.currencies.items():
            for name in names.unit:  # the first currency of a name keeps it: "pesos" are Mexico's
                self.currency_by_name.setdefault(name.lower(), code)

    # --- numbers ------------------------------------------------------------------------------

    def parse_amount(self, text: str, dollar_sign: bool = False) -> Optional[ParsedNumber]:
        """Like parse_number, but a money amount written in the other convention is accepted when
        unambiguous: a single separator followed by exactly two digits ("3,50" in English), or
        groups of three in it ("1,234.56", "1,234,567" in Spanish). After a dollar sign, one group
        of three is a group too outside English ("$1,234" in Spanish, as Mexico writes it); after
        another symbol it stays a decimal ("1,459 €/l" is a Spanish fuel price)."""
        num = self.parse_number(text)
        swapped_group = self._swapped_grouped_re.fullmatch(text) is not None
        ambiguous = (num is not None and len(num.fraction) == 3 and self.group_sep not in text
                     and dollar_sign and self.code != "en")
        if (num is None and (swapped_group or re.fullmatch(r"[-\u2212]?\d*[.,]\d\d", text))) or (
                ambiguous and swapped_group):
            m = self._swapped_re.fullmatch(text)
            if m:
                integer = (m.group("int") or "").replace(self.decimal_sep, "")
                num = ParsedNumber(integer, m.group("frac") or "", m.group("sign") is not None)
        return num

    def parse_number(self, text: str) -> Optional[ParsedNumber]:
        """A whole token core as a number in this locale ("1,234.5" en / "1.234,5" es), or None."""
        m = self._number_re.fullmatch(text)
        if m and (m.group("int") or m.group("frac")):
            return ParsedNumber(
                (m.group("int") or "").replace(self.group_sep, ""),
                m.group("frac") or "",
                m.group("sign") is not None,
            )
        if self.lenient_decimal:
            group = re.escape(self.group_sep)
            m = re.fullmatch(rf"(?P<sign>[-\u2212])?(?P<int>\d+){group}(?P<frac>\d{{1,2}}|\d{{4,}})", text)
            if m:
                return ParsedNumber(m.group("int"), m.group("frac"), m.group("sign") is not None)
        return None

    def cardinal(self, n: int, gender: str = "m", before_noun: bool = False) -> str:
        """An integer in words; ``gender``/``before_noun`` matter for es/pt agreement only."""
        return spell(n, self.code)

    def ordinal(self, n: int, gender: str = "m") -> str:
        return spell(n, self.code, "ordinal")

    def digits(self, digits: str) -> str:
        """Digit by digit: "007" -> "zero zero seven"."""
        return " ".join(self.cardinal(int(c)) for c in digits)

    def read_integer(self, digits: str, gender: str = "m", before_noun: bool = False) -> str:
        if len(digits) > MAX_CARDINAL_DIGITS or (len(digits) > 1 and digits[0] == "0"):
            return self.digits(digits)
        return self.cardinal(int(digits), gender, before_noun)

    def read_number(self, num: ParsedNumber, gender: str = "m", before_noun: bool = False) -> str:
        """Integer part as a cardinal, fraction digit by digit ("3.25" -> "three point two five"),
        or where the language says two decimals as a number, as one ("3,25" -> "tres coma
        veinticinco"). Written without its integer part (".312"), English says none ("point three
        one two")."""
        if not num.integer and num.fraction and self.leading_point_alone:
            words = f"{self.decimal_word} {self.digits(num.fraction)}"
            return f"{self.minus_word} {words}" if num.negative else words
        words = self.read_integer(num.integer or "0", gender, before_noun and not num.fraction)
        if num.fraction:
            words = f"{words} {self.decimal_word} {self.read_decimals(num.fraction)}"
        return f"{self.minus_word} {words}" if num.negative else words

    def read_decimals(self, fraction: str) -> str:
        """The digits after the decimal sign: each said, or two as one number where the language
        says them so and the first is no zero ("0,05" stays "cero coma cero cinco")."""
        if self.two_decimals_as_number and len(fraction) == 2 and fraction[0] != "0":
            return self.cardinal(int(fraction))
        return self.digits(fraction)

    def noun_link(self, words: str) -> str:
        """The word (with a space before it) between a count's ``words`` and the noun it counts:
        Spanish "dos millones *de* personas", "un millón *de* euros"; none in English."""
        return ""

    # --- money, percentages -------------------------------------------------------------------

    def count_noun(self, n: int, names: tuple[str, str], gender: str) -> str:
        """"5" + ("dollar", "dollars") -> "five dollars"."""
        return f"{self.cardinal(n, gender, before_noun=True)} {names[0] if n == 1 else names[1]}"

    def read_currency(self, num: ParsedNumber, code: str, scale: Optional[str] = None,
                      singular: bool = False) -> Optional[str]:
        """An amount of ``code`` (ISO 4217): "3,50" EUR -> "three euros and fifty cents".
        ``singular``: a whole amount as an English compound adjective, "a twenty dollar fee"."""
        names = self.currencies.get(code)
        if names is None:
            return None
        if scale is not None:  # "$2.5M" -> "two point five million dollars"
            scale_word = self.scale_words[scale][0 if self.takes_one_scale(num) else 1]
            # the number is said before the scale: a noun from a million up, masculine in the
            # languages with genders ("un millón de libras", "doscientos millones de rupias")
            gender = names.unit_gender if scale == "k" else "m"
            return (
                f"{self.read_number(num, gender, before_noun=True)} {scale_word} "
                f"{self.scale_connector(scale)}{names.unit[0 if singular else 1]}"
            )
        if singular and not num.fraction and not num.negative and len(num.integer) <= MAX_CARDINAL_DIGITS:
            return f"{self.cardinal(int(num.integer or '0'))} {names.unit[0]}"
        if len(num.fraction) > 2 or (num.integer and len(num.integer) > MAX_CARDINAL_DIGITS):
            return f"{self.read_number(num)} {names.unit[1]}"
        units = int(num.integer or "0")
        cents = int(num.fraction.ljust(2, "0")) if num.fraction else 0
        parts = []
        if units or not cents:
            parts.append(self.count_noun(units, names.unit, names.unit_gender))
        if cents:
            parts.append(self.count_noun(cents, names.cent, names.cent_gender))
        words = f" {self.currency_and_word} ".join(parts)
        return f"{self.minus_word} {words}" if num.negative else words

    def takes_one_scale(self, num: ParsedNumber) -> bool:
        """Whether a scale after ``num`` is said in the singular: after exactly one ("one million",
        "un millón"; "1,5 millones")."""
        return num.integer.lstrip("0") == "1" and not num.fraction

    def scale_connector(self, scale: str) -> str:
        """Word (with a trailing space) between a scale and a noun: Spanish "millones *de*
        dólares"; none in English."""
        return ""

    def read_percent(self, num: ParsedNumber) -> str:
        return f"{self.read_number(num)} {self.percent_word}"

    def read_measure(self, num: ParsedNumber, unit: str, singular: bool = False) -> Optional[str]:
        """An amount of a unit (a key of ``units``): "5" km -> "five kilometers", "1,5" km (es)
        -> "uno coma cinco kilómetros", "21" lb (es) -> "veintiuna libras"; None when this
        language has no name for it. ``singular``: the unit's singular whatever the amount (an
        English compound adjective: "a five kilometer run")."""
        names = self.units.get(unit)
        if names is None:
            return None
        if singular:
            names = UnitNames(names.one, names.one, names.gender)
        whole = num.integer or "0"
        if num.fraction or len(whole) > MAX_CARDINAL_DIGITS or (len(whole) > 1 and whole[0] == "0"):
            return f"{self.read_number(num, names.gender)} {names.many}"
        words = self.count_noun(int(whole), (names.one, names.many), names.gender)
        return f"{self.minus_word} {words}" if num.negative else words

    def read_unit_name(self, unit: str) -> Optional[str]:
        """A unit with no number before it ("per m²" -> "per square meter"): its singular name."""
        names = self.units.get(unit)
        return names.one if names is not None else None

    # --- dates, times, years ------------------------------------------------------------------

    def month_name(self, month: int) -> str:
        return self.months[month - 1]

    def read_year(self, year: int) -> str:
        """A year inside a date; plain 4-digit tokens are only read as years by ``bare_year``."""
        return self.cardinal(year)

    #: what joins a month to its year ("diciembre de 2025"); "" where nothing does
    month_year_link = ""

    def read_month_year(self, month: int, year: int) -> str:
        """A month of a year written "12/2025": "December twenty twenty-five"."""
        link = f" {self.month_year_link}" if self.month_year_link else ""
        return f"{self.month_name(month)}{link} {self.read_year(year)}"

    def bare_year(self, year: int) -> Optional[str]:
        """A lone 4-digit token read as a year ("1999" -> "nineteen ninety-nine"), or None to
        read it as a cardinal (the default)."""
        return None

    def digit_pairs(self, digits: str) -> Optional[str]:
        """Three or four digits that name a thing read in pairs, as English says flight and model
        numbers and screen sizes ("1080" -> "ten eighty"), or None to read them as a count (the
        default)."""
        return None

    def read_date(self, year: Optional[int], month: int, day: int) -> str:
        raise NotImplementedError

    def read_time(self, hour: int, minute: int, meridiem: Optional[str]) -> str:
        """``meridiem`` is "am"/"pm" or None (24-hour clock)."""
        raise NotImplementedError

    def read_meridiem(self, meridiem: str) -> Optional[str]:
        """How "am"/"pm" after a time is said; None when the language does not read it."""
        return None

    # "a 5 km run": after these words an amount of a unit is an adjective, its unit singular
    adjective_articles: frozenset[str] = frozenset()
    #: Words after "a $20" that it does not describe: "a $20 or $30 fee" keeps "dollars".
    amount_link_words: frozenset[str] = frozenset()
    #: Determiners after which an amount describes the singular noun that follows it ("the $20
    #: fee", "your 65\" TV"), where no verb or pronoun follows instead ("the $20 you paid").
    adjective_determiners: frozenset[str] = frozenset()
    #: Words after "the $20" that it does not describe, beyond ``amount_link_words``.
    not_described_words: frozenset[str] = frozenset()
    # "1° lugar": a degree sign typed for the ordinal indicator "º" before a word (es, pt)
    degree_sign_ordinal = False
    # "el 5/6", "on 5/6": after these words d/m (m/d in English) is a date, not a fraction
    date_lead_words: frozenset[str] = frozenset()
    #: words after which d/m is a date unless it is a plain fraction (a half, thirds, quarters):
    #: "order by 12/3", but "cut by 1/3"
    fraction_or_date_lead_words: frozenset[str] = frozenset()
    #: words after which a day and month joined by a dash are a date ("op 15-12"), not a range
    dash_date_lead_words: frozenset[str] = frozenset()
    #: Words (lowercase; two for "world war") after which a Roman numeral from I to XXXIX is a
    #: number, read as a cardinal: "Chapter IV" -> "Chapter four", "siglo XXI" -> "siglo veintiuno".
    #: Elsewhere one stays as written: "I", "V", "XL", "MIX" are words or sizes, and after a name
    #: it may be a monarch's ordinal ("Henry VIII") or a sequel's number ("Rocky III").
    roman_lead_words: frozenset[str] = frozenset()
    #: Words after which "120/80" is a blood pressure, said "<high> <pressure_word> <low>".
    pressure_lead_words: frozenset[str] = frozenset()
    pressure_word = "over"
    #: Words after which a 5-digit number is a postal code, read digit by digit (en: US states).
    postcode_lead_words: frozenset[str] = frozenset()
    #: A postcode and the word after it, as an address ends ("28013 Madrid", "1012 LG"): read digit
    #: by digit where a count would stand
    postcode_before_place: Optional[re.Pattern[str]] = None
    #: Words (lowercase) after which a number of three digits or more is read digit by digit:
    #: "PIN 4821", "ZIP 94103".
    digits_lead_words: frozenset[str] = frozenset()
    #: Two-word phrases (lowercase) after which four digits are a card's last: "ending in 4242".
    last_digits_phrases: frozenset[str] = frozenset()
    #: Records whose numbers name them, and the words for their number: "your order number is 4821",
    #: "su número de pedido es 4821" read the digits one by one (none: read as counts)
    record_nouns: frozenset[str] = frozenset()
    record_number_words: frozenset[str] = frozenset()
    #: What masked digits are said with: "****1234" is a card or account "ending in one two three
    #: four" (None: the digits alone).
    masked_digits_phrase: Optional[str] = None
    #: The phrase after a masculine noun, where it agrees with it: "su número ****1234" is "terminado en".
    masked_digits_masculine: Optional[str] = None
    #: Verbs (lowercase) that dial a number, and the words that may stand between them and it:
    #: "Call 911", "llama al 112", "ligue para o 190" read the number digit by digit.
    dial_words: frozenset[str] = frozenset()
    dial_articles: frozenset[str] = frozenset()
    #: The keypad's "*" and "#" as said ("star", "pound"): "*67", "press #" (none: left as written).
    keypad_words: dict[str, str] = {}
    #: words after a key that make it one ("the # key"), and words that go on a list of keys
    #: ("press 1, then #", "press 1 or #")
    keypad_key_words: frozenset[str] = frozenset()
    keypad_list_words: frozenset[str] = frozenset()
    #: Verbs (lowercase) after which a lone "*" or "#" is a key: "press #", "pulse #".
    keypad_verbs: frozenset[str] = frozenset()
    #: "to" in "Text STOP to 55555": between a dial word's keyword and a short code
    short_code_links: frozenset[str] = frozenset()
    #: A letter and a slash written against a word, for a preposition ("c/queso": "con queso",
    #: "s/sal": "sin sal"), and such short forms that are words of their own ("c/u": "cada uno")
    slash_prepositions: dict[str, str] = {}
    slash_words: dict[str, str] = {}
    #: Whether "6'2\"" is a height in feet and inches ("six foot two")
    reads_feet_and_inches = False
    #: "is" in "your PIN is 4821": a word between a ``digits_lead_words`` word and its number
    copulas: frozenset[str] = frozenset()
    # "$9.99/mo": short words after "/" said in full
    per_words: dict[str, str] = {}
    # denominator (2 to 10) -> (singular, plural) of its fraction word: "un medio", "tres cuartos"
    fraction_names: dict[int, tuple[str, str]] = {}
    and_a_half = "and a half"  # "1½"
    #: "1/2 taza" -> "media taza": a half of a noun, by the noun's gender (es, pt)
    half_words: dict[str, str] = {}
    #: "1/4 taza" -> "un cuarto de taza": the word between another fraction and its noun (es, pt)
    fraction_of_word: Optional[str] = None
    #: "Step 1/3" -> "step one of three": words that number a place in a sequence, before which
    #: "a/b" is the place and the whole; and the word between them
    sequence_words: frozenset[str] = frozenset()
    sequence_of_word = "of"
    #: "3/4 partes" -> "tres cuartas partes": nouns a fraction is said of with a feminine ordinal
    part_nouns: frozenset[str] = frozenset()
    #: "1x" -> "una vez": the singular of a sign's word after one (es, pt)
    sign_singulars: dict[str, str] = {}
    #: "50+ personas" -> "más de cincuenta personas": a "+" after a count is said before it (es, pt)
    more_than_words: Optional[str] = None

    def fraction_before(self, numerator: int, denominator: int, noun: str, unit: bool) -> Optional[str]:
        """What a fraction is said as before the noun it is a part of ("1/2 taza" -> "media", "3/4
        partes" -> "tres cuartas", "1/4 kg" -> "un cuarto de"); ``unit``: the noun is a unit's name,
        said in the symbol's place. None: the fraction is read alone, and the noun as itself. This
        is Spanish and Portuguese (``fraction_of_word``); English and Dutch have their own."""
        fraction = self.read_fraction(numerator, denominator)
        gender = self.noun_gender(noun.split()[0]) if self.fraction_of_word else None
        if fraction is None or gender is None:
            return None
        if (numerator, denominator) == (1, 2):
            return self.half_words[gender]
        if noun.lower() in self.part_nouns:
            plural = "s" if numerator > 1 else ""
            return f"{self.cardinal(numerator, 'f', before_noun=True)} {self.ordinal(denominator, 'f')}{plural}"
        return f"{fraction} {self.fraction_of_word}"

    def read_fraction(self, numerator: int, denominator: int) -> Optional[str]:
        """"3/4" -> "tres cuartos" (``fraction_names``); None for a fraction it has no name for,
        which leaves "a/b" to the generic reading."""
        names = self.fraction_names.get(denominator)
        if names is None or not 0 < numerator < denominator:
            return None
        return f"{self.cardinal(numerator, before_noun=True)} {names[0] if numerator == 1 else names[1]}"

    # --- ordinals -----------------------------------------------------------------------------

    def match_ordinal(self, core: str, next_gender: Optional[str] = None) -> Optional[str]:
        """"21st" -> "twenty-first"; None when ``core`` is not an ordinal of this language.
        ``next_gender``: the gender of the noun right after it, if one is (``noun_gender``)."""
        return None

    # --- agreement ----------------------------------------------------------------------------

    #: Where numbers agree with the noun after them (es, pt): how that noun's gender is told.
    nouns: Optional[NounGender] = None
    #: Feminine articles that mark a lone number as a feminine one, an hour above all ("a las 21",
    #: "às 2 da tarde"), when no noun after it says otherwise.
    feminine_before: frozenset[str] = frozenset()

    def noun_gender(self, word: str) -> Optional[str]:
        """"m"/"f" when ``word`` is a noun a number before it counts, None when it is not ("de",
        "y", "esta"): api/text/normalization_gender.py. Without agreement any word counts ("m")."""
        if self.nouns is None:
            return "m" if word.isalpha() else None
        return self.nouns.of(word)
