"""api/text/speech_pieces.py: a segment's speech cut into pieces one engine request can finish."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.text import normalize
from api.text.speech_pieces import MAX_PIECE_WORDS, speech_pieces


def test_speech_within_the_budget_is_one_piece_unchanged():
    text = "Hello  there,\thow are you?"  # odd spacing kept as it is
    assert speech_pieces(text, max_words=5) == [text]
    assert speech_pieces(text) == [text]


def test_a_long_reading_is_cut_into_even_pieces_within_the_budget():
    words = [f"w{i}" for i in range(250)]
    pieces = speech_pieces(" ".join(words), max_words=100)
    assert [len(p.split()) for p in pieces] == [84, 83, 83]  # three pieces, as even as 250 allows
    assert " ".join(pieces).split() == words


def test_a_cut_moves_to_a_nearby_word_ending_in_punctuation():
    words = [f"w{i}" for i in range(180)]
    words[82] += ","  # the even cut is after word 90; a comma 8 words before it is within reach
    pieces = speech_pieces(" ".join(words), max_words=100)
    assert pieces[0].endswith("w82,") and len(pieces[0].split()) == 83
    assert len(pieces) == 2 and " ".join(pieces).split() == words


def test_a_cut_never_moves_so_early_that_another_piece_is_needed():
    words = [f"w{i}" for i in range(200)]
    words[92] += ","  # a cut there would leave 107 words: two more pieces instead of one
    pieces = speech_pieces(" ".join(words), max_words=100)
    assert [len(p.split()) for p in pieces] == [100, 100]


def test_punctuation_past_the_budget_is_never_a_cut():
    words = [f"w{i}" for i in range(150)]
    words[109] += "."  # ends a 110-word first piece: over the budget
    pieces = speech_pieces(" ".join(words), max_words=100)
    assert all(len(p.split()) <= 100 for p in pieces)
    assert [len(p.split()) for p in pieces] == [75, 75]


def test_four_hundred_digits_read_one_by_one_become_pieces_the_frame_cap_allows():
    """The case that motivated it: a 400-character segment of digits (the segmenter's longest) is
    ~400 spoken words, about 160 s at the upstream heuristic, past the 2,000-frame cap (~93 s)."""
    spoken = normalize("My code is " + "1234567890" * 40 + ".", "en").text
    assert len(spoken.split()) > 3 * MAX_PIECE_WORDS
    pieces = speech_pieces(spoken)
    assert len(pieces) == 4
    assert all(len(p.split()) <= MAX_PIECE_WORDS for p in pieces)
    assert " ".join(pieces).split() == spoken.split()


def test_a_budget_under_one_word_is_refused():
    with pytest.raises(ValueError, match="max_words"):
        speech_pieces("a b", max_words=0)


@given(st.lists(st.text(alphabet="ab,.", min_size=1, max_size=4), min_size=1, max_size=400),
       st.integers(min_value=1, max_value=130))
def test_pieces_keep_every_word_in_order_and_respect_the_budget(words, budget):
    words = [w for w in words if w.strip()]
    text = " ".join(words)
    pieces = speech_pieces(text, max_words=budget)
    assert " ".join(pieces).split() == text.split()
    if len(text.split()) > budget:
        assert all(1 <= len(p.split()) <= budget for p in pieces)
        assert len(pieces) == -(-len(text.split()) // budget)  # the fewest possible
