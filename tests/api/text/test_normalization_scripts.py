"""Superscripts, subscripts and fraction characters (api/text/normalization_scripts.py)."""

from __future__ import annotations

import pytest

from api.text.normalization import normalize
from tests.api.text.reading import assert_reads

READINGS = [
    ("en", "E = mc²", "E equals m c squared"),
    ("en", "x² + y² = z²", "x squared plus y squared equals z squared"),
    ("en", "10³ and 2⁵, or 2¹⁰.", "ten cubed and two to the power of five, or two to the power of ten."),
    ("en", "H₂O, CO₂ and C₆H₁₂O₆.", "H two O, C O two and C six H twelve O six."),
    ("en", "Add ½ cup, then 1½ cups.", "Add one half cup, then one and a half cups."),
    ("en", "¾ of it, 2¾ of them", "three quarters of it, two and three quarters of them"),
    ("es", "½, 1½, 2¾ y 3/4", "un medio, uno y medio, dos y tres cuartos y tres cuartos"),
    ("pt", "1/2 e 1½", "um meio e um e meio"),
    ("nl", "⅓, 2/3 en 3/4", "één derde, twee derde en drie kwart"),
    ("en", "The room is 20 m²", "The room is twenty square meters"),  # a unit, read as one
    ("es", "E = mc² y 2⁵", "E igual a m c al cuadrado y dos elevado a cinco"),
    ("es", "el CO₂", "el C O dos"),
    ("pt", "x³ e H₂O", "x ao cubo e H dois O"),
    ("nl", "x² en 10³", "x kwadraat en tien tot de derde macht"),
]


@pytest.mark.parametrize("language, text, expected", READINGS)
def test_scripts_are_read(language, text, expected):
    assert_reads(language, text, expected)


@pytest.mark.parametrize("language, text", [
    ("en", "① and ②"),       # circled digits: no rule reads them
    ("en", "NaCl"),          # a formula without a subscript is a word
    ("en", "x²y"),           # a power inside a longer token
    ("en", "As studies¹ and reports² show."),  # footnote marks after words
    ("en", "See note³."),
])
def test_other_shapes_stay_as_written(language, text):
    assert normalize(text, language).text == text
