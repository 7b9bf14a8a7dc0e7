"""Reading money: amounts with a symbol or a code ("$5", "€3,50", "5 USD", "USD 50", "$1,234.56
MXN"), cents ("99¢"), scales ("$2.5M", "$1.5 million", "1.2k"), ranges ("$10-$20", "10-20 €") and
amounts per unit ("$9.99/month"). A mixin of the token reader (``api/text/normalization.py``).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Optional

from api.text.normalization_rules import SOUTH_AMERICAN_PESOS, ParsedNumber
from api.text.normalization_tokens import RANGE_WORD, Token, TokenContext
from api.text.normalization_units import UNIT_SYMBOLS, number_range

SYMBOLS = {"$": "USD", "US$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY", "R$": "BRL", "MX$": "MXN", "₹": "INR",
            "C$": "CAD", "CA$": "CAD", "A$": "AUD", "AU$": "AUD", "S/": "PEN"}  # Peru's sol: "S/ 25"
# ISO codes read as currencies wherever they stand by an amount ("5 USD", "ARS 500"); Colombia's COP
# only after a "$" amount ("$50.000 COP"), as "COP 28" is the climate summit
CODES = {"USD", "EUR", "GBP", "JPY", "BRL", "MXN", "INR", "CAD", "AUD", "ARS", "CLP", "UYU", "PEN"}
_NO_CENTS_RE = re.compile(r"(.*\d),--?")  # a whole amount's ",-" (Dutch, German): "1.450,-"
# what a bare "$" may be: "$1.500 MXN" is pesos, and a code of them after a "$" amount is read with it
_DOLLAR_CODES = frozenset({"USD", "MXN", "CAD", "AUD", *SOUTH_AMERICAN_PESOS.values()})
_CODES_AFTER_AMOUNT = frozenset(CODES | _DOLLAR_CODES)  # "$50.000 COP"
_SYM = r"US\$|R\$|MX\$|CA?\$|AU?\$|S/|[$€£¥₹]"
_MONEY_SCALE = "k|K|m|M|bn|b|B|T|mln|mld"  # "$5M", "€2,5mld": keys of ``scale_words``, any case
# what a money scale multiplies by, to tell a range's order ("$500K-$1M" rises)
_SCALE_VALUES = {"k": 10**3, "m": 10**6, "mln": 10**6, "b": 10**9, "bn": 10**9, "mld": 10**9, "t": 10**12}
# ",-" after a whole amount is the Dutch/German "no cents": "€5,-".
# "$.99": cents alone, as prices are written
PREFIX_MONEY_RE = re.compile(
    rf"(?P<sign>[-\u2212])?(?P<sym>{_SYM})(?P<num>\d[\d.,]*?|[.,]\d{{1,2}})(?:,--?)?(?P<scale>{_MONEY_SCALE})?"
)
_CENTS_RE = re.compile(r"(?P<num>\d{1,3}(?:\.\d{1,2})?)\s?¢")  # "99¢", "12.5¢": cents of a dollar
SUFFIX_MONEY_RE = re.compile(rf"(?P<num>[-\u2212]?\d[\d.,]*?)(?:,--?)?\s?(?P<sym>{_SYM})")
# "$10-$20", "$10-20", "€5–€10", "$1-2M", "$80K-$120K": a range of amounts with its symbol in front
_PREFIX_MONEY_RANGE_RE = re.compile(
    rf"(?P<sym>{_SYM})(?P<low>\d[\d.,]*?)(?P<low_scale>{_MONEY_SCALE})?[-–](?:(?P=sym))?"
    rf"(?P<high>\d[\d.,]*?)(?P<scale>{_MONEY_SCALE})?"
)
AMOUNT_RANGE_RE = re.compile(r"(?P<low>\d[\d.,]*?)[-–](?P<high>\d[\d.,]*)")  # "10-20 €"
# "1.2k", "2.5M", "3bn": a whole number before "k" or "M" is often a name ("401k", "4k TV", "a 5k race", "3M")
_SCALED_RE = re.compile(r"(?P<num>\d+[.,]\d+)(?P<scale>k|M|B)|(?P<whole>\d[\d.,]*)(?P<bn>bn)")
# a number before a scale's short form written apart: under a thousand ("2020 mi" is no million)
_SHORT_SCALED_RE = re.compile(r"\d{1,3}(?:[.,]\d+)?")
# "1M+", "100k+": a count, with the "+" that "401k" and "3M" never have
_SCALED_PLUS_RE = re.compile(r"(?P<num>\d{1,3}(?:[.,]\d+)?)(?P<scale>k|M)\+")
# "$9.99/month", "5€/kg", "20km/day": an amount, "/" and a word (_read_per)
_PER_AMOUNT_RE = re.compile(
    rf"(?:{_SYM})?(?:\d[\d.,]*|[.,]\d{{1,2}})(?P<suffix>[$€£¥₹¢]|[A-Za-z]{{1,3}})?/[^\W\d_]{{1,12}}")
# a word after "/" is "per" it when lowercase ("month", "mes"): "3D/VR", "10/Jan", "101/B" are not
_PER_WORD_RE = re.compile(r"[^\W\d_A-Z]{2,12}")


class MoneyReading(TokenContext):
    """Money, scaled numbers and amounts per unit."""

    def _read_money(self, i: int) -> tuple[Optional[str], int]:
        """An amount of money: "$5", "-€3", "5 USD", "€ 5", "USD 50", "9,99 €/mes"; with its scale, a suffix
        ("$2.5M") or a word ("$1.5 million": ``_spelled_scale``); a range ("$10-$20", "10-20 €")."""
        r, tok, nxt = self.rules, self.tokens[i], self._next(i)
        m = PREFIX_MONEY_RE.fullmatch(tok.core)
        if m:
            num = r.parse_amount(m.group("num"), dollar_sign="$" in m.group("sym"))
            scale = m.group("scale")
            if num is not None and (scale is None or scale.lower() in r.scale_words):
                if m.group("sign"):
                    num = ParsedNumber(num.integer, num.fraction, True)
                code = self._currency_of(m.group("sym"))
                scale, consumed = (scale.lower(), 0) if scale else self._spelled_scale(i, 0, code)
                code, consumed = self._code_after(i, consumed, m.group("sym"), code)
                return r.read_currency(num, code, scale, singular=self._adjective_amount(i, consumed)), consumed
        if tok.core.count("/") == 1 and all(PREFIX_MONEY_RE.fullmatch(part) for part in tok.core.split("/")):
            # "$35/$45": two prices, each read as one ("first and second bag"), a pause between them
            said = [type(self)(r, [part])._read_money(0)[0] for part in tok.core.split("/")]
            if None not in said:
                return ", ".join(said), 0
        m = _PREFIX_MONEY_RANGE_RE.fullmatch(tok.core)
        if m and all(s is None or s.lower() in r.scale_words for s in m.group("low_scale", "scale")):
            code, scale, low_scale = self._currency_of(m.group("sym")), m.group("scale"), m.group("low_scale")
            scale, consumed = (scale.lower(), 0) if scale else self._spelled_scale(i, 0, code)
            code, consumed = self._code_after(i, consumed, m.group("sym"), code)
            said = self._money_range(m.group("low"), m.group("high"), code, scale, i, consumed,
                                     low_scale.lower() if low_scale else None)
            if said is not None:
                return said, consumed
        m = SUFFIX_MONEY_RE.fullmatch(tok.core)
        if m:
            num = r.parse_amount(m.group("num"), dollar_sign="$" in m.group("sym"))
            if num is not None:
                return r.read_currency(num, self._currency_of(m.group("sym")), singular=self._adjective_amount(i, 0)), 0
        m, consumed = _CENTS_RE.fullmatch(tok.core), 0
        if m is None and nxt is not None and nxt.core == "¢" and not tok.trail and not nxt.lead:  # "99 ¢"
            m, consumed = _CENTS_RE.fullmatch(tok.core + "¢"), 1
        if m is not None:
            return self._cents(m.group("num"), i, consumed)
        if nxt is None or tok.trail:
            return None, 0
        nxt_core, per = self._split_per(nxt.core)  # "€ 5/kg", "9,99 €/mes"
        negative = tok.core[:1] in "-\u2212" and tok.core[1:] in SYMBOLS  # "-€ 23,50"
        symbol = tok.core[1:] if negative else tok.core
        if symbol in SYMBOLS or symbol in CODES:  # "€ 5", "USD 50"
            code = self._currency_of(symbol) if symbol in SYMBOLS else symbol
            no_cents = _NO_CENTS_RE.fullmatch(nxt_core)  # "€ 1.450,-"
            num = r.parse_amount(no_cents.group(1) if no_cents else nxt_core, dollar_sign=code in _DOLLAR_CODES)
            if num is not None and negative:
                num = ParsedNumber(num.integer, num.fraction, True)
            if num is not None and not nxt.lead:
                if per:
                    return r.read_currency(num, code) + per, 1
                scale, consumed = self._spelled_scale(i, 1, code)
                return r.read_currency(num, code, scale, singular=self._adjective_amount(i, consumed)), consumed
            return None, 0
        code = (
            (self._currency_of(nxt_core) if nxt_core in SYMBOLS else None)
            or (nxt_core if nxt_core in CODES else None)
            or r.currency_by_name.get(nxt_core.lower())
        )
        if not code or nxt.lead:
            return None, 0
        num = r.parse_amount(tok.core, dollar_sign=code in _DOLLAR_CODES)
        if num is not None:  # "5 USD", "3,50 €", "1.000.000 euros"
            return r.read_currency(num, code, singular=not per and self._adjective_amount(i, 1)) + per, 1
        m = AMOUNT_RANGE_RE.fullmatch(tok.core)  # "10-20 €"
        said = self._money_range(m.group("low"), m.group("high"), code, None, i, 1) if m else None
        return (said + per, 1) if said is not None else (None, 0)

    def _currency_of(self, symbol: str) -> str:
        """The ISO code a currency sign names: a bare "$" the dollar or peso of where the text was
        written (``LanguageRules.dollar_sign_code``: Mexico's "$250" is pesos), the others their own."""
        return self.rules.dollar_sign_code if symbol == "$" else SYMBOLS[symbol]

    def _code_after(self, i: int, consumed: int, symbol: str, code: str) -> tuple[str, int]:
        """The currency an ISO code right after an amount with a symbol names, and the tokens read
        with it: "$100 USD" says "dollars" once; "$1.500 MXN" is pesos and "$20 CAD" Canadian
        dollars, as a bare "$" is the sign of many dollars and pesos. So does the currency's name
        ("$1,234 pesos", "$5 dollars" say it once). (code, consumed) when neither follows, or one the
        symbol cannot mean ("€5 USD")."""
        last, nxt = self.tokens[i + consumed], self._next(i + consumed)
        if nxt is None or last.trail or nxt.lead:
            return code, consumed
        named = nxt.core if nxt.core in _CODES_AFTER_AMOUNT else self.rules.currency_by_name.get(nxt.core.lower())
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
        return f"{said_low} {RANGE_WORD[r.code]} {said_high}" if said_low and said_high else None

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

    def _read_per(self, i: int) -> tuple[Optional[str], int]:
        """An amount per something: "$9.99/month" -> "nine dollars and ninety-nine cents per
        month", "$20/hr" -> "... per hour", "5 €/kg"; the amount is read by the other rules."""
        tok, nxt = self.tokens[i], self._next(i)
        if (nxt is not None and not tok.trail and not nxt.lead and nxt.core.count("/") == 1
                and nxt.core.partition("/")[0] in UNIT_SYMBOLS and self.rules.units):
            # "3,000 mg/day", "5 km/day": a unit written apart with what it is per
            unit, per = self._split_per(nxt.core)
            low, written = number_range(tok.core) or (None, tok.core)
            said = self._amount_of(low, written, UNIT_SYMBOLS[unit]) if per and unit in UNIT_SYMBOLS else None
            if said is not None:
                return said + per, 1
        m = _PER_AMOUNT_RE.fullmatch(tok.core)
        suffix = m.group("suffix") if m else None
        scaled_amount = suffix is not None and PREFIX_MONEY_RE.fullmatch(tok.core.rpartition("/")[0]) is not None
        # "5k/day": a count of thousands per something (alone, "5k" may be a race)
        scaled_count = suffix in ("k", "K") and tok.core[:1].isdigit()
        if m is None or (suffix is not None and suffix.isalpha() and suffix not in UNIT_SYMBOLS and suffix != "x"
                         and not scaled_amount and not scaled_count):
            return None, 0  # "3pm/EST", "3D/VR": letters that are no unit; "$10k/month" is money
        amount, per = self._split_per(tok.core)
        if not per:
            return None, 0
        if scaled_count:
            said = self._scaled(amount[:-1], "k")
            return (said + per, 0) if said is not None else (None, 0)
        self.tokens[i] = Token(tok.raw, tok.lead, amount, "")  # the amount alone, read by the other rules
        try:
            said, _ = self._read(i)
        finally:
            self.tokens[i] = tok
        return (said + per, 0) if said is not None else (None, 0)

    def _read_scaled(self, i: int) -> tuple[Optional[str], int]:
        """A number with a scale: "1.2k" -> "one point two thousand", "2.5M" -> "two point five
        million", "8.1B", "3bn". Only a decimal before lowercase "k" or uppercase "M" or "B": "10k",
        "401k", "4k", "3M", "8B" are as often names, races, resolutions or seats, and "5m" may be
        meters (``_SCALED_RE``);
        a whole number with a "+" after its scale is a count ("1M+ users", "100k+")."""
        core, nxt = self.tokens[i].core, self._next(i)
        if m := _SCALED_RE.fullmatch(core):
            return self._scaled(m.group("num") or m.group("whole"), m.group("scale") or m.group("bn")), 0
        if (nxt is not None and not self.tokens[i].trail and not nxt.lead and _SHORT_SCALED_RE.fullmatch(core)
                and nxt.core.lower() in self.rules.short_scales):  # "5 mln inwoners", "2,5 bi"
            said = self._scaled(core, self.rules.short_scales[nxt.core.lower()])
            return (said, 1) if said is not None else (None, 0)
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
        return f"{r.read_number(num, before_noun=True)} {names[0 if r.takes_one_scale(num) else 1]}"  # "un millón"


def _amount_value(num: ParsedNumber) -> Decimal:
    return Decimal(f"{'-' if num.negative else ''}{num.integer or '0'}.{num.fraction or '0'}")
