"""Reading plain numbers: cardinals and ordinals, fractions ("3/4", "2 1/2", "1/2-price"), ratings
("4.5/5", "9/10"), ratios ("3:1"), powers and formulas ("x²", "H₂O"), numbers with a sign ("#1", "<5",
"+1", "50+", "1.5x") and sums ("2+2=4"). A mixin of the token reader (``api/text/normalization.py``).
"""

from __future__ import annotations

import datetime
import re
from typing import Optional

from api.text.normalization_calendar import FRACTION_RE
from api.text.normalization_money import AMOUNT_RANGE_RE
from api.text.normalization_rules import ParsedNumber
from api.text.normalization_scripts import fraction_character, mixed_fraction, read_mixed_number, read_scripts
from api.text.normalization_tokens import FRACTION_OF, RANGE_WORD, SENTENCE_END, Token, TokenContext, starts_upper
from api.text.normalization_units import UNIT_SYMBOLS

# signs written two ways: stuck to a number "×" is "x" ("2×": "two times"); "+/-" is "±"
SIGN_ALIASES = {"×": "x", "+/-": "±", "<=": "≤", ">=": "≥"}
_STATUS_LEADS = frozenset({"http", "error", "status"})
_MIXED_DENOMINATORS = frozenset({2, 3, 4, 8, 16})  # "2 1/2 cups", "5 3/8 in"
# "~20", "~$20", "~5km", "+1"; "#1" ("#" before a number only: "#2024goals" is a hashtag)
# "±5%", "+/-5", "<5 min", ">=18"
_SIGN_BEFORE_RE = re.compile(r"(?P<sign>[~+±≤≥]|\+/-|[<>]=?)(?P<rest>[$€£¥₹]?\d\S*)")
# "#1", "#A12345", "#A-12345", "#4471-B"
_NUMBER_SIGN_RE = re.compile(r"(?P<sign>#)(?P<rest>\d[\d.,]*(?:-[A-Z\d]+)*|[A-Z]{1,3}-?\d[A-Z\d-]*)")
# "50+", "1.5x", "2×", "$1M+", "$10K+" (an amount with its scale)
_SIGN_AFTER_RE = re.compile(
    r"(?P<rest>\d(?:[\d.,]*\d)?(?:[-–]\d(?:[\d.,]*\d)?)?|[$€£¥₹]\d(?:[\d.,]*\d)?(?:k|K|M|B|bn)?)(?P<sign>[+x×])")
# a measure with its unit and a plus after it: "2GB+", "5km+" (the unit read by the measure rule)
_MEASURE_PLUS_RE = re.compile(r"(?P<rest>\d(?:[\d.,]*\d)?(?:GB|MB|TB|KB|km|kg|mi|lbs?|hrs?|mins?|yrs?))(?P<sign>\+)")
_RATING_RE = re.compile(r"(?P<score>\d+[.,]\d+)/(?P<scale>\d{1,3})")  # "4.5/5"
_WHOLE_RATING_RE = re.compile(r"(?P<score>\d{1,3})/(?P<scale>\d{1,3})")  # "10/10", when ``_is_score``
# After a whole "a/b" up to 10 these make it a rating: "4/5 stars", "9/10 estrellas"
_STARS = frozenset({"star", "stars", "estrella", "estrellas", "estrela", "estrelas", "ster", "sterren"})
# measures a recipe counts in halves and quarters: after one, "3/4" is a fraction even where a date
# could stand ("Tuesday 3/4 cup"); the other units are in the languages' unit tables
_FRACTION_NOUNS = frozenset("""cup cups taza tazas cucharada cucharadas cucharadita cucharaditas xícara xícaras
    colher colheres kop kopje kopjes theelepel theelepels eetlepel eetlepels""".split())


class NumberReading(TokenContext):
    """Cardinals, ordinals, fractions, ratings, signs and sums."""

    def _read_ordinal(self, i: int) -> tuple[Optional[str], int]:
        tok = self.tokens[i]
        said = self.rules.match_ordinal(tok.core, self._noun_after(i))
        if said is not None and tok.core[-1:].isalpha() and tok.trail.startswith("."):
            # "el 2do. piso", "1er. lugar": the short form's own period, a full stop only where one ends
            trail = self._abbreviation_trail(tok.trail[1:], i, title=False, can_end=True)
            self.tokens[i] = Token(tok.raw, tok.lead, tok.core, trail)  # the reader attaches tok.trail
        return said, 0

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
            groups = self._code_groups(i) if self._after_digits_lead(i) else [core]
            return ", ".join(self.rules.digits(group) for group in groups), len(groups) - 1
        if not core.isdecimal() and not num.fraction and not num.negative and self._after_digits_lead(i):
            # "o código é 123.456": a code's groups, not a count of thousands
            return ", ".join(self.rules.digits(group) for group in core.split(self.rules.group_sep)), 0
        flight = self._flight_number(i)
        if flight is not None:
            return flight, 0
        # A number agrees with the noun it counts ("veintiuna horas", "duas semanas"), and Spanish
        # shortens "uno" before one ("veintiún años", but "el veintiuno de mayo").
        gender = self._noun_after(i)
        if gender is not None:  # "2.000.000 personas": "dos millones de personas"
            said = self.rules.read_number(num, gender, before_noun=True)
            return said + (self.rules.noun_link(said) if not num.fraction else ""), 0
        return self.rules.read_number(num, self._noun_across(i) or self._article_before(i)), 0

    def _code_groups(self, i: int) -> list[str]:
        """The digit groups of a code written apart, from token ``i``: "your code is 482 913" ->
        ["482", "913"] (at most four groups of two to four digits, nothing between them)."""
        groups = [self.tokens[i].core]
        while 2 <= len(groups[0]) <= 4 and len(groups) < 4 and i + len(groups) < len(self.tokens):
            last, nxt = self.tokens[i + len(groups) - 1], self.tokens[i + len(groups)]
            if last.trail or nxt.lead or not (nxt.core.isdecimal() and 2 <= len(nxt.core) <= 4):
                break
            groups.append(nxt.core)
        return groups

    def _read_fraction(self, i: int) -> tuple[Optional[str], int]:
        """"3/4" -> "three quarters"; where it is dated (``_is_dated``: "el 5/6", "on 5/6", "Fri
        9/12", "ships 12/15") a day and month without a year ("el cinco de junio", "Friday
        September twelfth")."""
        r = self.rules
        m = FRACTION_RE.fullmatch(self.tokens[i].core)
        if not m:
            return None, 0
        a, b = int(m.group(1)), int(m.group(2))
        nxt = self._next(i) if not self.tokens[i].trail else None
        of_a_unit = nxt is not None and not nxt.lead and (  # "el 1/2 litro", "Tuesday 3/4 cup", "on 3/4 of it"
            self._is_unit_word(nxt.core) or nxt.core.lower() in _FRACTION_NOUNS or nxt.core.lower() in FRACTION_OF)
        prev = self.tokens[i - 1] if i > 0 else None
        if (0 < a <= b and not of_a_unit and prev is not None and not prev.trail
                and prev.core.lower() in r.sequence_words):  # "Step 1/3", "página 2/10": a place and the whole
            return f"{r.read_integer(m.group(1))} {r.sequence_of_word} {r.read_integer(m.group(2))}", 0
        zero_led = m.group(2)[:1] == "0" or m.group(1)[:1] == "0"  # "as of 12/04": no fraction is written so
        if (zero_led or self._is_dated(i, a, b)) and not of_a_unit:
            month, day = (a, b) if r.date_order == "mdy" else (b, a)
            try:
                datetime.date(2000, month, day)  # a leap year: "29/2" is a day
            except ValueError:
                return None, 0
            return self._said_date(i, None, month, day), 0
        if _is_score(a, b, nxt):
            return None, 0  # "10/10", "9/10 dentists": out of ten (``_read_rating``)
        return self._fraction_of(i, a, b)

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
        m = FRACTION_RE.fullmatch(nxt.core)
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
        m = m or _SIGN_AFTER_RE.fullmatch(tok.core) or _MEASURE_PLUS_RE.fullmatch(tok.core)
        if m is None:
            return None, 0
        sign, rest = words[SIGN_ALIASES.get(m.group("sign"), m.group("sign"))], m.group("rest")
        prev = self.tokens[i - 1] if i > 0 else None
        if before and prev is not None and prev.core.lower() == sign and not prev.trail:
            sign = ""  # "Nummer #1", "about ~20": the word is said already
        # the rest read in the token's place, so it may take the next token along ("~20 min")
        self.tokens[i] = Token(tok.raw, tok.lead, rest, tok.trail)
        try:
            said, consumed = self._read(i)
        finally:  # the sign back, with the trail the rest's reading settled ("~5lbs. of": no full stop)
            self.tokens[i] = Token(tok.raw, tok.lead, tok.core, self.tokens[i].trail)
        if said is None:
            return None, 0  # no rule read it: the token is left to the mixed reading
        more_than = self.rules.more_than_words
        if not before and m.group("sign") == "+" and more_than:
            # "50+ personas" -> "más de cincuenta personas", agreeing with the noun ("21+ casas")
            if consumed == 0 and (num := self.rules.parse_number(rest)) is not None:
                said = self.rules.read_number(num, self._noun_after(i) or "m", before_noun=True)
            return self._more_than(i, said), consumed
        if (not before and m.group("sign") in ("x", "×") and consumed == 0 and self.rules.code == "en"
                and starts_upper(self._next(i)) and rest.isdecimal()):
            return self.rules.read_integer(rest), 0  # "2x Margherita": an order's count of a dish
        if not before and consumed == 0 and (num := self.rules.parse_number(rest)) is not None:
            # "2x": the number counts the sign's word, so agrees with it ("duas vezes")
            said = self.rules.read_number(num, self.rules.noun_gender(sign) or "m")
            if num == ParsedNumber("1", ""):
                sign = self.rules.sign_singulars.get(sign, sign)  # "1x" -> "una vez"
        elif not before and consumed == 0 and (span := AMOUNT_RANGE_RE.fullmatch(rest)):
            # "1-2x": both ends count it ("una a dos veces")
            ends = [self.rules.parse_number(span.group(k)) for k in ("low", "high")]
            if None not in ends:
                gender = self.rules.noun_gender(sign) or "m"
                said = f" {RANGE_WORD[self.rules.code]} ".join(self.rules.read_number(n, gender) for n in ends)
        return (f"{sign} {said}".strip() if before else f"{said} {sign}"), consumed

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

    def _read_ratio(self, i: int) -> tuple[Optional[str], int]:
        """A ratio or odds whose second term has one digit, so no time: "3:1" -> "three to one",
        "a 2:1 win". After a capitalised name inside a sentence it is a verse ("read Genesis 1:1")
        and stays."""
        m = _RATIO_RE.fullmatch(self.tokens[i].core)
        if not m:
            return None, 0
        prev = self.tokens[i - 1] if i > 0 else None
        starts_sentence = i < 2 or any(mark in self.tokens[i - 2].trail for mark in SENTENCE_END)
        if prev is not None and not prev.trail and prev.core[:1].isupper() and not starts_sentence:
            return None, 0
        r = self.rules
        return f"{r.cardinal(int(m.group(1)))} {RANGE_WORD[r.code]} {r.cardinal(int(m.group(2)))}", 0


def _is_score(a: int, b: int, nxt: Optional[Token]) -> bool:
    """Whether "a/b" is a score out of ten or a hundred ("10/10", "9/10 dentists", "95/100"),
    or of stars ("4/5 stars"), not a fraction: "1/10" is a tenth, and so is "3/10 of it"."""
    if nxt is not None and not nxt.lead and nxt.core.lower() in _STARS and 1 <= a <= b <= 10:
        return True  # "4/5 stars", "3/5 estrellas"
    if b not in (10, 100) or not 2 <= a <= b:
        return False
    return nxt is None or nxt.lead != "" or nxt.core.lower() not in FRACTION_OF


# "2+2=4", "1+1": numbers joined by "+" and "=" with no spaces (a phone's "+34" has none before it)
_SUM_RE = re.compile(r"\d+(?:[.,]\d+)?(?:[+=]\d+(?:[.,]\d+)?)+")
_FRACTION_BEFORE_WORD_RE = re.compile(r"(\d{1,2})/(\d{1,2})-([A-Za-z]{2,})")  # "1/2-price"
_RATIO_RE = re.compile(r"(\d{1,3}):(\d)")  # "3:1": one digit after the colon, so no time
