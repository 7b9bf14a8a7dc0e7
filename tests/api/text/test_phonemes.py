"""Phonemes of spoken words through the real eSpeak NG (the espeakng-loader wheel), and their times
shared out of each word's span."""

from __future__ import annotations

import threading
from collections import OrderedDict

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.errors import error_body, error_response
from api.segment_timing import timing_events
from api.synthesis import Segment
from api.text import normalize
from api.text.errors import PhonemesUnavailableError, UnsupportedPhonemeLanguageError
from api.text.phonemes import Phonemizer, _split, _tile, phoneme_timestamps, phonemizer
from api.text.timestamps import WordTimestamps


@pytest.fixture(scope="module")
def reader() -> Phonemizer:
    return phonemizer()


@pytest.mark.parametrize("word, language, phonemes", [
    ("danger", "en", ("d", "eɪ", "n", "dʒ", "ɚ")),
    ("Hello,", "en-US", ("h", "ə", "l", "oʊ")),  # punctuation at its ends is not read
    ("hello", "en-GB", ("h", "ə", "l", "əʊ")),  # a locale eSpeak has keeps its dialect
    ("don't", "en", ("d", "oʊ", "n", "t")),
    ("centro", "es", ("s", "ɛ", "n", "t", "ɾ", "o")),  # bare es: Latin American, as Gepard's voices
    ("centro", "es-ES", ("θ", "ɛ", "n", "t", "ɾ", "o")),
    ("vezes", "pt", ("v", "e", "z", "y", "s")),  # bare pt: Brazilian
    ("vezes", "pt-PT", ("v", "e", "z", "ɨ", "ʃ")),
    ("kilometer", "nl", ("k", "i", "l", "oː", "m", "eː", "t", "ə", "r")),
    ("bonjour", "fr", ("b", "ɔ̃", "ʒ", "u", "ʁ")),
])
def test_words_read_as_ipa_phonemes(reader, word, language, phonemes):
    assert reader.word(word, language) == phonemes


def test_no_stress_marks_and_no_language_switch_marks(reader):
    # eSpeak writes "ˈ"/"ˌ" and, for Latin text in a language of another script, "(en)" ... "(ru)"
    latin_in_russian = reader.word("hello", "ru")
    assert latin_in_russian and all("(" not in p and "ˈ" not in p and "ˌ" not in p for p in latin_in_russian)
    assert _split("(en)_ˈəʊ_l_a_(cmn)_") == ["əʊ", "l", "a"]
    assert _split("h_ə_l_ˈoʊ w_ˈɜː_l_d") == ["h", "ə", "l", "oʊ", "w", "ɜː", "l", "d"]


def test_a_word_with_nothing_to_say_has_no_phonemes(reader):
    assert reader.word("...", "en") == () and reader.word("—", "en") == ()
    assert reader.word("😀", "en") == ()  # eSpeak would say "grinning face"; Gepard reads no emoji
    assert reader.word("\u200b", "en") == ()
    # an emoji glued to a word is not read by name ("folded hands", "white heavy check mark")
    assert reader.word("Thanks🙏", "en") == reader.word("Thanks", "en")
    assert reader.word("Done✅.", "en") == reader.word("done", "en")


def test_odd_text_is_read_without_failing(reader):
    assert reader.word("\ud800hello", "en") == reader.word("hello", "en")  # a lone surrogate, as JSON allows
    assert reader.word("a\x00b", "en") == ("eɪ",)  # a NUL ends the C string
    assert reader.word("<speak>", "en") == ("s", "p", "iː", "k")  # no SSML: plain text
    assert len(reader.word("x" * 5000, "en")) > 500  # one long word, as long as a transcript may be


@pytest.mark.parametrize("word", ["s'" * 68, "a." * 193, "é." * 200, "abcdefghijklmnopqrstuvwxyz." * 8])
def test_words_that_overflow_espeaks_buffers_are_read_in_pieces(reader, word):
    """eSpeak NG 1.52 ends the process on these (buffer overflow, stack smashing) when given whole:
    a client's text must never reach it so."""
    assert reader.word(word, "en")


class _CountingLib:
    def __init__(self, lib) -> None:
        self._lib, self.voice_choices = lib, 0

    def espeak_SetVoiceByProperties(self, props):
        self.voice_choices += 1
        return self._lib.espeak_SetVoiceByProperties(props)

    def __getattr__(self, name):
        return getattr(self._lib, name)


def test_the_voice_is_chosen_only_when_it_changes():
    """Each choice leaks a little inside eSpeak: words read in one language choose its voice once."""
    reader = Phonemizer()
    reader._cache = _Forgetful()
    counting = reader._lib = _CountingLib(reader._lib)
    for word in ("one", "two", "three", "four"):
        reader.word(word, "en")
    assert counting.voice_choices == 1
    reader.word("centro", "es")
    reader.word("ciudad", "es")
    assert counting.voice_choices == 2
    assert reader.word("danger", "en") == ("d", "eɪ", "n", "dʒ", "ɚ") and counting.voice_choices == 3


def test_languages_espeak_lacks_are_refused_with_their_code(reader):
    assert reader.supports("en") and reader.supports("nl-BE") and reader.supports("EN_us")
    assert not reader.supports("tl") and not reader.supports("xx")
    with pytest.raises(UnsupportedPhonemeLanguageError) as info:
        reader.word("kumusta", "tl")
    assert "'tl'" in str(info.value) and "add_phoneme_timestamps" in str(info.value)
    body = error_body(info.value, "req-1")
    assert body["error_code"] == "unsupported_language"
    # a refused language leaves eSpeak on some other voice: the next word must still be English
    assert reader.word("danger", "en") == ("d", "eɪ", "n", "dʒ", "ɚ")


def test_a_missing_library_is_phonemes_unavailable():
    with pytest.raises(PhonemesUnavailableError) as info:
        Phonemizer(library_path="/nonexistent/libespeak-ng.so")
    assert "/nonexistent/libespeak-ng.so" in str(info.value)
    assert error_body(info.value, "req-1")["error_code"] == "phonemes_unavailable"
    assert error_response(info.value, "req-1").status_code == 501


class _Forgetful(OrderedDict):
    def __setitem__(self, key, value) -> None:  # every reading goes to eSpeak
        pass


def test_threads_reading_several_languages_get_the_serial_answers(reader):
    """eSpeak's voice is global state: words of two languages read at once from several threads must
    each be read in their own language."""
    words = [("hello", "en"), ("centro", "es-ES"), ("vezes", "pt-PT"), ("kilometer", "nl"), ("ciudad", "es")]
    expected = {w: reader.word(*w) for w in words}
    forgetful = Phonemizer()  # a second instance over the same library, which remembers no reading
    forgetful._cache = _Forgetful()
    wrong: list = []

    def work(k: int) -> None:
        for i in range(200):
            w = words[(i + k) % len(words)]
            got = (forgetful if i % 2 else reader).word(*w)
            if got != expected[w]:
                wrong.append((w, got))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_phonemes_tile_their_word_and_vowels_last_longer(reader):
    words = WordTimestamps(("in", "danger", "now"), (0.5, 0.7, 1.4), (0.7, 1.2, 1.4))
    said = phoneme_timestamps(words, "en", reader)
    assert said.phonemes == ("ɪ", "n", "d", "eɪ", "n", "dʒ", "ɚ", "n", "aʊ")
    assert said.start[0] == 0.5 and said.end[1] == 0.7  # "in" fills its span exactly
    assert said.start[2] == 0.7 and said.end[6] == 1.2
    assert said.start[7:] == (1.4, 1.4) and said.end[7:] == (1.4, 1.4)  # a word with no span gives none
    lengths = [e - s for s, e in zip(said.start, said.end)]
    assert lengths[3] == pytest.approx(1.6 * lengths[2])  # the vowel "eɪ" against the consonant "d"


@given(st.lists(st.tuples(st.floats(0, 5), st.floats(0, 2)), min_size=1, max_size=6),
       st.lists(st.sampled_from(["d", "eɪ", "iː", "n", "ɚ", "ʃ", "aʊ"]), min_size=1, max_size=8))
def test_tiles_are_contiguous_ordered_and_exact(spans, phonemes):
    for start, length in spans:
        tiles = _tile(start, start + length, phonemes)
        assert len(tiles) == len(phonemes)
        assert tiles[0][0] == start and tiles[-1][1] == start + length
        assert all(s <= e for s, e in tiles)
        assert all(a[1] == b[0] for a, b in zip(tiles, tiles[1:]))


_ODD = st.sampled_from(["\ud800", "😀", "$5", "3:30pm", "e.g.", "<spell>", "—", "don't", "ß", "日本", "\x00", "1/2"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.text(min_size=1, max_size=12), _ODD), min_size=1, max_size=12),
       st.sampled_from(["en", "es", "pt-PT", "nl", "fr", "ja"]))
def test_any_text_gets_phonemes_inside_its_spoken_words(reader, tokens, language):
    """Whatever the text, the timing events of a segment never fail, and the phonemes lie inside the
    spoken words' spans in order (the normaliser's words, through the route's own function)."""
    text = " ".join(tokens)
    segment = Segment(text, normalize(text, language))
    pcm = np.random.default_rng(0).standard_normal(22050).astype(np.float32) * 0.1
    req = SimpleNamespace(add_timestamps=True, add_phoneme_timestamps=True, use_normalized_timestamps=True,
                          normalization=None, effective_language=language)
    events = timing_events(segment, [pcm], 22050, 2.0, req, "c")
    if not segment.has_speech:
        assert events == []
        return
    words = events[0].to_dict()["word_timestamps"]
    spans = list(zip(words["start"], words["end"]))
    phonemes = [e.to_dict()["phoneme_timestamps"] for e in events[1:]]
    said = [p for w in words["words"] for p in reader.word(w, language)]
    assert [p for ph in phonemes for p in ph["phonemes"]] == said
    times = [(s, e) for ph in phonemes for s, e in zip(ph["start"], ph["end"])]
    assert all(2.0 <= s <= e <= 3.0 + 1e-9 for s, e in times)
    assert [s for s, _ in times] == sorted(s for s, _ in times)
    assert all(spans[0][0] - 1e-9 <= s and e <= spans[-1][1] + 1e-9 for s, e in times)
