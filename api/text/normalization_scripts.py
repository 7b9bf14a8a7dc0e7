"""Superscript and subscript digits and fraction characters: "x²", "10³", "E = mc²", "H₂O", "CO₂", "½".

They pass ``str.isdigit`` but are no decimal digits, so the number rules never read them, and
Gepard is handed the raw characters. ``read_scripts`` reads a whole token core of one of these
shapes, or returns None (the token is left to the other rules, and stays as written):

- a power: a base of letters or decimal digits, then superscript digits: "x²" -> "x squared",
  "10³" -> "ten cubed", "2⁵" -> "two to the power of five" (``LanguageRules.power_words``,
  ``power_word``). A base of up to three letters is a product of variables and is spelled ("mc²"
  -> "m c squared"); after a longer word, or as "¹", a raised digit is a footnote mark
  ("studies¹", "reports²") and the token stays as written.
- a chemical formula: element symbols, each with an optional subscript count, at least one:
  "H₂O" -> "H two O", "CO₂" -> "C O two", "C₆H₁₂O₆" -> "C six H twelve O six", letters spelled
  in capitals as chemists say them ("NaCl" is not one: no subscript).
- a fraction character, after a whole number or alone: "½" -> "one half", "1½" -> "one and a
  half", "2¾" -> "two and three quarters" (``LanguageRules.read_fraction``, ``and_a_half``).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Optional

from api.text.normalization_rules import LanguageRules

__all__ = ["fraction_character", "mixed_fraction", "read_mixed_number", "read_scripts"]

_SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹"
_SUBSCRIPTS = "₀₁₂₃₄₅₆₇₈₉"
_FRACTIONS = "½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅐⅛⅜⅝⅞⅑⅒"

_POWER_RE = re.compile(rf"(?P<base>[^\W\d_]+|\d+)(?P<exp>[{_SUPERSCRIPTS}]+)")
_FORMULA_RE = re.compile(rf"(?:[A-Z][a-z]?[{_SUBSCRIPTS}]*)+")
_ELEMENT_RE = re.compile(rf"([A-Z][a-z]?)([{_SUBSCRIPTS}]*)")
_FRACTION_RE = re.compile(rf"(?P<whole>\d+)?(?P<frac>[{_FRACTIONS}])")


def read_scripts(core: str, rules: LanguageRules) -> Optional[str]:
    """The words for ``core`` (module docstring), or None when it is none of these shapes."""
    m = _POWER_RE.fullmatch(core)
    if m and (m.group("base").isdecimal() or (len(m.group("base")) <= 3 and m.group("exp") != "¹")):
        return _power(m.group("base"), _script_value(m.group("exp")), rules)
    if _FORMULA_RE.fullmatch(core) and any(c in _SUBSCRIPTS for c in core):
        return " ".join(_element(symbol, count, rules) for symbol, count in _ELEMENT_RE.findall(core))
    if m := _FRACTION_RE.fullmatch(core):
        numerator, denominator = _fraction_parts(m.group("frac"))
        if not m.group("whole"):
            return rules.read_fraction(numerator, denominator)
        return read_mixed_number(m.group("whole"), numerator, denominator, rules)
    return None


def read_mixed_number(whole: str, numerator: int, denominator: int, rules: LanguageRules) -> Optional[str]:
    """A whole number and a fraction ("1½", "2 1/2"): "two and a half", "one and three quarters";
    None when the language has no words for the fraction."""
    fraction = rules.read_fraction(numerator, denominator)
    if fraction is None:
        return None
    if (numerator, denominator) == (1, 2):
        return f"{rules.read_integer(whole)} {rules.and_a_half}"  # "one and a half", "uno y medio"
    return f"{rules.read_integer(whole)} {rules.ampersand_word} {fraction}"


def fraction_character(core: str) -> Optional[tuple[int, int]]:
    """"½" -> (1, 2); None for anything but one fraction character alone."""
    return _fraction_parts(core) if len(core) == 1 and core in _FRACTIONS else None


def mixed_fraction(core: str) -> Optional[tuple[int, int, int]]:
    """"1½" -> (1, 1, 2): a whole number and a fraction character; None for anything else."""
    m = _FRACTION_RE.fullmatch(core)
    if m is None or not m.group("whole"):
        return None
    return (int(m.group("whole")), *_fraction_parts(m.group("frac")))


def _script_value(digits: str) -> int:
    return int("".join(str(unicodedata.digit(c)) for c in digits))


def _power(base: str, exponent: int, rules: LanguageRules) -> str:
    if base.isdecimal():
        said = rules.read_integer(base)
    else:
        said = " ".join(base)  # "mc" is m times c
    word = rules.power_words.get(exponent)
    return f"{said} {word}" if word else f"{said} {rules.power_word} {rules.cardinal(exponent)}"


def _element(symbol: str, count: str, rules: LanguageRules) -> str:
    letters = " ".join(symbol.upper())
    return f"{letters} {rules.cardinal(_script_value(count))}" if count else letters


def _fraction_parts(char: str) -> tuple[int, int]:
    """"½" -> (1, 2): its compatibility decomposition is "1⁄2"."""
    numerator, denominator = unicodedata.normalize("NFKC", char).split("\u2044")
    return int(numerator), int(denominator)
