"""The check the normalisation tables share: a text is said as expected, and its alignment stays
whole (every token as written, in order; the normalised words are exactly those of the text), which
is what word timestamps are built from."""

from __future__ import annotations

from api.text.normalization import NormalizedText, normalize


def assert_reads(language: str, text: str, expected: str) -> NormalizedText:
    norm = normalize(text, language)
    assert norm.text == expected
    assert norm.original_words == text.split() and norm.normalized_words == norm.text.split()
    return norm
