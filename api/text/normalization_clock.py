"""Reading the clock: times of day ("3:30 pm", "15:45", "15h30", "9 a.m."), time ranges ("9am-5pm",
"2-3pm", "noon-2pm") and durations ("2h 30m", "1:05:30"). A mixin of the token reader
(``api/text/normalization.py``).
"""

from __future__ import annotations

import re
from typing import Optional

from api.text.normalization_tokens import RANGE_WORD, Token, TokenContext

TIME_RE = re.compile(r"(\d{1,2}):(\d{2})(?:\s?([ap])\.?m\.?)?", re.IGNORECASE)
HOUR_MERIDIEM_RE = re.compile(r"(\d{1,2})\s?([ap])\.?m\.?", re.IGNORECASE)
_CLOCK_DURATION_RE = re.compile(r"(\d{1,2}):(\d{2}):(\d{2})")  # "1:05:30"
_CLOCK_LEADS = {"en": {"at"}, "es": {"las"}, "pt": {"às", "as"}, "nl": {"om"}}  # a time of day follows
_H_TIME_RE = re.compile(r"(\d{1,2})h(\d{2})?")
_TIME_H_RE = re.compile(r"(\d{1,2}):(\d{2})h")  # "9:00h" (es, pt): a time and its unit
_DOT_TIME_RE = re.compile(r"(\d{1,2})\.(\d{2})")  # "14.30 uur": a time only before its unit
BARE_HOUR_RE = re.compile(r"1[0-2]|0?[1-9]")  # an hour of a 12-hour clock, "2" in "2-3pm"
MERIDIEM_TOKENS = {"am": "am", "pm": "pm", "a.m": "am", "p.m": "pm", "a.m.": "am", "p.m.": "pm"}
# "9 a.m.–5 p.m.", "9 AM-5 PM": a meridiem that runs on, through a dash, into the range's end
_MERIDIEM_THEN_RE = re.compile(r"(?P<meridiem>[ap]\.?m\.?)[-–](?P<rest>\d.*)", re.IGNORECASE)
# times of day said by their names, which a range may start or end with: "noon-2pm", "10am-noon"
NAMED_TIMES = frozenset({"noon", "midnight", "mediodía", "medianoche", "meio-dia", "meia-noite", "middag",
                          "middernacht"})
# a range of 12-hour times with one-letter meridiems on both ends (English opening hours): "11a-10p"
_ONE_LETTER_MERIDIEMS_RE = re.compile(r"(?P<start>(?:1[0-2]|0?[1-9])(?::[0-5]\d)?)(?P<start_m>[ap])[-–]"
                                      r"(?P<end>(?:1[0-2]|0?[1-9])(?::[0-5]\d)?)(?P<end_m>[ap])")
# an English time with a one-letter meridiem: "10:15a", "5:25p" (without its minutes, "10a" may be a room)
_ONE_LETTER_TIME_RE = re.compile(r"(1[0-2]|0?[1-9]):([0-5]\d)([ap])")
# ... with its minutes or without, which a spaced range of such times may end with: "9a to 6p", "8:30a - 5p"
_ONE_LETTER_HOUR_RE = re.compile(r"(?:1[0-2]|0?[1-9])(?::[0-5]\d)?[ap]")
_SPACED_RANGE_WORDS = frozenset({"to", "till", "til", "until", "through", "thru", "-", "–"})
# English 24-hour times written as four digits ("0930", "1400") and the words that lead one
_MILITARY_TIME_RE = re.compile(r"(?P<h>[01]\d|2[0-3])(?P<m>[0-5]\d)")
_MILITARY_LEADS = frozenset("at by until till from before after since".split())
# Portuguese "8/8h", "12/12h": every so many hours, as a dose is prescribed
_EVERY_HOURS_RE = re.compile(r"(?P<a>\d{1,2})/(?P<b>\d{1,2})h")
# English "q6h", "q4-6h": every so many hours (a prescription's Latin "quaque")
_EVERY_HOURS_ES_RE = re.compile(r"c/(?P<a>\d{1,2})(?P<h>h|hs|hrs)?", re.IGNORECASE)  # Spanish "c/8 h": "cada"
_HOUR_WORDS_ES = frozenset({"h", "hs", "hrs", "horas"})
_HOUR_SHORT_FORMS = ("h", "hr", "hrs", "hs")  # after a time of day, the language's "o'clock" written short
_EVERY_HOURS_EN_RE = re.compile(r"q(?P<a>\d{1,2})(?:[-–](?P<b>\d{1,2}))?h")
# Dutch hours with "u" for "uur" after the last: "9-17u", "10–16u"
_DUTCH_HOURS_RE = re.compile(r"(?P<start>[01]?\d|2[0-3])[-–](?P<end>[01]?\d|2[0-4])u")
_HOURS_MINUTES_RE = re.compile(r"(?P<h>\d{1,3})h(?P<m>[0-5]?\d)(?P<unit>m|min)?")
_HOURS_RE = re.compile(r"(?P<h>\d{1,3})h")
_MINUTES_RE = re.compile(r"(?P<m>[0-5]?\d)(?:m|min)")


class ClockReading(TokenContext):
    """Times of day, time ranges and durations."""

    def _after_meridiem(self, i: int) -> bool:
        """Whether token ``i`` follows a time with its meridiem ("9am", "5:00 PM", "9 a.m.")."""
        prev = self.tokens[i - 1] if i > 0 else None
        if prev is None or prev.trail not in ("", "."):
            return False
        word = (prev.core + prev.trail).lower()
        return word in MERIDIEM_TOKENS or bool(HOUR_MERIDIEM_RE.fullmatch(prev.core))

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
        elif m.group("unit") or r.code == "en" or self._after_duration_lead(i):
            said = (m.group("h"), m.group("m"))  # "1h30" without its "m" is a time in es/pt/nl, but "dura 1h30"
        else:
            return None, 0
        h, mins = self._amount_of(None, said[0], "h"), self._amount_of(None, said[1], "min")
        return (f"{h} {mins}", consumed) if h and mins else (None, 0)

    def _after_duration_lead(self, i: int) -> bool:
        """Whether token ``i`` follows a word after which a time is a length (``duration_leads``:
        "dura 1h30", "duração de 1h30")."""
        prev = self.tokens[i - 1] if i > 0 else None
        if prev is None or prev.trail:
            return False
        word = prev.core.lower()
        if word == "de" and i > 1 and not self.tokens[i - 2].trail:  # "duración de 1h30"
            word = self.tokens[i - 2].core.lower()
        return word in self.rules.duration_leads

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
        return MERIDIEM_TOKENS.get(nxt.core.lower())

    def _read_time(self, i: int) -> tuple[Optional[str], int]:
        r, core = self.rules, self.tokens[i].core
        hour = minute = None
        meridiem, consumed = None, 0
        unit_attached = False
        m = TIME_RE.fullmatch(core)
        if m:
            hour, minute = int(m.group(1)), int(m.group(2))
            meridiem = m.group(3) and m.group(3).lower() + "m"
        elif r.time_unit and (m := _TIME_H_RE.fullmatch(core)):
            hour, minute, unit_attached = int(m.group(1)), int(m.group(2)), True
        elif r.time_unit and (m := _DOT_TIME_RE.fullmatch(core)) and (
                self._time_unit_after(i) or self._time_range_with_unit_after(i)):
            hour, minute = int(m.group(1)), int(m.group(2))
        elif r.read_meridiem("am") is not None and HOUR_MERIDIEM_RE.fullmatch(core):
            m = HOUR_MERIDIEM_RE.fullmatch(core)
            hour, minute, meridiem = int(m.group(1)), 0, m.group(2).lower() + "m"
        elif r.code != "en" and _H_TIME_RE.fullmatch(core):
            m = _H_TIME_RE.fullmatch(core)
            hour, minute = int(m.group(1)), int(m.group(2) or 0)
        elif r.code == "en" and (m := _ONE_LETTER_TIME_RE.fullmatch(core)):  # "10:15a", "5:25p"
            hour, minute, meridiem = int(m.group(1)), int(m.group(2)), m.group(3) + "m"
        elif r.code == "en" and self._ends_a_short_range(i):  # "9a to 6p" (with its minutes, read just above)
            hour, minute, meridiem = int(core[:-1]), 0, core[-1] + "m"
        elif core.isdecimal() and r.read_meridiem("am") is not None and (
                self._meridiem_after(i) or self._meridiem_runs_on(i) or self._spaced_meridiem_after(i)):
            hour, minute = int(core), 0
        if hour is None:
            return None, 0
        if meridiem is None and r.read_meridiem("am") is not None:
            meridiem = self._meridiem_after(i)
            consumed = 1 if meridiem else 0
            if meridiem is None and (meridiem := self._spaced_meridiem_after(i)):
                consumed = 2
                last = self.tokens[i + 2]  # its period is a full stop only where a sentence ends
                self.tokens[i + 2] = Token(last.raw, last.lead, last.core,
                                           self._abbreviation_trail(last.trail[1:], i + 2, title=False, can_end=True))
            if meridiem is None and (until := self._range_after_meridiem(i, hour, minute)) is not None:
                return until
        if minute > 59 or hour > 24 or (meridiem and not 0 <= hour <= 12):
            return None, 0
        if meridiem and r.read_meridiem(meridiem) is None:
            return None, 0
        reading = r.read_time(hour, minute, meridiem)
        if r.on_the_hour and consumed == 0 and self._time_follows_spaced(i):
            reading = reading.removesuffix(f" {r.on_the_hour}")  # "de 9:00 a 13:00": "de nueve a trece horas"
        if unit_attached or (r.time_unit and self._time_unit_after(i + consumed)):
            # "9:00 uur", "15:00 horas", "14:30 h", "9:00h": the unit is said once, by the reading
            consumed += 0 if unit_attached else 1
            reading = reading.removesuffix(" en punto")
            if r.time_unit not in reading.split():
                reading = f"{reading} {r.time_unit}"
        return reading, consumed

    def _ends_a_short_range(self, i: int) -> bool:
        """Whether token ``i`` and another time with a one-letter meridiem stand either side of a
        word or dash of a range, one of them in the afternoon or with its minutes: "9a to 6p",
        "8:30a - 5p", "8:30a to 11a" (opening hours; "10a" alone may be a room)."""
        tokens = self.tokens
        if self.rules.code != "en" or not 0 <= i < len(tokens) or not _ONE_LETTER_HOUR_RE.fullmatch(tokens[i].core):
            return False
        for other, link in ((i + 2, i + 1), (i - 2, i - 1)):
            if not 0 <= other < len(tokens):
                continue
            first, between, last = tokens[min(i, other)], tokens[link], tokens[max(i, other)]
            # an afternoon or a minute in it says these are times ("Rooms 10a - 12a" are rooms)
            timed = any(t.core.endswith("p") or ":" in t.core for t in (first, last))
            if (timed and not first.trail and not between.lead and not between.trail and not last.lead
                    and between.core.lower() in _SPACED_RANGE_WORDS
                    and _ONE_LETTER_HOUR_RE.fullmatch(tokens[other].core)):
                return True
        return False

    def _time_follows_spaced(self, i: int) -> bool:
        """Whether "a"/"hasta" and another time follow token ``i`` ("de 9:00 a 13:00"): a range's
        first time, whose "en punto" the range does not say."""
        link, last = self.tokens[i + 1: i + 3] if i + 2 < len(self.tokens) else (None, None)
        return (link is not None and last is not None and not self.tokens[i].trail and not link.lead
                and not link.trail and not last.lead and link.core.lower() in ("a", "hasta")
                and TIME_RE.fullmatch(last.core) is not None)

    def _spaced_meridiem_after(self, i: int) -> Optional[str]:
        """"am"/"pm" written in two tokens after token ``i``, as Spanish style writes it ("9 a. m.",
        "6 p. m.")."""
        first, second = self.tokens[i + 1: i + 3] if i + 2 < len(self.tokens) else (None, None)
        if (first is None or second is None or self.tokens[i].trail or first.lead or second.lead
                or first.core.lower() not in ("a", "p") or first.trail != "." or second.core.lower() != "m"
                or not second.trail.startswith(".")):
            return None
        return first.core.lower() + "m"

    def _meridiem_runs_on(self, i: int) -> bool:
        """Whether the token after ``i`` is a meridiem joined by a dash to a time ("a.m.–5")."""
        nxt = self._next(i)
        return nxt is not None and not self.tokens[i].trail and not nxt.lead and bool(_MERIDIEM_THEN_RE.fullmatch(nxt.core))

    def _range_after_meridiem(self, i: int, hour: int, minute: int) -> Optional[tuple[str, int]]:
        """"9 a.m.–5 p.m.": the time at token ``i``, its meridiem joined by a dash to the next time
        in the token after it; read as "nine a m to five p m", with the tokens the end took."""
        r, nxt = self.rules, self._next(i)
        m = _MERIDIEM_THEN_RE.fullmatch(nxt.core) if self._meridiem_runs_on(i) else None
        meridiem = MERIDIEM_TOKENS.get(m.group("meridiem").lower()) if m else None
        if meridiem is None or hour > 12 or minute > 59 or r.read_meridiem(meridiem) is None:
            return None
        self.tokens[i + 1] = Token(nxt.raw, "", m.group("rest"), nxt.trail)  # the range's end, read as a time
        try:
            until, consumed = self._read_time(i + 1)
        finally:
            self.tokens[i + 1] = nxt
        if until is None:
            return None
        return f"{r.read_time(hour, minute, meridiem)} {RANGE_WORD[r.code]} {until}", 1 + consumed

    def _time_range_with_unit_after(self, i: int) -> bool:
        """Whether token ``i`` starts a range whose end is a time with its unit: "9.00 tot 17.30 uur"."""
        link, end = self.tokens[i + 1: i + 3] if i + 2 < len(self.tokens) else (None, None)
        return (link is not None and end is not None and not self.tokens[i].trail and not link.trail
                and link.core.lower() in (RANGE_WORD[self.rules.code], "-", "–")
                and bool(_DOT_TIME_RE.fullmatch(end.core)) and self._time_unit_after(i + 2))

    def _time_unit_after(self, i: int) -> bool:
        """Whether the language's word for "o'clock" ("uur", "horas") or its short form ("h", "hrs",
        "hs": "a las 10:30 hrs") follows token i."""
        nxt, unit = self._next(i), self.rules.time_unit
        return (unit is not None and nxt is not None and not self.tokens[i].trail and not nxt.lead
                and nxt.core.lower() in (unit, *_HOUR_SHORT_FORMS))

    def _read_dose_interval(self, i: int) -> tuple[Optional[str], int]:
        """How often a dose is taken, written as prescriptions write it: Portuguese "de 8/8h" ("de oito
        em oito horas"), Spanish "c/8 h" ("cada ocho horas"), English "q6h", "q4-6h" ("every six
        hours", "every four to six hours")."""
        r, core = self.rules, self.tokens[i].core
        if r.code == "en" and (every := _EVERY_HOURS_EN_RE.fullmatch(core)):
            hours = r.cardinal(int(every["a"]))
            if every["b"]:
                hours = f"{hours} {RANGE_WORD['en']} {r.cardinal(int(every['b']))}"
            return f"every {hours} hours" if hours != "one" else "every hour", 0
        if r.code == "es" and (every := _EVERY_HOURS_ES_RE.fullmatch(core)):
            nxt, consumed = self._next(i), 0
            if not every["h"]:  # "c/8 h": the hours' short form a token of its own
                if self.tokens[i].trail or nxt is None or nxt.lead or nxt.core.lower() not in _HOUR_WORDS_ES:
                    return None, 0
                consumed = 1
            hours = int(every["a"])
            return ("cada hora" if hours == 1 else f"cada {r.cardinal(hours, 'f')} horas"), consumed
        every = _EVERY_HOURS_RE.fullmatch(core) if r.code == "pt" else None
        if every is None or every["a"] != every["b"]:
            return None, 0
        n = r.cardinal(int(every["a"]), "f")  # "horas" is feminine: "de duas em duas horas"
        return f"{n} em {n} horas", 0

    def _read_military_time(self, i: int) -> tuple[Optional[str], int]:
        """English 24-hour time written as four digits: "at 0930" -> "at oh nine thirty", "1400 hours"
        -> "fourteen hundred hours". Only with a leading zero after a word that leads a time ("at",
        "by", "until"...), or before "hours" ("at 1999" stays a year)."""
        r, tok, nxt = self.rules, self.tokens[i], self._next(i)
        m = _MILITARY_TIME_RE.fullmatch(tok.core)
        if r.code != "en" or m is None:
            return None, 0
        prev = self.tokens[i - 1] if i > 0 else None
        led = tok.core[0] == "0" and prev is not None and not prev.trail and prev.core.lower() in _MILITARY_LEADS
        hours_after = nxt is not None and not tok.trail and nxt.core.lower() in ("hours", "hrs")
        if not (led or hours_after):
            return None, 0
        hour, minute = m.group("h"), m.group("m")
        said_hour = f"oh {r.cardinal(int(hour))}" if hour[0] == "0" else r.cardinal(int(hour))
        said_minute = ("hundred" if minute == "00" else f"oh {r.cardinal(int(minute))}" if minute[0] == "0"
                       else r.cardinal(int(minute)))
        return f"{said_hour} {said_minute}", 0

    def _read_time_range(self, i: int) -> tuple[Optional[str], int]:
        """Two times joined by a dash: "9am-5pm" -> "nine a m to five p m", "9:00-17:30", "10am-noon",
        and hours that share the meridiem after the last: "2-3pm", "2-3 pm" -> "two to three p m",
        "noon-2 pm"."""
        r = self.rules
        core = self.tokens[i].core
        short = _ONE_LETTER_MERIDIEMS_RE.fullmatch(core) if r.code == "en" else None
        if short:  # "11a-10p", "11:30a-9p": opening hours written short
            core = f"{short['start']}{short['start_m']}m-{short['end']}{short['end_m']}m"
        if r.code == "nl" and (hours := _DUTCH_HOURS_RE.fullmatch(core)):  # "9-17u": opening hours
            return f"{r.cardinal(int(hours['start']))} {RANGE_WORD['nl']} {r.cardinal(int(hours['end']))} uur", 0
        parts = re.split(r"[-–]", core)
        if len(parts) != 2 or not all(parts):
            return None, 0
        said = [part if part.lower() in NAMED_TIMES else type(self)(r, [part])._read_time(0)[0] for part in parts]
        consumed = 0
        dotted = [_DOT_TIME_RE.fullmatch(part) for part in parts]
        if all(dotted) and self._time_unit_after(i):  # "9.00-17.30 uur": times before their unit, said with it
            said = [r.read_time(int(m.group(1)), int(m.group(2)), None) for m in dotted]
            consumed = 1
        if said[0] is not None and said[1] is None and parts[0].lower() in NAMED_TIMES \
                and BARE_HOUR_RE.fullmatch(parts[1]) and (meridiem := self._meridiem_after(i)):
            said[1], consumed = r.read_time(int(parts[1]), 0, meridiem), 1  # "noon-2 pm"
        if parts[0].lower() in NAMED_TIMES and parts[1].lower() in NAMED_TIMES:
            return None, 0  # words only: no time written
        if said[0] is None and BARE_HOUR_RE.fullmatch(parts[0]) and r.read_meridiem("am") is not None:
            if said[1] is not None and not parts[1][-1].isdigit():  # "2-3pm"
                said[0] = r.read_integer(parts[0])
            elif BARE_HOUR_RE.fullmatch(parts[1]) and (meridiem := self._meridiem_after(i)):  # "2-3 pm"
                said = [r.read_integer(parts[0]), r.read_time(int(parts[1]), 0, meridiem)]
                consumed = 1
        clocks = [TIME_RE.fullmatch(part) for part in parts]
        if all(clocks) and not any(m.group(3) for m in clocks) and (meridiem := self._meridiem_after(i)) \
                and all(1 <= int(m.group(1)) <= 12 for m in clocks) and consumed == 0:
            # "10:00-10:30 AM": both in the morning, said once, after the last ("ten to ten thirty a m")
            (h1, m1), (h2, m2) = ((int(m.group(1)), int(m.group(2))) for m in clocks)
            marker = r.read_meridiem(meridiem)
            if marker is not None:
                said = [r.read_time(h1, m1, meridiem).removesuffix(f" {marker}"), r.read_time(h2, m2, meridiem)]
                consumed = 1
        if None in said:
            return None, 0
        if consumed == 0 and r.time_unit and self._time_unit_after(i):  # "9:00-17:00 uur": the unit said once
            consumed = 1
            if r.time_unit not in said[1].split():
                said[1] = f"{said[1]} {r.time_unit}"
        first, last = (s.removesuffix(f" {r.on_the_hour}") if r.on_the_hour else s for s in said)
        if r.time_unit and last.endswith(f" {r.time_unit}"):  # "nueve a catorce horas", "negen tot zeventien uur"
            first = first.removesuffix(f" {r.time_unit}")
        return f"{first} {RANGE_WORD[r.code]} {last}", consumed
