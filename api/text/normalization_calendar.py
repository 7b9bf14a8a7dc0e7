"""Reading the calendar: dates ("2024-03-05", "03/05/2024", "5.3.2024", "ships 12/15", "11/25–11/30"),
day and month names written short ("Mon-Fri", "M-F", "op di 12 dec"), years and decades ("1999",
"1990s", "mid-70s", "'23") and telling a year from a count ("1234 people"). A mixin of the token
reader (``api/text/normalization.py``).
"""

from __future__ import annotations

import datetime
import re
from functools import lru_cache
from typing import Optional

from api.text.normalization_clock import BARE_HOUR_RE, HOUR_MERIDIEM_RE, MERIDIEM_TOKENS, NAMED_TIMES, TIME_RE
from api.text.normalization_en import EnglishRules
from api.text.normalization_rules import LanguageRules
from api.text.normalization_tokens import (
    BETWEEN_AND, FRACTION_OF, OR_WORD, RANGE_WORD, Token, TokenContext, capitalize_like, starts_digit,
)

# one time or a range of two, as opening hours are written: "9:00-17:00", "10-16", "8h-12h", "9.00"
_OPENING_HOURS_RE = re.compile(r"(?:[01]?\d|2[0-3])(?P<clock>[:.h][0-5]\d|h)?(?:[-–](?:[01]?\d|2[0-3])(?:[:.h][0-5]\d|h)?)?")
# a day and a month's short name: "10/dic", "10-Dec-2024"
_DAY_MONTH_WORD_RE = re.compile(r"(?P<day>\d{1,2})[/-](?P<month>[^\W\d_]{3,4})\.?(?:[/-](?P<year>\d{4}))?")
_ISO_DATE_RE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_ISO_DATETIME_RE = re.compile(r"(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})T(?P<h>\d{2}):(?P<mi>\d{2})(?::\d{2}(?:\.\d+)?)?"
                              r"(?P<zone>Z|[+-]\d{2}:?\d{2})?")
# the word before a time of day (the second where the hour is one): "at ten", "a la una", "à uma"
_AT_WORDS = {"en": ("at", "at"), "es": ("a las", "a la"), "pt": ("às", "à"), "nl": ("om", "om")}
_DAY_MONTH_RE = re.compile(r"(\d{1,2})-(\d{1,2})")
_NUMERIC_DATE_RE = re.compile(r"(\d{1,2})([/.-])(\d{1,2})\2(\d{4}|\d{2})")
FRACTION_RE = re.compile(r"(\d{1,2})/(\d{1,2})")
_MONTH_YEAR_RE = re.compile(r"(0?[1-9]|1[0-2])/((?:19|20)\d\d)")  # "12/2025", "03/2027": a month of a year
_ROUND_PLURALS = {"100s": "hundreds", "1000s": "thousands", "1000000s": "millions"}  # English
_SHORT_DECADE_RE = re.compile(r"’?([1-9]0)s")  # "90s" outside English: "los noventa"
_ELIDED_YEAR_RE = re.compile(r"’?(0[1-9]|[1-9]\d)")  # "'23", "’05" (English)
_DECADE_RE = re.compile(r"’?(\d{3}0|\d0)s")  # "1990s", "90s", "’90s" (an apostrophe of elision)
_EN_MONTHS = {m.lower() for full in EnglishRules.months for m in (full, full[:3])} | {"sept"}
# capitalised short days and months said in full before a date ("Sat 10-2", "Nov 3"); "May" is itself
_EN_SHORT_DAYS = frozenset(day.title() for day in EnglishRules.weekday_abbreviations)
# short days that are no English word or name ("moved to Thurs."), and those that are no word with
# their period ("Thu" is also a name)
_EN_UNMISTAKABLE_DAYS = frozenset({"Tues", "Thurs", "Thur", "Weds"})
_EN_DOTTED_DAYS = frozenset({"Tue", "Thu", "Fri"})
# words after which a short day name is one ("on Fri.", "by Wed"): "Sat" and "Sun" stay words elsewhere
_EN_DAY_LEADS = frozenset("on by every next this last until till from through before after since each open closed"
                          .split())
# words before a month's name: "in Oct.", "due Nov.", "since Jan."
_EN_MONTH_LEADS = frozenset("""in since until till through thru by from during before after due early mid late
    last next this of""".split())
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
EN_SHORT_MONTHS = {full[:3]: full for full in EnglishRules.months if len(full) > 3} | {"Sept": "September"}
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


def pluralize(words: str) -> str:
    """"nineteen ninety" -> "nineteen nineties" (English decades)."""
    head, _, last = words.rpartition(" ")
    last = last[:-1] + "ies" if last.endswith("y") else last + "s"
    return f"{head} {last}" if head else last


class CalendarReading(TokenContext):
    """Dates, day and month names, years and decades."""

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
        elif r.code == "es" and (letter_day := self._spanish_letter_day(i)):
            said = letter_day
        elif m:
            first, last = days.get(m.group("first").lower()), days.get(m.group("last").lower())
            if first is None or last is None:
                return None
            said = capitalize_like(f"{first} {RANGE_WORD[r.code]} {last}", tok.core)
        elif tok.trail in ("", ".", ",", ".,") and self._in_day_range(i):
            said = capitalize_like(days[tok.core.lower()], tok.core)  # "Mon to Fri", "seg. a sex.", "ma t/m vr"
        elif (
            r.code == "en"
            # "Nov. 3" is an abbreviation ("nov."); "Tue. 5" has none
            and (tok.core in _EN_SHORT_DAYS or (tok.core in EN_SHORT_MONTHS and not tok.trail))
            and tok.trail in ("", ".", ",", ".,")
            and (self._before_date(i) or (tok.core in _EN_SHORT_DAYS and self._after_day_lead(i))
                 or tok.core in _EN_UNMISTAKABLE_DAYS or (tok.core in _EN_DOTTED_DAYS and tok.trail.startswith(".")))
        ):
            said = days.get(tok.core.lower()) or EN_SHORT_MONTHS[tok.core]
        elif r.code == "en" and tok.core in _EN_SHORT_DAYS and tok.trail in ("", ":") and self._day_of_hours(i):
            said = days[tok.core.lower()]  # "Sun closed", "Sat: 10-6", "Mon: 9am-5pm"
        elif r.code == "en" and tok.core in EN_SHORT_MONTHS and tok.trail.startswith(".") and self._after_month_lead(i):
            said = EN_SHORT_MONTHS[tok.core]  # "in Oct.", "due Nov.", "in Jan. and Feb."
        elif r.code != "en" and tok.trail in (".", ".,", ".;"):
            said = self._short_date_word(i)  # "8 de dic.", "mar. 8"
            if said is None:
                return None
        elif r.code != "en" and tok.trail in ("", ",") and tok.core.lower() in days and (
                self._before_day_and_month(i) or self._before_opening_hours(i) or self._before_padded_date(i)):
            # "di 12 dec", "mar 8 de diciembre", "za 10-16 uur", "wo 15-01"
            said = capitalize_like(days[tok.core.lower()], tok.core)
        elif r.code != "en" and not tok.trail.startswith(".") and (month := self._short_month_after_day(i)):
            said = month  # "12 dec", "8 de dic": no period
        else:
            return None
        if tok.trail.startswith("."):  # the short form's own dot: a full stop only where one ends
            trail = self._abbreviation_trail(tok.trail[1:], i, title=False, can_end=True)
            self.tokens[i] = Token(tok.raw, tok.lead, tok.core, trail)
        return said

    def _after_month_lead(self, i: int) -> bool:
        """Whether token ``i`` (an English short month) follows a word that leads a month ("in",
        "since", "due", "early"...), or "and"/"or"/"to" after another short month ("in Jan. and
        Feb."): "I saw Jan." and "Mar. was cold" stay as written."""
        prev = self.tokens[i - 1] if i > 0 else None
        if prev is None or prev.trail or self.tokens[i].lead:
            return False
        word = prev.core.lower()
        if word in _EN_MONTH_LEADS:
            return True
        before = self.tokens[i - 2] if i > 1 else None
        return word in ("and", "or", "to") and before is not None and before.core in EN_SHORT_MONTHS

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
        return f"{first} {RANGE_WORD[code]} {last}"

    def _spanish_letter_day(self, i: int) -> Optional[str]:
        """A Spanish day's letter in a range written apart after "de": "de L a V" -> "lunes",
        "viernes" (forward in the week only), and after such a range one before its own hours or
        "cerrado" ("y S de 9 a 13 h", "D cerrado"); None elsewhere."""
        order = list(_ES_LETTER_DAYS)

        def letter(k: int) -> Optional[int]:
            tok = self.tokens[k] if 0 <= k < len(self.tokens) else None
            return order.index(tok.core) if tok is not None and not tok.lead and tok.core in _ES_LETTER_DAYS else None

        def plain(k: int, word: str) -> bool:
            return 0 <= k < len(self.tokens) and self.tokens[k].raw.lower() == word

        here = letter(i)
        if here is None:
            return None
        if (self.tokens[i].trail == "" and plain(i - 1, "de") and plain(i + 1, "a")
                and (last := letter(i + 2)) is not None):
            return _ES_LETTER_DAYS[order[here]] if here < last else None
        if plain(i - 1, "a") and plain(i - 3, "de") and (first := letter(i - 2)) is not None \
                and self.tokens[i - 2].trail == "":
            return _ES_LETTER_DAYS[order[here]] if first < here else None
        # "de L a V de 9 a 16 h y S de 9 a 13 h": after such a range, a day's letter before its hours
        after = self.tokens[i + 1: i + 3]
        hours_after = (len(after) == 2 and plain(i + 1, "de") and after[1].core[:1].isdecimal()) or (
            len(after) >= 1 and after[0].core.lower() in ("cerrado", "cerrados"))
        ranged = any(letter(k) is not None and plain(k - 1, "de") and plain(k + 1, "a")
                     for k in range(max(1, i - 20), i))
        prev = self.tokens[i - 1] if i > 0 else None
        listed = prev is not None and (prev.trail in (",", ";") or plain(i - 1, "y"))  # not "talla S de 9 años"
        return _ES_LETTER_DAYS[order[here]] if not self.tokens[i].trail and hours_after and ranged and listed else None

    def _in_day_range(self, i: int) -> bool:
        """Whether the short day name at token ``i`` is an end of a range of short day names
        written apart: "Mon to Fri", "Mon. - Fri.", "lun. a vie.", "seg. a sex.", "ma t/m vr"."""
        days, links = self.rules.weekday_abbreviations, _DAY_RANGE_LINKS[self.rules.code]
        if self.tokens[i].core.lower() not in days:
            return False

        def day(k: int, last: bool) -> bool:  # in English capitalised only: "sun", "sat" are words
            if not 0 <= k < len(self.tokens) or self.tokens[k].lead.strip("([") or (last and self.tokens[k].lead):
                return False  # a bracket may open before the first: "(ma t/m vr 9-17u)"
            tok = self.tokens[k]
            named = tok.core in _EN_SHORT_DAYS if self.rules.code == "en" else tok.core.lower() in days
            return named and (last or tok.trail in ("", "."))

        def link(k: int) -> bool:
            return 0 <= k < len(self.tokens) and self.tokens[k].raw.lower() in links

        return ((day(i, False) and link(i + 1) and day(i + 2, True))
                or (day(i, True) and link(i - 1) and day(i - 2, False)))

    def _before_day_and_month(self, i: int) -> bool:
        """Whether a day of the month and its month follow token ``i``: "12 dec", "8 de diciembre",
        "11/12" (in the language's order)."""
        r, link = self.rules, 1 if self.rules.day_month_link else 0
        nxt = self._next(i)
        if nxt is not None and not nxt.lead and (numeric := FRACTION_RE.fullmatch(nxt.core)):
            a, b = int(numeric.group(1)), int(numeric.group(2))
            month, day = (a, b) if r.date_order == "mdy" else (b, a)
            of = self.tokens[i + 2] if i + 2 < len(self.tokens) and not nxt.trail else None
            # a plain fraction ("mar 3/4": the sea, three quarters) or a fraction of something is no date
            return (1 <= month <= 12 and 1 <= day <= 31 and not (a < b and b in (2, 3, 4))
                    and (of is None or of.core.lower() not in FRACTION_OF))
        after = self.tokens[i + 1: i + 3 + link]
        if len(after) < 2 + link or any(t.lead for t in after) or any(t.trail for t in after[:-1]):
            return False
        day, month = after[0].core, after[-1].core.lower()
        if link and after[1].core.lower() != r.day_month_link:
            return False
        return (day.isdecimal() and 1 <= int(day) <= 31
                and (month in r.month_abbreviations or month in (name.lower() for name in r.months)))

    def _day_of_hours(self, i: int) -> bool:
        """Whether the English short day at token ``i`` heads a line of opening hours: before
        "closed" or "open" ("Sun closed"), or before a colon and a time or hours ("Sat: 10-6",
        "Mon: 9am-5pm")."""
        tok, nxt = self.tokens[i], self._next(i)
        if nxt is None or nxt.lead:
            return False
        if nxt.core.lower() in ("closed", "open"):
            return True
        return tok.trail == ":" and bool(_OPENING_HOURS_RE.fullmatch(nxt.core) or HOUR_MERIDIEM_RE.match(nxt.core))

    def _before_padded_date(self, i: int) -> bool:
        """Whether a dashed day and month with a leading zero follows token ``i`` ("wo 15-01",
        "mar 05-12"): a date, where "za 5-6 personen" is a range."""
        nxt = self._next(i)
        return nxt is not None and not nxt.lead and _PADDED_DASHED_DATE_RE.fullmatch(nxt.core) is not None

    def _before_opening_hours(self, i: int) -> bool:
        """Whether a time or a range of hours follows token ``i``, with its unit where the hours are
        bare: "ma 9:00-17:00", "za 10-16 uur", "sáb 9:00", "sex 8h-12h" (a short day's opening hours)."""
        nxt = self._next(i)
        if nxt is None or nxt.lead:
            return False
        m = _OPENING_HOURS_RE.fullmatch(nxt.core)
        if m is None:
            return False
        after = self.tokens[i + 2] if i + 2 < len(self.tokens) and not nxt.trail else None
        unit_after = after is not None and not after.lead and after.core.lower() in (self.rules.time_unit, "h")
        return bool(m.group("clock")) or unit_after

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
            return capitalize_like(month, tok.core)
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
        if day is not None and (starts_digit(self._next(i)) or self._before_opening_hours(i + 1)):
            return capitalize_like(day, tok.core)  # "seg., 8", "sáb., das 9h às 15h"
        return None

    def _before_date(self, i: int) -> bool:
        """Whether the next token is a day, a time or a month: "3", "10-2", "5pm", "Nov"."""
        nxt = self._next(i)
        return starts_digit(nxt) or (nxt is not None and not nxt.lead and nxt.core.lower() in _EN_MONTHS
                                      and nxt.core[:1].isupper())

    def _read_day_month_word(self, i: int) -> tuple[Optional[str], int]:
        """A day and a month's short name joined by a slash or a dash, maybe with its year:
        "10/dic" -> "diez de diciembre", "10-Dec-2024" -> "December tenth twenty twenty-four"."""
        r = self.rules
        m = _DAY_MONTH_WORD_RE.fullmatch(self.tokens[i].core)
        if m is None:
            return None, 0
        word = m.group("month")
        full = (EN_SHORT_MONTHS.get(word.title()) if r.code == "en" else r.month_abbreviations.get(word.lower())) or word
        names = [name.lower() for name in r.months]
        if full is None or full.lower() not in names:
            return None, 0
        month, day = names.index(full.lower()) + 1, int(m.group("day"))
        try:
            datetime.date(2000, month, day)
        except ValueError:
            return None, 0
        return self._said_date(i, int(m.group("year")) if m.group("year") else None, month, day), 0

    def _read_date(self, i: int) -> tuple[Optional[str], int]:
        r, core = self.rules, self.tokens[i].core
        if stamp := _ISO_DATETIME_RE.fullmatch(core):
            return self._date_and_time(stamp), 0
        m = _ISO_DATE_RE.fullmatch(core)
        prev = self.tokens[i - 1] if i > 0 else None
        # "op 15-12", "martes 12-03" (where the day comes first): a date, not a range
        if (not m and prev is not None and not prev.trail and (day_month := _DAY_MONTH_RE.fullmatch(core))
                and (prev.core.lower() in r.dash_date_lead_words or (r.date_order == "dmy" and self._after_weekday(i)))):
            day, month = int(day_month.group(1)), int(day_month.group(2))
            try:
                datetime.date(2000, month, day)
            except ValueError:
                return None, 0
            return self._said_date(i, None, month, day), 0
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
        return self._said_date(i, year, month, day), 0

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
        tok = self.tokens[i]
        if r.code != "en":
            m = _SHORT_DECADE_RE.fullmatch(core)  # "los 90s", "os anos 80s": the decade is its number
            elided = _ELIDED_YEAR_RE.fullmatch(core) if m is None else None
            written_short = core[0] == "’" or tok.lead.endswith("'")  # "'90", "’99"; "'05" is left as written
            if elided is not None and (not written_short or elided.group(1)[0] == "0"):
                elided = None
            if (m or elided) and tok.lead.endswith("'") and not any(q in tok.trail for q in "'’"):
                self.tokens[i] = Token(tok.raw, tok.lead[:-1], tok.core, tok.trail)  # "los años '80", "de jaren '90"
            found = m or elided
            return (r.cardinal(int(found.group(1))) if found else None), 0
        elided = _ELIDED_YEAR_RE.fullmatch(core)
        if elided and (core[0] == "’" or tok.lead.endswith("'")) and not any(q in tok.trail for q in "'’"):
            # "Q4 '23", "Class of '99", "Summer ’05": a year with its century elided
            if core[0] != "’":
                self.tokens[i] = Token(tok.raw, tok.lead[:-1], tok.core, tok.trail)
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
            return f"{r.ordinal(int(span.group(1)))} {RANGE_WORD[r.code]} {r.ordinal(int(span.group(2)))}", 0
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
                self.tokens[i] = Token(tok.raw, tok.lead[:-1], tok.core, tok.trail)
            return (pluralize(base) if base else None), 0
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
        Wed", "every Tues", "closed Sun."), or another day of a list ("on Sat, Sun", "Tues and
        Thurs"). "Sat" and "Sun" then still need a day's end after them: a stop, the text's end,
        a time of day ("on Sun morning") or another day ("open Sat and Sun"), as "on Sun loungers"
        is no day."""
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
        if nxt is not None and nxt.core.lower() in ("and", "or", "&") and not nxt.trail:  # "open Sat and Sun."
            other = self._next(i + 1)
            return other is not None and other.core in _EN_SHORT_DAYS
        return nxt is None or nxt.core.lower() in _EN_TIMES_OF_DAY

    def _month_after(self, i: int) -> Optional[str]:
        """The English month named, capitalised, right after token ``i`` ("March", "Sept."), in full."""
        tok, nxt = self.tokens[i], self._next(i)
        if nxt is None or tok.trail or nxt.lead:
            return None
        if nxt.core in EnglishRules.months:
            return nxt.core
        return EN_SHORT_MONTHS.get(nxt.core)

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
        before = i - 2 if lead in (RANGE_WORD[code], BETWEEN_AND[code], OR_WORD[code]) else None
        if prev is not None and prev.trail == ",":
            before = i - 1
        if before is not None and before >= 0 and (first := FRACTION_RE.fullmatch(self.tokens[before].core)):
            return self._is_dated(before, int(first.group(1)), int(first.group(2)))
        return False

    def _before_time_of_day(self, i: int) -> bool:
        """Whether a time follows token ``i`` after the language's "at" ("12/3 at noon", "12/10 at
        2:15 PM", "12/3 at 5 pm"), so that a day and month come first."""
        after, nxt = self.tokens[i + 1: i + 4], self._next(i)
        if len(after) < 2 or self.tokens[i].trail or nxt is None or nxt.trail:
            return False
        if nxt.core.lower() not in (_AT_WORDS[self.rules.code][0], "@") or after[1].lead:
            return False
        time = after[1].core.lower()
        meridiem = len(after) > 2 and any(word.lower() in MERIDIEM_TOKENS
                                          for word in (after[2].core, after[2].core + after[2].trail[:1]))
        return (time in NAMED_TIMES or bool(TIME_RE.fullmatch(time) or HOUR_MERIDIEM_RE.fullmatch(time))
                or (meridiem and bool(BARE_HOUR_RE.fullmatch(time))))

    def _after_weekday(self, i: int) -> bool:
        """Whether a day's name stands right before token ``i``, so that "3/4" after it is a date:
        "Tuesday 3/4", "Fri, 9/12", "martes 3/4". In English a short name counts capitalised only
        ("Sat"; "sat" is a verb); elsewhere a short one with its period ("qui., 10/12") or, without
        it, only where it is read as the day ("na sex 11/12"; "mar" is also the sea)."""
        prev = self.tokens[i - 1] if i > 0 else None
        r = self.rules
        # its period as written (a read day's trail no longer holds it: "di. 14-03")
        if (prev is not None and r.code != "en" and prev.raw.rstrip(",").endswith(".")
                and prev.core.lower() in r.weekday_abbreviations):
            return True
        if prev is None or prev.trail not in ("", ","):
            return False
        if prev.core.lower() in _weekday_names(r):
            return True
        if r.code != "en" and prev.core.lower() in r.weekday_abbreviations and self._before_day_and_month(i - 1):
            return True
        if r.code != "en" and prev.core.lower() in r.weekday_abbreviations and self._before_padded_date(i - 1):
            return True  # "op wo 15-01": a leading zero makes it a date ("za 5-6 personen" is a range)
        return r.code == "en" and prev.core in _EN_SHORT_DAYS

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
            return (f"{low} {RANGE_WORD[r.code]} {high}" if low and high else None), 0
        (m1, d1), (m2, d2) = ((a, b), (c, d)) if r.date_order == "mdy" else ((b, a), (d, c))
        try:
            datetime.date(2000, m1, d1), datetime.date(2000, m2, d2)
        except ValueError:
            return None, 0
        return f"{self._said_date(i, None, m1, d1)} {RANGE_WORD[r.code]} {r.read_date(None, m2, d2)}", 0


def _looks_plural(word: str) -> bool:
    """Whether an English ``word`` looks like a plural noun: lowercase letters ending in "s", not
    "ss", "us" or "is", and not a word such as "was" or "always"."""
    return (len(word) >= 4 and word.isalpha() and word.islower() and word.endswith("s")
            and not word.endswith(("ss", "us", "is")) and word not in _NOT_PLURALS)


@lru_cache(maxsize=None)
def _weekday_names(rules: LanguageRules) -> frozenset[str]:
    """The language's full day names, lowercase ("monday", "martes")."""
    return frozenset(day.lower() for day in rules.weekday_abbreviations.values())


# what joins two short day names written apart into a range: "Mon to Fri", "seg. a sex.", "ma t/m vr"
_DAY_RANGE_LINKS = {"en": {"to", "through", "thru", "-", "–"}, "es": {"a", "-", "–"},
                    "pt": {"a", "à", "até", "-", "–"}, "nl": {"t/m", "t.e.m.", "tot", "-", "–"}}
_PADDED_DASHED_DATE_RE = re.compile(r"(?:0\d-\d{2}|\d{2}-0\d)(?:-\d{2,4})?")  # "15-01", "05-12"
_DATE_RANGE_RE = re.compile(r"(\d{1,2})/(\d{1,2})[-–](\d{1,2})/(\d{1,2})")  # "11/25–11/30"
