"""Phonemes of spoken words through the real eSpeak NG (the espeakng-loader wheel) in its child
process, and their times shared out of each word's span."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from api.errors import error_body, error_response
from api.segment_timing import timing_events
from api.synthesis import Segment
from api.text import normalize
from api.text.errors import PhonemesUnavailableError, UnsupportedPhonemeLanguageError
import api.text.phonemes
from api.text.espeak import split_ipa
from api.text.espeak_process import EspeakProcess
from api.text.phonemes import Phonemizer, _tile, espeak_voice, phoneme_timestamps, phonemizer, restart_counts
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
    ("bird", "en", ("b", "ɜː", "d")),  # "ɜ" is a vowel outside the tone languages
])
def test_words_read_as_ipa_phonemes(reader, word, language, phonemes):
    assert reader.word(word, language) == phonemes


def test_no_stress_marks_and_no_language_switch_marks(reader):
    # eSpeak writes "ˈ"/"ˌ" and, for Latin text in a language of another script, "(en)" ... "(ru)"
    latin_in_russian = reader.word("hello", "ru")
    assert latin_in_russian and all("(" not in p and "ˈ" not in p and "ˌ" not in p for p in latin_in_russian)
    assert split_ipa("(en)_ˈəʊ_l_a_(cmn)_") == ["əʊ", "l", "a"]
    assert split_ipa("h_ə_l_ˈoʊ w_ˈɜː_l_d") == ["h", "ə", "l", "oʊ", "w", "ɜː", "l", "d"]


@pytest.mark.parametrize("word, language, phonemes", [
    ("你好", "zh", ("n", "i", "χ", "ɑu")),  # eSpeak: n i2 χ ɑu2
    ("中国", "zh-CN", ("ʈʂ", "oŋ", "k", "uo")),  # ts. onɡ5 k uoɜ ("3" prints as "ɜ")
    ("是", "zh", ("ʂ", "ɻ̩")),  # s. i.5
    ("朋友", "zh", ("pʰ", "ə", "ŋ", "j", "iou")),  # ph ...
    ("广东话", "yue", ("ɡ", "w", "oŋ", "d", "uŋ", "w", "aː")),
    ("má", "vi", ("m", "aː")), ("mà", "vi", ("m", "aː")),  # one mouth, two tones
])
def test_tone_languages_give_ipa_without_tone_digits(reader, word, language, phonemes):
    assert reader.word(word, language) == phonemes


def test_a_tone_that_stands_alone_is_dropped_not_kept_as_a_phoneme(reader):
    said = reader.word("Vạ", "yue")  # eSpeak: ... j a t 1 ..., the "1" a phoneme of its own
    assert said[:2] == ("v", "iː") and "1" not in said and "" not in said


@settings(max_examples=40, deadline=None)
@example("Vạ", "yue")  # Cantonese eSpeak spells it letter by letter, with a tone "1" standing alone
@example("mạ Vạ", "yue")
@given(st.text(alphabet=st.sampled_from("你好中国是吃饭日本学生朋友谢广东话唔该ma mà má mả mã mạ Việt สวัสดีขอบคุณ"),
               min_size=1, max_size=8), st.sampled_from(["zh", "yue", "vi", "th"]))
def test_no_tone_language_phoneme_holds_a_digit_or_a_dot(reader, text, language):
    for said in reader.words(text.split(), language):
        assert all(p and not any(ch.isdigit() or ch in ".-" for ch in p) for p in said), said


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


def test_the_voice_is_chosen_only_when_it_changes():
    """Each choice leaks a little inside eSpeak: words read in one language choose its voice once
    (the process counts its choices, which is what recycling it goes by)."""
    process = EspeakProcess()
    try:
        changes = [process.read("en-us", [word], 10).voice_changes for word in ("one", "two", "three")]
        assert changes == [1, 1, 1]
        assert [process.read("es-419", [w], 10).voice_changes for w in ("centro", "ciudad")] == [2, 2]
        danger = process.read("en-us", ["danger"], 10)
        assert danger.phonemes == [("d", "eɪ", "n", "dʒ", "ɚ")] and danger.voice_changes == 3
        assert process.read("xx", ["a"], 10).phonemes is None  # no voice: no reading, and it is still there
        assert process.read("en-us", ["one"], 10).phonemes == [("w", "ʌ", "n")]
    finally:
        process.close()


@pytest.mark.parametrize("language, voice", [
    ("en", "en-us"), ("EN_us", "en-us"), ("en-GB", "en-gb"), ("en-AU", "en-gb"), ("en-IN", "en-gb"),
    ("en-CA", "en-us"),  # eSpeak lists no en-CA; its own fallback would be British
    ("es", "es-419"), ("es-MX", "es-mx"), ("es-AR", "es-419"), ("es-ES", "es"), ("es-419", "es-419"),
    ("pt", "pt-br"), ("pt-BR", "pt-br"), ("pt-PT", "pt-pt"), ("pt-AO", "pt"),
    ("fr-CA", "fr"), ("nl-BE", "nl"), ("zh-Hant-TW", "zh"), ("de", "de"),
    ("tl", None), ("xx", None), ("", None), ("-", None),
])
def test_a_locale_reads_in_its_dialect_else_the_nearest_eSpeak_has(reader, language, voice):
    assert espeak_voice(language, reader.voices) == voice


def test_unlisted_locales_read_in_the_nearest_dialect(reader):
    assert reader.word("centro", "es-AR") == reader.word("centro", "es")  # Latin American, not Castilian
    assert "θ" in reader.word("centro", "es-ES")
    assert reader.word("hello", "en-AU") == reader.word("hello", "en-GB")


def test_languages_espeak_lacks_are_refused_with_their_code(reader):
    assert reader.supports("en") and reader.supports("nl-BE") and reader.supports("EN_us")
    assert reader.supports("ja-JP") and reader.supports("zh-CN")
    assert not reader.supports("tl") and not reader.supports("xx")
    with pytest.raises(UnsupportedPhonemeLanguageError) as info:
        reader.word("kumusta", "tl")
    assert "'tl'" in str(info.value) and "add_phoneme_timestamps" in str(info.value)
    body = error_body(info.value, "req-1")
    assert body["error_code"] == "unsupported_language"
    assert reader.word("danger", "en") == ("d", "eɪ", "n", "dʒ", "ɚ")


def test_a_missing_library_is_phonemes_unavailable():
    with pytest.raises(PhonemesUnavailableError) as info:
        Phonemizer(library_path="/nonexistent/libespeak-ng.so")
    assert "/nonexistent/libespeak-ng.so" in str(info.value)
    assert error_body(info.value, "req-1")["error_code"] == "phonemes_unavailable"
    assert error_response(info.value, "req-1").status_code == 501


def test_a_phonemizer_that_cannot_start_is_not_tried_again_for_a_minute(monkeypatch):
    """Requests asking for phonemes on an install without eSpeak get 501 from a lookup, not each from
    a new attempt to start it (check_timing_request runs on the event loop)."""
    starts: list[int] = []

    def missing(*args, **kwargs):
        starts.append(1)
        return Phonemizer(*args, library_path="/nonexistent/libespeak-ng.so", **kwargs)

    monkeypatch.setattr(api.text.phonemes, "_shared", None)
    monkeypatch.setattr(api.text.phonemes, "_shared_failure", None)
    monkeypatch.setattr(api.text.phonemes, "Phonemizer", missing)
    for _ in range(3):
        with pytest.raises(PhonemesUnavailableError, match="/nonexistent/libespeak-ng.so"):
            phonemizer()
    assert len(starts) == 1
    monkeypatch.setattr(api.text.phonemes, "_RETRY_UNAVAILABLE_S", 0.0)  # a minute later
    with pytest.raises(PhonemesUnavailableError):
        phonemizer()
    assert len(starts) == 2


def test_the_request_check_starts_espeak_off_the_event_loop(reader, monkeypatch):
    """Before eSpeak's process has started, the check of a request that asks for phonemes waits for
    the start on the timing thread; once started, it is a lookup on the event loop."""
    import asyncio

    import api.segment_timing

    threads: list[str] = []

    def recording():
        threads.append(threading.current_thread().name)
        return reader

    monkeypatch.setattr(api.segment_timing, "phonemizer", recording)
    asks = SimpleNamespace(add_phoneme_timestamps=True, normalization=None)
    asyncio.run(api.segment_timing.check_timing_request(asks, "en"))
    assert threads == ["MainThread"]  # started: no thread hop
    monkeypatch.setattr(api.text.phonemes, "_shared", None)
    monkeypatch.setattr(api.text.phonemes, "_shared_failure", None)
    asyncio.run(api.segment_timing.check_timing_request(asks, "en"))
    with pytest.raises(UnsupportedPhonemeLanguageError):
        asyncio.run(api.segment_timing.check_timing_request(asks, "tl"))
    assert threads[1:] and all(name.startswith("gepard-timing") for name in threads[1:])
    asyncio.run(api.segment_timing.check_timing_request(SimpleNamespace(add_phoneme_timestamps=False), "tl"))
    assert len(threads) == 3  # not asked for: not looked at


# --- the process: a crash or a hang of eSpeak costs a restart, never the caller ------------------


@pytest.fixture
def own_reader():
    reader = Phonemizer(request_timeout_s=2.0)
    yield reader
    reader.close()


def test_a_killed_espeak_process_is_replaced_and_the_words_are_read(own_reader):
    own_reader.word("before", "en")
    pid, crashes = own_reader.pid, restart_counts()["crash"]
    os.kill(pid, signal.SIGKILL)
    assert own_reader.words(["danger", "ahead"], "en") == [("d", "eɪ", "n", "dʒ", "ɚ"), ("ɐ", "h", "ɛ", "d")]
    assert own_reader.pid != pid and restart_counts()["crash"] == crashes + 1


def test_a_segment_whose_phonemes_cannot_be_read_keeps_its_words(monkeypatch, caplog):
    """eSpeak's process is gone and a new one does not start (here: its library is gone): the
    segment's word timestamps still go out, its phonemes are left out with a WARNING, no error."""
    import api.segment_timing

    broken = Phonemizer()
    broken._start = ("/nonexistent/libespeak-ng.so", None)  # what a restart will find
    os.kill(broken.pid, signal.SIGKILL)
    monkeypatch.setattr(api.segment_timing, "phonemizer", lambda: broken)
    text = "Hello there."
    segment = Segment(text, normalize(text, "en"))
    pcm = np.random.default_rng(0).standard_normal(22050).astype(np.float32) * 0.1
    req = SimpleNamespace(add_timestamps=True, add_phoneme_timestamps=True, use_normalized_timestamps=False,
                          normalization=None)
    with caplog.at_level("WARNING", logger="api.segment_timing"):
        events = timing_events(segment, [pcm], 22050, 0.0, req, "ctx-1")
    assert [e.to_dict()["type"] for e in events] == ["timestamps"]
    assert any("ctx-1" in r.getMessage() and "/nonexistent/libespeak-ng.so" in r.getMessage() for r in caplog.records)


def test_espeak_complaining_on_stderr_never_stalls_it():
    """eSpeak writes a line to stderr each time it chooses a voice whose dictionary it lacks
    ("kaa"): thousands of such choices (~110 bytes each, past any pipe's buffer) are answered by
    the same process, with no hang."""
    process = EspeakProcess()
    try:
        assert "kaa" in process.voices
        for k in range(1500):
            process.read("kaa" if k % 2 else "en-us", ["salem"], 10)
        assert process.read("en-us", ["danger"], 10).phonemes == [("d", "eɪ", "n", "dʒ", "ɚ")]
        assert process._errors.seek(0, os.SEEK_END) > 65536  # more than a pipe would have held
    finally:
        process.close()


def test_a_signal_to_the_process_group_leaves_espeak_to_the_gateway(own_reader):
    """Ctrl-C or systemd's KillMode=control-group signal every process of the group: the gateway
    drains on them, and its eSpeak process must still answer the streams it drains."""
    pid = own_reader.pid
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        os.kill(pid, sig)
    time.sleep(0.2)
    assert own_reader.word("still", "en") == ("s", "t", "ɪ", "l") and own_reader.pid == pid


def test_a_stuck_espeak_process_is_killed_at_the_deadline_and_replaced(own_reader):
    own_reader.word("before", "en")
    pid, hangs = own_reader.pid, restart_counts()["hang"]
    os.kill(pid, signal.SIGSTOP)  # as if eSpeak looped forever
    t0 = time.monotonic()
    assert own_reader.word("danger", "en") == ("d", "eɪ", "n", "dʒ", "ɚ")
    assert 2.0 <= time.monotonic() - t0 < 10.0
    assert own_reader.pid != pid and restart_counts()["hang"] == hangs + 1
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped, not left stopped


def test_a_word_that_kills_espeak_gets_no_phonemes_and_the_others_are_read(caplog):
    """With eSpeak given whole words (no 32-character pieces), "s'" * 68 (135 characters once its end
    quote is off) really overflows its buffer and the process dies: the caller still gets every other
    word, and the killer is not tried again."""
    reader = Phonemizer(piece=10_000)
    try:
        killer, crashes = "s'" * 68, restart_counts()["crash"]
        with caplog.at_level("WARNING", logger="api.text.phonemes"):
            got = reader.words(["one", killer, "two"], "en")
        assert got == [("w", "ʌ", "n"), (), ("t", "uː")]
        assert restart_counts()["crash"] == crashes + 2  # the batch, then the word alone
        assert any("135 characters" in r.getMessage() and "no phonemes" in r.getMessage() for r in caplog.records)
        assert all(killer not in r.getMessage() for r in caplog.records)  # no transcript in the log
        assert any("buffer overflow" in r.getMessage() or "signal" in r.getMessage() for r in caplog.records)
        pid = reader.pid
        assert reader.words([killer, "three"], "en") == [(), ("θ", "ɹ", "iː")]
        assert reader.pid == pid  # remembered: not tried again
    finally:
        reader.close()


def test_a_call_restarts_espeak_at_most_three_times():
    reader = Phonemizer(piece=10_000)
    try:
        killers = ["s'" * 68, "s'" * 69, "s'" * 70, "s'" * 100]  # each kills eSpeak every time
        crashes = restart_counts()["crash"]
        got = reader.words(killers + ["four"], "en")
        assert restart_counts()["crash"] == crashes + 3
        assert got[:2] == [(), ()] and got[2:] == [(), (), ()]  # the rest waits for another call
        assert reader.word("four", "en") == ("f", "ɔːɹ")  # not remembered as having none
    finally:
        reader.close()


def test_the_process_is_recycled_after_its_voice_changes(caplog):
    reader = Phonemizer(recycle_after=3)
    try:
        recycled = restart_counts()["recycle"]
        first = reader.pid
        for word, language in [("one", "en"), ("centro", "es"), ("two", "en")]:
            reader.word(word, language)
        assert reader.pid != first and restart_counts()["recycle"] == recycled + 1
        assert reader.word("three", "en") == ("θ", "ɹ", "iː") and reader.word("vezes", "pt") == ("v", "e", "z", "y", "s")
    finally:
        reader.close()


def test_closing_ends_the_process():
    reader = Phonemizer()
    pid = reader.pid
    reader.close()
    assert reader.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert reader.word("again", "en") == ("ɐ", "ɡ", "ɛ", "n")  # a later call starts another
    reader.close()


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
    forgetful.close()
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
                          normalization=None)
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
