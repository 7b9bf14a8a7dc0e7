"""Reading measures: a number and its unit ("30°C", "50 km/h", "20 m²"; the units themselves are in
``normalization_units.py``), percentages, heights ("6'2\"", "6 ft 2 in"), inches after a mark,
dimensions ("3x4", '12" x 8"'), a number and unit joined by a dash ("30-min", "0.25-acre") and rooms
("3 bd / 2 ba"). A mixin of the token reader (``api/text/normalization.py``).
"""

from __future__ import annotations

import re
from typing import Optional

from api.text.normalization_money import CODES, PREFIX_MONEY_RE, SUFFIX_MONEY_RE, SYMBOLS
from api.text.normalization_rules import ParsedNumber
from api.text.normalization_tokens import BY_WORD, RANGE_WORD, Token, TokenContext, starts_digit
from api.text.normalization_units import (
    ATTACHED_ONLY, STANDALONE, TWO_WORD_UNITS, UNIT_SYMBOLS, attached_unit, number_range,
)

# the second words of two-word units ("sq ft", "fl oz"): their period is the short form's
UNITS_SECOND_WORDS = frozenset(second for seconds in TWO_WORD_UNITS.values() for second in seconds)
_PERCENT_BEFORE_DASH_RE = re.compile(r"\s?%(?=\s?[-–])")
# a temperature written without its degree sign, and the words that make it one
_BARE_FAHRENHEIT_RE = re.compile(r"(?P<num>\d{2,3})F")
_HEAT_WORDS = frozenset("preheat oven bake roast heat temperature temp degrees broil grill".split())
def _inches_written_short(tok: Token) -> bool:
    """Whether ``tok`` is "in." with its period (after a size's sides; "in" alone is a word)."""
    return tok.core == "in" and tok.trail.startswith(".")


_RATE_PERIODS = {"a.m": "ao mês", "a.a": "ao ano"}  # Portuguese: "1,99% a.m."
_PERCENT_RANGE_END_RE = re.compile(r"%[-–](?P<high>\d[\d.,]*)")  # the middle of "5 %-10 %"


class MeasureReading(TokenContext):
    """Measures, percentages, heights, dimensions and rooms."""

    def _read_height(self, i: int) -> tuple[Optional[str], int]:
        """Feet and inches, as a height is said in English: 6'2" -> "six foot two"."""
        tok = self.tokens[i]
        m = _HEIGHT_RE.fullmatch(tok.core) if self.rules.reads_feet_and_inches else None
        if m is None:
            return None, 0
        if not m.group("mark"):
            if not tok.trail.startswith(_INCH_MARKS):
                return None, 0  # "6'2" alone may be anything
            self.tokens[i] = Token(tok.raw, tok.lead, tok.core, tok.trail[1:])  # the mark is said
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
        self.tokens[i] = Token(tok.raw, tok.lead, tok.core, tok.trail[1:])  # the mark is said
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
        return (measured and not prev.trail.strip("".join(_INCH_MARKS)) and starts_digit(nxt)) or self._in_sides(i)

    def _in_sides(self, i: int) -> bool:
        """Whether the "x" at token ``i`` stands between the sides of a size written apart, its unit
        after the last: "40 x 30 x 20 cm", "10 x 20 m", "24 x 36 in." (not "2 x 3 = 6")."""
        first, last = i - 1, i + 1
        while self._times(first - 1) and self._side(first - 2):
            first -= 2
        while self._times(last + 1) and self._side(last + 2):
            last += 2
        unit = self.tokens[last + 1] if last + 1 < len(self.tokens) else None
        return (self._side(first) and self._side(last) and unit is not None and not unit.lead
                and (unit.core in UNIT_SYMBOLS or _inches_written_short(unit)) and bool(self.rules.units))

    def _describes(self, i: int, last: int) -> bool:
        """Whether the measure at token ``i`` (its unit the token ``last``; a size's sides before it
        count too) describes the word after it, as "a 5 km run", "your 10 GB plan" do
        (``_adjective_amount``): its unit is then said in the singular."""
        first = self._size_start(i)
        return self._adjective_amount(first, last - first)

    def _size_start(self, i: int) -> int:
        """The first side's index where token ``i`` is the last side of a size written apart ("24 x
        36 cm": the article before "24" makes it an adjective); ``i`` itself otherwise."""
        first = i
        while self._times(first - 1) and self._side(first - 2):
            first -= 2
        return first

    def _side(self, k: int) -> bool:
        tok = self.tokens[k] if 0 <= k < len(self.tokens) else None
        return tok is not None and not tok.lead and not tok.trail and self.rules.parse_number(tok.core) is not None

    def _times(self, k: int) -> bool:
        return 0 <= k < len(self.tokens) and self.tokens[k].raw in ("x", "×")

    def _between_count_and_price(self, i: int) -> bool:
        """Whether token ``i`` stands alone between a count and a price: "2 x $19.99", "3 × €5",
        "2 x 5 €", "2 x 5€"."""
        tok = self.tokens[i]
        if tok.lead or tok.trail or i == 0 or i + 1 >= len(self.tokens):
            return False
        prev, nxt, after = self.tokens[i - 1], self.tokens[i + 1], self._next(i + 1)
        if not prev.core.isdecimal() or prev.trail or nxt.lead:
            return False
        if PREFIX_MONEY_RE.fullmatch(nxt.core) or SUFFIX_MONEY_RE.fullmatch(nxt.core):
            return True
        if nxt.core in SYMBOLS and not nxt.trail and starts_digit(after):  # "2 x € 5"
            return True
        return (starts_digit(nxt) and not nxt.trail and after is not None and not after.lead
                and (after.core in SYMBOLS or after.core in CODES))

    def _inside_quotation(self, i: int) -> bool:
        """Whether a double quotation mark opened before token ``i`` is still open."""
        open_ = False
        for tok in self.tokens[:i]:
            if '"' in tok.lead or "“" in tok.lead:
                open_ = True
            elif open_ and ('"' in tok.trail or "”" in tok.trail):
                open_ = False
        return open_

    def _read_percent(self, i: int) -> tuple[Optional[str], int]:
        tok, nxt = self.tokens[i], self._next(i)
        if tok.core.endswith("%"):
            reading = self._percent(tok.core[:-1].rstrip())
            period = self._rate_period(i) if reading is not None else None
            return (f"{reading} {period}", 1) if period else (reading, 0)
        if nxt is not None and nxt.core == "%" and not tok.trail and not nxt.lead:
            reading = self._percent(tok.core)
            if reading is not None:
                period = self._rate_period(i + 1)
                return (f"{reading} {period}", 2) if period else (reading, 1)
        end = _PERCENT_RANGE_END_RE.fullmatch(nxt.core) if nxt is not None and not nxt.trail else None
        last = self.tokens[i + 2] if end and i + 2 < len(self.tokens) else None
        if last is not None and last.core == "%" and not last.lead and not tok.trail and not nxt.lead:
            reading = self._percent(f"{tok.core}-{end.group('high')}")  # "5 %-10 %", as written with spaces
            if reading is not None:
                return reading, 2
        return None, 0

    def _rate_period(self, i: int) -> Optional[str]:
        """The period a rate is per, written short after the percentage at token ``i`` as Brazil
        writes interest: "1,99% a.m." is "ao mês", "26,7% a.a." "ao ano"; None elsewhere."""
        nxt = self._next(i)
        if self.rules.code != "pt" or nxt is None or nxt.lead or self.tokens[i].trail:
            return None
        return _RATE_PERIODS.get(nxt.core.lower())

    def _between_percents(self, i: int) -> bool:
        """Whether the dash at token ``i`` joins two percentages written apart: "5 % - 10 %",
        "5% – 10%"."""
        prev, nxt = self.tokens[i - 1] if i > 0 else None, self._next(i)
        if prev is None or prev.trail or not prev.core.endswith("%") or nxt is None or nxt.lead:
            return False
        if nxt.core.endswith("%"):
            return self.rules.parse_number(nxt.core[:-1].rstrip()) is not None
        after = self.tokens[i + 2] if i + 2 < len(self.tokens) else None
        return (not nxt.trail and self.rules.parse_number(nxt.core) is not None and after is not None
                and after.core == "%" and not after.lead)

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
        return f"{r.read_number(low)} {RANGE_WORD[r.code]} {r.read_percent(high)}"

    def _read_measure(self, i: int) -> tuple[Optional[str], int]:
        """A number and a unit of measure (api/text/normalization_units.py): "30°C", "50 km/h",
        "30° C" (the scale a token of its own), and a unit with a superscript alone ("per m²")."""
        r, tok, nxt = self.rules, self.tokens[i], self._next(i)
        if not r.units:
            return None, 0
        joins_next = nxt is not None and not tok.trail and not nxt.lead
        if (fahrenheit := _BARE_FAHRENHEIT_RE.fullmatch(tok.core)) and self._oven_words_before(i):
            return self._amount_of(None, fahrenheit.group("num"), "°F"), 0  # "preheat the oven to 350F"
        seconds = _DECIMAL_SECONDS_RE.fullmatch(tok.core)
        # "in 3.2s": seconds, with the language's decimal sign ("1,000s" in English are thousands);
        # "5s" and "30s" may be plurals and decades
        if seconds and seconds.group("sep") == r.decimal_sep:
            return self._amount_of(None, seconds.group("num"), "s", self._adjective_amount(i, 0)), 0
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
            reading = self._amount_of(low, written, unit, self._adjective_amount(i, consumed))
            if reading is None:
                return None, 0
            if consumed == 0 and tok.trail.startswith("."):  # "5lbs. of flour": the short form's period
                self.tokens[i] = Token(tok.raw, tok.lead, tok.core,
                                        self._abbreviation_trail(tok.trail[1:], i, title=False, can_end=True))
            return reading, consumed
        if tok.core in STANDALONE:
            return r.read_unit_name(UNIT_SYMBOLS[tok.core]), 0
        if joins_next and nxt.core in UNIT_SYMBOLS and nxt.core not in ATTACHED_ONLY:
            low, written = number_range(tok.core) or (None, tok.core)
            reading = self._amount_of(low, written, UNIT_SYMBOLS[nxt.core], self._describes(i, i + 1))
            if reading is not None:
                return reading, 1
        if joins_next and _inches_written_short(nxt) and "in" in r.units and self._size_start(i) != i:
            # "a 24 x 36 in. poster": after a size's sides "in." is inches (alone, "in" never is)
            reading = self._amount_of(None, tok.core, "in", self._describes(i, i + 1))
            if reading is not None:
                return reading, 1
        two_words = self._two_word_unit(i + 1) if joins_next else None
        if two_words is not None:  # "1,200 sq ft", "20 sq. m", "8 fl oz"
            low, written = number_range(tok.core) or (None, tok.core)
            reading = self._amount_of(low, written, two_words, self._describes(i, i + 2))
            if reading is not None:
                return reading, 2
        return None, 0

    def _oven_words_before(self, i: int) -> bool:
        """Whether a word of heat or cooking stands in the four words before token ``i``, in the same
        clause: after it a bare "350F" is Fahrenheit ("preheat the oven to 350F"), elsewhere it may be
        a seat ("12F")."""
        for k in range(i - 1, max(-1, i - 5), -1):
            if self.tokens[k].trail:
                return False
            if self.tokens[k].core.lower() in _HEAT_WORDS:
                return True
        return False

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

    def _two_word_unit(self, j: int) -> Optional[str]:
        """The unit key of "sq ft", "sq. m", "fl oz" written as two tokens from ``j`` ("ft2"), or None."""
        first, second = self.tokens[j], self._next(j)
        seconds = TWO_WORD_UNITS.get(first.core.lower().rstrip("."))
        if seconds is None or first.trail not in ("", ".") or second is None or second.lead:
            return None
        return seconds.get(second.core.rstrip("."))

    def _read_dimensions(self, i: int) -> tuple[Optional[str], int]:
        """"3x4" -> "three by four", "10x20 cm" -> "ten by twenty centimeters"; in English a size
        with a four-digit side is read in pairs, as screens are: "1920x1080" -> "nineteen twenty
        by ten eighty"."""
        r, tok, nxt = self.rules, self.tokens[i], self._next(i)
        if _INCH_DIMENSIONS_RE.fullmatch(tok.core) and tok.trail.startswith(_INCH_MARKS) and "in" in r.units:
            # '22"x14"x9"' (its last mark split off as punctuation): every side in inches, said once
            parts = re.split("[x×]", tok.core.replace('"', "").replace("″", "").replace("”", ""))
            nums = [r.parse_number(part) for part in parts]
            if any(num is None for num in nums):
                return None, 0
            self.tokens[i] = Token(tok.raw, tok.lead, tok.core, tok.trail[1:])  # the mark is said
            said = [r.read_number(num) for num in nums[:-1]]
            said.append(r.read_measure(nums[-1], "in", singular=self._adjective_amount(i, 0)))  # "a 12"x8" frame"
            return f" {BY_WORD[r.code]} ".join(said), 0
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
        return f" {BY_WORD[r.code]} ".join(said), consumed

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

    def _read_decimal_before_word(self, i: int) -> tuple[Optional[str], int]:
        """A decimal joined by a dash to the word it measures, an English adjective: "a 0.25-acre
        lot" -> "a zero point two five acre lot" (digit by digit after the point, as a decimal)."""
        m = _DECIMAL_BEFORE_WORD_RE.fullmatch(self.tokens[i].core)
        prev = self.tokens[i - 1] if i > 0 else None
        if m is None or self.rules.code != "en" or (prev is not None and prev.core.lower() in _VERSION_WORDS):
            return None, 0  # "version 2.10-beta": a version's number, left to the mixed reading
        return f"{self.rules.read_number(ParsedNumber(m.group('int'), m.group('frac')))} {m.group('word')}", 0

    def _read_rooms(self, i: int) -> tuple[Optional[str], int]:
        """A listing's rooms (``LanguageRules.rooms``): "3 bd" -> "three bedrooms", "2BR/1BA" ->
        "two bedrooms, one bathroom", "1.5 ba", "3 hab." -> "tres habitaciones", "3 qtos". Only
        these short forms after a number of one or two digits."""
        r, tok = self.rules, self.tokens[i]
        if not r.rooms or not tok.core[:1].isdecimal():
            return None, 0
        nxt = self._next(i)
        parts = tok.core.split("/")
        matches = [_ROOMS_RE.fullmatch(part) for part in parts]
        if len(parts) <= 2 and all(m and m.group("abbr").lower() in r.rooms for m in matches):
            return ", ".join(self._rooms(m.group("num"), m.group("abbr"), i) for m in matches), 0
        if (re.fullmatch(r"\d{1,2}(?:[.,]5)?", tok.core) and nxt is not None and not tok.trail and not nxt.lead
                and nxt.core.lower() in r.rooms):
            return self._rooms(tok.core, nxt.core, i + 1), 1
        return None, 0

    def _rooms(self, written: str, abbreviation: str, i: int) -> str:
        """"2 bedrooms"; "a 2BR unit" is "a two bedroom unit": the count describes the home after it."""
        num = self.rules.parse_number(written)
        room = self.rules.rooms[abbreviation.lower()]
        last = self.tokens[i]
        nxt = self._next(i)
        describes = not last.trail and nxt is not None and not nxt.lead and nxt.core.lower() in _HOMES
        one = num == ParsedNumber("1", "") or describes
        # before its noun: "un dormitorio", "veintiún comprimidos" (a decimal, "1,5", has no short form)
        return f"{self.rules.read_number(num, room.gender, before_noun=True)} {room.one if one else room.many}"


_INCH_MARKS = ('"', "″", "”")
_HEIGHT_RE = re.compile(r"(?P<feet>[1-9])['′’](?P<inches>1[01]|\d)(?P<mark>[\"″”]?)")
# "30-min", "5-km": a unit of two letters or more ("4-H" is a name)
_COMPOUND_MEASURE_RE = re.compile(r"(?P<num>\d+(?:\.\d+)?)-(?P<unit>[A-Za-z]{2,3})")
_AFTER_MEASURE_WORDS = frozenset("tall long wide high deep thick and by x ×".split())  # "6 ft 2 in tall"
_DECIMAL_BEFORE_WORD_RE = re.compile(r"(?P<int>\d+)\.(?P<frac>\d+)-(?P<word>[A-Za-z]{2,})")  # "0.25-acre"
_VERSION_WORDS = frozenset({"version", "ver", "v", "release", "build"})
# A listing's rooms (English): "3 bd / 2 ba", "2BR/1BA", "1.5 ba"
# ("4 beds", "2 baths" are words, and a bed is no bedroom)
# homes a count of rooms describes: "a 2BR unit", "3 bd home"
_HOMES = frozenset("""unit units apartment apartments apt condo condos home homes house houses townhouse townhome
    rental rentals flat suite place cottage""".split())
_ROOMS_RE = re.compile(r"(?P<num>\d{1,2}(?:\.5)?)(?P<abbr>[A-Za-z]{2,4})")
_DECIMAL_SECONDS_RE = re.compile(r"(?P<num>\d+(?P<sep>[.,])\d+)s")  # "3.2s", "0,8s"
_DIMENSIONS_RE = re.compile(r"\d+(?:[.,]\d+)?(?:[x×]\d+(?:[.,]\d+)?)+")
# sides with their inch marks, the last one's split off: '22"x14"x9' of '22"x14"x9"'
_INCH_DIMENSIONS_RE = re.compile(r"(?:\d+(?:[.,]\d+)?[\"″”]\s?[x×]\s?)+\d+(?:[.,]\d+)?")
