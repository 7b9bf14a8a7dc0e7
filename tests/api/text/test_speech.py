"""api/text/speech.py: what in a text is spoken; emoji and other pictographs are not read."""

from __future__ import annotations

import pytest

from api.text.normalization import normalize
from api.text.speech import has_speech, is_pictograph, without_pictographs


@pytest.mark.parametrize("ch", ["😊", "🚀", "✅", "❌", "★", "™", "☀", "\u200d", "\ufe0f", "\u20e3", "\U0001f3fd"])
def test_emoji_their_parts_and_pictographic_symbols_are_pictographs(ch):
    assert is_pictograph(ch)


@pytest.mark.parametrize("ch", ["a", "7", ".", "°", "℃", "℉", "→", "$", "€", "%", "&", "é", "中"])
def test_letters_digits_punctuation_signs_and_units_are_not(ch):
    assert not is_pictograph(ch)


def test_without_pictographs_keeps_words_and_hands_a_sentence_end_back():
    assert without_pictographs(["love", "it", "😊."]) == ["love", "it.", ""]
    assert without_pictographs(["Thanks🙏", "👍🏽", "so", "much!"]) == ["Thanks", "", "so", "much!"]
    assert without_pictographs(["1️⃣", "or", "2️⃣"]) == ["1", "or", "2"]  # a keycap is its digit
    assert without_pictographs(["😊."]) == ["."]  # nothing before it to take the stop
    assert without_pictographs(["...", ":)"]) == ["...", ":)"]  # no pictograph: as written


def test_a_rating_star_after_a_number_stays_only_where_asked():
    # for the normaliser, which reads it as a unit ("four point eight stars"); anywhere else it goes
    assert without_pictographs(["4.8★", "(2k)"], keep_rating_stars=True) == ["4.8★", "(2k)"]
    assert without_pictographs(["rated", "4.5", "⭐️."], keep_rating_stars=True) == ["rated", "4.5", "⭐."]
    assert without_pictographs(["a", "⭐", "place"], keep_rating_stars=True) == ["a", "", "place"]
    assert without_pictographs(["★★★★☆"], keep_rating_stars=True) == [""]
    assert without_pictographs(["4.8★"]) == ["4.8"]


@pytest.mark.parametrize("language, text, said", [
    ("en", "Great choice! 😊 Let's get started 🚀", "Great choice! Let's get started"),
    ("en", "✅ Confirmed, see you at 3pm 👋.", "Confirmed, see you at three p m."),
    ("en", "Press 1️⃣ for sales, it's 30°C ☀️", "Press one for sales, it's thirty degrees Celsius"),
    ("es", "¡Gracias! 🙏 Hasta el lunes 😊", "¡Gracias! Hasta el lunes"),
    ("fr", "Merci beaucoup 😊 !", "Merci beaucoup !"),  # a language without rules loses them too
])
def test_the_normaliser_leaves_pictographs_unsaid(language, text, said):
    norm = normalize(text, language)
    assert norm.text == said
    assert norm.original_words == text.split()  # word timestamps still align with what was written
    assert has_speech(norm.text)


def test_with_normalisation_off_the_text_is_as_written():
    assert normalize("Hi 😊", "en", "off").text == "Hi 😊"


def test_a_word_left_out_is_no_noun_for_the_rule_before_it(caplog):
    # "1/3 ✅": the emoji's token is empty; the fraction must not read it as the noun it counts
    caplog.set_level("DEBUG", logger="api.text.normalization")
    assert normalize("Añade 1/3 ✅", "es").text == "Añade un tercio"
    assert not [r for r in caplog.records if "failed" in r.getMessage()]
