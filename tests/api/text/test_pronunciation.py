"""Sounds-like entries applied before normalisation: word boundaries, case, longest match, and the
alignment that keeps word timestamps in the client's own words."""

from __future__ import annotations

import numpy as np
import pytest

from api.text import normalize, segment_timestamps
from api.text.pronunciation import apply_pronunciations, compile_pronunciations, normalize_pronounced
from voices.dictionaries import PronunciationItem as Item


def spoken(text: str, *items: Item, mode: str = "auto") -> str:
    return normalize_pronounced(text, "en", mode, compile_pronunciations(items)).text


@pytest.mark.parametrize("text, expected", [
    ("I use SQL.", "I use sequel."),
    ("(SQL), SQL; SQL!", "(sequel), sequel; sequel!"),
    ("MySQL and SQLite stay.", "MySQL and SQLite stay."),  # whole words only
    ("sql and Sql", "sequel and Sequel"),  # case-insensitive by default, capitalisation kept
    ("sql SERVER", "sequel SERVER"),
])
def test_whole_words_in_any_case_take_the_case_of_the_match(text, expected):
    assert spoken(text, Item("SQL", "sequel")) == expected


def test_key_spelled_as_listed_keeps_the_alias_as_listed():
    assert spoken("Ask Nvidia.", Item("Nvidia", "en-VID-ee-uh")) == "Ask en-VID-ee-uh."
    assert spoken("ask NVIDIA.", Item("Nvidia", "en-VID-ee-uh")) == "ask EN-VID-EE-UH."


def test_case_sensitive_entries_match_as_written_and_at_a_sentence_start():
    item = Item("gif", "jif", case_sensitive=True)
    assert spoken("gif. Gif! GIF?", item) == "jif. Jif! GIF?"
    assert spoken("nvidia or Nvidia", Item("Nvidia", "en-VID-ee-uh", case_sensitive=True)) == "nvidia or en-VID-ee-uh"


def test_longest_key_wins_and_whitespace_in_keys_is_any_whitespace():
    items = (Item("New York", "Noo Yawk"), Item("New York City", "the big apple"), Item("New", "Nu"))
    assert spoken("New York City and New\nYork, New things.", *items) == "the big apple and Noo Yawk, Nu things."


def test_keys_ending_in_symbols_match_without_a_trailing_boundary():
    assert spoken("C++ and C#.", Item("C++", "see plus plus"), Item("C#", "see sharp")) == \
        "see plus plus and see sharp."


@pytest.mark.parametrize("text, expected", [
    ("C+++ and C++++.", "C+++ and C++++."),  # a longer run of symbols is another word
    ("(C++), C++-based, C++/CLI", "(see plus plus), see plus plus-based, see plus plus/CLI"),
    ("«C++» or “C++”?", "«see plus plus» or “see plus plus”?"),
])
def test_a_symbol_edge_of_a_key_still_needs_a_boundary(text, expected):
    assert spoken(text, Item("C++", "see plus plus")) == expected


def test_a_leading_symbol_edge_needs_a_boundary_too():
    # "++C" is not inside "+++C"; after an opening bracket or a space it matches
    assert spoken("+++C or (++C) ++C", Item("++C", "increment see")) == "+++C or (increment see) increment see"


def test_entries_apply_before_normalisation_and_also_with_normalisation_off():
    assert spoken("Call 911 now.", Item("911", "nine one one")) == "Call nine one one now."
    assert spoken("I paid $5 for SQL.", Item("SQL", "sequel")) == "I paid five dollars for sequel."
    assert spoken("SQL 5", Item("SQL", "sequel"), mode="off") == "sequel 5"


def test_alignment_reports_the_clients_tokens_with_the_spoken_words():
    prons = compile_pronunciations([Item("AWS", "A W S"), Item("New York", "Noo Yawk")])
    n = normalize_pronounced("On AWS at 5 pm in New York.", "en", "auto", prons)
    assert n.original_words == "On AWS at 5 pm in New York.".split()
    assert [a.normalized for a in n.alignment] == [
        ("On",), ("A", "W", "S"), ("at",), ("five", "p", "m"), (), ("in",), ("Noo", "Yawk."), ()]
    assert n.text.split() == n.normalized_words
    assert [a.start_char for a in n.alignment] == [0, 3, 7, 10, 12, 15, 18, 22]


def test_timestamps_name_original_words_or_the_spoken_ones():
    prons = compile_pronunciations([Item("SQL", "sequel query language")])
    n = normalize_pronounced("I like SQL a lot.", "en", "auto", prons)
    rng = np.random.default_rng(0)
    pcm = (rng.standard_normal(22050 * 2) * 0.1).astype(np.float32)  # 2 s of "speech"
    original = segment_timestamps(n, pcm, 0.0)
    assert list(original.words) == ["I", "like", "SQL", "a", "lot."]
    normalized = segment_timestamps(n, pcm, 0.0, use_normalized=True)
    assert list(normalized.words) == ["I", "like", "sequel", "query", "language", "a", "lot."]
    # the original word spans exactly its three spoken words
    assert original.start[2] == normalized.start[2] and original.end[2] == normalized.end[4]


def test_no_dictionary_or_no_match_is_plain_normalisation():
    text = "Dr. Smith paid $5."
    assert normalize_pronounced(text, "en", "auto", None) == normalize(text, "en", "auto")
    assert normalize_pronounced(text, "en", "auto", compile_pronunciations([Item("SQL", "sequel")])) == \
        normalize(text, "en", "auto")
    assert apply_pronunciations(text, compile_pronunciations([])).spans == ()


def test_compiled_dictionaries_are_reused_for_equal_entries():
    a = compile_pronunciations([Item("SQL", "sequel")])
    assert compile_pronunciations([Item("SQL", "sequel")]) is a
    assert compile_pronunciations([Item("SQL", "squeal")]) is not a
