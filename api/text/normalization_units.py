"""Units of measure as written after a number: which symbols are units, and which unit each names.

"30°C", "50 km/h", "20 m²", "16GB", "2.4 GHz", "500 mg", "-5 °F", "30-35°C", "24 hrs": an LLM's reply is full of them,
and Gepard reads the symbols as letters or not at all. ``normalization.py`` reads a number followed
by a unit symbol (the same token, or the next one) as the language's words for the amount and the
unit (``LanguageRules.read_measure``: "thirty degrees Celsius", "cincuenta kilómetros por hora").

Symbols are matched exactly, case included: "MB" is a megabyte, "mb" is not read; "G" (a 5G
network) is not a gram. A symbol that is also a common abbreviation or letter is a unit only as a
token of its own after a number ("5 m" is five meters; "5m" may be five million or five minutes, and
is left to the other rules): ``SPACED_ONLY``; one that is also a direction only written against it
("60W" is power, "Route 66 W" is west): ``ATTACHED_ONLY``. "in" (inch) and "s" (second) are never
units: "5 in the box", "the 90 s". A single digit before "g" is a network generation ("5g"), not grams.
A language may leave a unit out of its table where the symbol is one of its words: Spanish "mi"
("my"), Portuguese "mi" (million).

A unit symbol with a superscript after no number ("per m²") is read as the unit's name
(``STANDALONE``): that is how "m²" is said anywhere.
"""

from __future__ import annotations

import re

__all__ = [
    "ATTACHED_ONLY", "SPACED_ONLY", "STANDALONE", "TWO_WORD_UNITS", "UNDER_A_THOUSAND", "UNIT_KEYS", "UNIT_SYMBOLS",
    "attached_unit", "number_range",
]

#: written symbol -> the unit's key in ``LanguageRules.units``
UNIT_SYMBOLS: dict[str, str] = {
    # length, mass, volume
    "km": "km", "m": "m", "cm": "cm", "mm": "mm", "mi": "mi", "ft": "ft", "ac": "acre",
    "″": "in",  # the double prime; an ASCII '"' after a number is read apart (_read_inch_mark)
    "kg": "kg", "g": "g", "mg": "mg", "lb": "lb", "lbs": "lb", "oz": "oz",
    "pc": "piece", "pcs": "piece",  # "10 pc", "2 pcs"; "PC" is a computer
    "l": "l", "L": "l", "ml": "ml", "mL": "ml",
    # area, volume
    "m²": "m2", "km²": "km2", "cm²": "cm2", "mm²": "mm2", "ft²": "ft2", "sqft": "ft2", "m³": "m3", "cm³": "cm3",
    "kg/m²": "kg/m2", "kg/m2": "kg/m2",  # a body mass index
    # speed
    "km/h": "km/h", "kph": "km/h", "kmh": "km/h", "mph": "mph", "m/s": "m/s", "mpg": "mpg",
    # temperature and angle; "º" (the ordinal indicator) is often typed for "°"
    "°C": "°C", "ºC": "°C", "℃": "°C", "°F": "°F", "ºF": "°F", "℉": "°F", "°": "°",
    # data, frequency, power, energy, time
    "KB": "KB", "kB": "KB", "MB": "MB", "GB": "GB", "TB": "TB",
    "Hz": "Hz", "kHz": "kHz", "KHz": "kHz", "MHz": "MHz", "GHz": "GHz",
    "bps": "bps", "pb": "bp", "kbps": "kbps", "Kbps": "kbps", "Mbps": "Mbps", "Gbps": "Gbps", "fps": "fps",
    # health: a pulse, blood sugar
    "bpm": "bpm", "mmHg": "mmHg", "mg/dL": "mg/dL", "mg/dl": "mg/dL", "mmol/L": "mmol/L", "mmol/l": "mmol/L",
    "W": "W", "kW": "kW", "MW": "MW", "kWh": "kWh",
    "ms": "ms", "sec": "s", "secs": "s", "min": "min", "mins": "min", "h": "h", "hr": "h", "hrs": "h", "Hrs": "h", "HRS": "h", "HRs": "h",
    "wk": "wk", "wks": "wk", "mo": "mo", "mos": "mo", "yr": "yr", "yrs": "yr",
    # kitchen
    "tbsp": "tbsp", "Tbsp": "tbsp", "tsp": "tsp",
    # a rating: "4.8★" (api/text/speech.py keeps the star after a number for the rules to read)
    "★": "star", "⭐": "star",
}

#: units written as two words: the first word (its period optional) -> the second's symbol -> the
#: unit's key: "1,200 sq ft", "20 sq. m", "8 fl oz", "2 fl. oz."
TWO_WORD_UNITS: dict[str, dict[str, str]] = {
    "sq": {"ft": "ft2", "m": "m2", "km": "km2", "cm": "cm2", "mm": "mm2"},
    "fl": {"oz": "floz"},
}

#: a unit key -> the unit its symbol names after an amount under a thousand: "25 bps" are basis
#: points (a rate's move, "25 pb" in Spanish and Portuguese); a bit rate that low is long gone
#: ("9600 bps" stays bits per second)
UNDER_A_THOUSAND: dict[str, str] = {"bps": "bp"}

#: every key a language's ``units`` table must name
UNIT_KEYS = (frozenset(UNIT_SYMBOLS.values()) | {key for seconds in TWO_WORD_UNITS.values() for key in seconds.values()}
             | set(UNDER_A_THOUSAND.values()))

#: symbols read only as a token of their own after a number ("5 m", "2 L"), never written against it
SPACED_ONLY = frozenset({"m", "l", "L", "mi"})
#: symbols read only written against a number: "Route 66 W" is a direction, "60W" a power
ATTACHED_ONLY = frozenset({"W"})

#: symbols read as the unit's name where no number comes before them ("per m²")
STANDALONE = frozenset(s for s in UNIT_SYMBOLS if s[-1] in "²³")

_NUMBER = r"[-\u2212]?(?:\d[\d.,]*)?\d"
_ATTACHABLE = sorted((s for s in UNIT_SYMBOLS if s not in SPACED_ONLY), key=len, reverse=True)
_ATTACHED_RE = re.compile(rf"(?:(?P<low>{_NUMBER})[-–])?(?P<num>{_NUMBER})(?P<unit>{'|'.join(map(re.escape, _ATTACHABLE))})")
# "a 1.5L engine", "2,5l": a decimal before "L" is liters ("5L" alone may be a size or a floor)
_DECIMAL_LITERS_RE = re.compile(r"(?P<num>\d+[.,]\d+)(?P<unit>[lL])")
_RANGE_RE = re.compile(rf"(?P<low>{_NUMBER})[-–](?P<num>\d(?:[\d.,]*\d)?)")


def attached_unit(core: str) -> tuple[str | None, str, str] | None:
    """(None, "30", "°C") for "30°C", ("30", "35", "°C") for the range "30-35°C": a number or a
    range with a unit symbol written against it, or None."""
    m = _ATTACHED_RE.fullmatch(core) or _DECIMAL_LITERS_RE.fullmatch(core)
    if m is None or (m.group("unit") == "g" and len(m.group("num")) == 1):
        return None  # "5g", "4g": a network generation more often than grams
    return m.groupdict().get("low"), m.group("num"), m.group("unit")


def number_range(core: str) -> tuple[str, str] | None:
    """("100", "120") for "100-120" (before a spaced unit: "100-120 km/h"), or None."""
    m = _RANGE_RE.fullmatch(core)
    return (m.group("low"), m.group("num")) if m else None
