"""IPA phonemes of spoken words, and their times, for Cartesia's ``phoneme_timestamps`` events.

Lip-sync (avatars, animated characters) wants the sounds of the speech, not its words. Gepard gives
no alignment of its own, so the phonemes come from the words that were spoken (the normalised
words: "$5" is "five dollars"), read by eSpeak NG, and each word's estimated span
(api/text/timestamps.py) is shared among its phonemes:

- **Phonemes.** eSpeak NG's IPA, one phoneme an item ("danger" -> d, eɪ, n, dʒ, ɚ), as Cartesia
  sends them: stress marks and eSpeak's language-switch marks ("(en)") are left out, length marks
  stay on their vowel ("iː"). The language is the one the segment was read in (the request's
  ``language``/``locale``, or the locale given as ``normalization``); a bare code takes the dialect
  of Gepard's voices (en: en-US, es: Latin American, pt: Brazilian), a locale its own where eSpeak
  lists it (en-GB, es-MX, pt-PT), else the nearest it has (en-AU: British, en-CA: American, es-AR:
  Latin American, es-ES: Castilian, pt-AO: European), else its language's. Choosing a language is
  a lookup in the list eSpeak gave at its start: it never calls eSpeak, so the event loop may ask.
  In tone languages (Chinese, Cantonese, Hakka, Vietnamese, Thai) eSpeak marks each syllable's
  tone with a digit ("i2"; "3" prints as "ɜ") and writes retroflex and aspirated consonants in
  its ASCII notation ("ts.", "ph"): the tones are left out, as lip-sync has no use for them, and
  the consonants are written in IPA ("ʈʂ", "pʰ"), so every item is an IPA phoneme.
- **Times.** A word's span goes to its phonemes by weight: a vowel 1.6, a long one (``ː``) 2.0, a
  consonant 1.0 (vowels carry most of a syllable's length). The phonemes of a word tile its span
  exactly, in order; a word with no span gives its phonemes none (start = end).

eSpeak NG (GPL-3.0-or-later, from the ``espeakng-loader`` wheel, else the system's library) runs in
a child process (api/text/espeak.py): it is C with global state and buffer overflows on odd words,
and a crash there must cost a restart, never the server. When the process dies or does not answer
within 10 s, it is restarted and the words it was reading are read again one at a time, so only a
word that kills it gets no phonemes (and is remembered, so it is not tried again); a call restarts
it at most 3 times. Each voice change leaks ~1.3 KB inside eSpeak, so the process is also replaced
after 20,000 of them. Readings are cached here (a segment's words already read cost ~0.1 ms in
all); the rest cost one round trip (~25 µs) and ~15 µs a word.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional, Sequence

from api.text.errors import PhonemesUnavailableError, UnsupportedPhonemeLanguageError
from api.text.espeak import EspeakUnavailable
from api.text.espeak_process import EspeakProcess, EspeakProcessLost, Reading
from api.text.speech import has_speech
from api.text.timestamps import WordTimestamps

__all__ = [
    "PhonemeTimestamps",
    "Phonemizer",
    "close_phonemizer",
    "phoneme_timestamps",
    "phonemizer",
    "phonemizer_started",
    "restart_counts",
]

logger = logging.getLogger(__name__)

# A bare language code speaks as Gepard's voices do (en-US, es-MX, pt-BR, nl-NL).
_DIALECT_OF = {"en": "en-us", "es": "es-419", "pt": "pt-br"}
# A locale eSpeak does not list reads in the dialect nearest it, not in eSpeak's own fallback (its
# language's first voice: British English for en-CA, Castilian for es-AR).
_BRITISH_ENGLISH_REGIONS = frozenset({"gb", "uk", "ie", "au", "nz", "za", "in", "sg", "hk", "mt", "ke", "ng", "gi"})
_VOWELS = set("aeiouyɑɐɒæɛɜɝəɚɘɵɞʌɔɪʊʏøœɤɯɨʉɶᵻ")
_VOWEL_WEIGHT, _LONG_VOWEL_WEIGHT, _CONSONANT_WEIGHT = 1.6, 2.0, 1.0
_CACHE_SIZE = 16384
_REQUEST_TIMEOUT_S = 10.0  # a segment's words take milliseconds; this is a hang
_RESTARTS_PER_CALL = 3  # a segment of words that each kill eSpeak costs at most this many restarts
_RECYCLE_AFTER = 20_000  # voice changes (~1.3 KB leaked in eSpeak each) before a fresh process
_RETRY_UNAVAILABLE_S = 60.0  # a process that could not start is tried again after this long
# symbols (emoji among them), modifier symbols, format and private-use characters, combining
# enclosing marks (keycaps) and lone surrogates: nothing Gepard says
_UNSAID_CATEGORIES = frozenset({"So", "Sk", "Cf", "Co", "Cs", "Me"})
_RESTARTS = {"crash": 0, "hang": 0, "recycle": 0}  # every Phonemizer's, for /metrics
# eSpeak voices that write tone digits: Mandarin (zh, cmn), Cantonese (yue), Hakka, Vietnamese, Thai
_TONE_LANGUAGES = frozenset({"zh", "cmn", "yue", "hak", "vi", "th"})
_TONE_MARKS = "0123456789-"
# eSpeak's ASCII for Mandarin's retroflexes ("." after a sound) and its apical vowel after them
_RETROFLEX = {"ts.h": "ʈʂʰ", "ts.": "ʈʂ", "s.": "ʂ", "z.": "ʐ", "i.": "ɻ̩"}


@dataclass(frozen=True, slots=True)
class PhonemeTimestamps:
    """Parallel phoneme/start/end lists, seconds from the start of the context's audio."""

    phonemes: tuple[str, ...]
    start: tuple[float, ...]
    end: tuple[float, ...]

    def __post_init__(self) -> None:
        if not len(self.phonemes) == len(self.start) == len(self.end):
            raise ValueError(
                f"phonemes/start/end lengths differ: {len(self.phonemes)}/{len(self.start)}/{len(self.end)}"
            )

    def __len__(self) -> int:
        return len(self.phonemes)


def restart_counts() -> dict[str, int]:
    """eSpeak processes replaced so far in this process, by reason: crash (it died), hang (it did
    not answer in time and was killed), recycle (its leak bound)."""
    return dict(_RESTARTS)


def espeak_voice(language: str, voices: frozenset[str]) -> Optional[str]:
    """The eSpeak language code ``language`` (a request's language or locale) is read with, among
    the codes eSpeak lists (``voices``); None when it has no voice for its language."""
    code = language.strip().lower().replace("_", "-")
    if code in _DIALECT_OF:
        return _DIALECT_OF[code]
    if code in voices:
        return code
    base, *subtags = code.split("-")
    if base not in voices:
        return None
    # the region: the first two-letter or three-digit subtag ("zh-hant-tw": tw, "es-419": 419)
    region = next((t for t in subtags if (len(t) == 2 and t.isalpha()) or (len(t) == 3 and t.isdigit())), "")
    if base == "en":
        return "en-gb" if region in _BRITISH_ENGLISH_REGIONS else "en-us"
    if base == "es":
        return "es" if region == "es" else "es-419"
    if base == "pt":
        return "pt-br" if region in ("br", "") else "pt"
    return base


class Phonemizer:
    """Words to IPA phonemes through eSpeak NG in a child process (see the module docstring)."""

    def __init__(self, library_path: Optional[str] = None, *, piece: Optional[int] = None,
                 request_timeout_s: float = _REQUEST_TIMEOUT_S, recycle_after: int = _RECYCLE_AFTER) -> None:
        self._start = (library_path, piece)
        self._request_timeout_s = request_timeout_s
        self._recycle_after = recycle_after
        self._lock = threading.Lock()  # one request at a time on the pipes; guards the cache
        self._process: Optional[EspeakProcess] = self._spawn()
        self.voices = self._process.voices
        self._cache: OrderedDict[tuple[str, str], tuple[str, ...]] = OrderedDict()

    @property
    def pid(self) -> Optional[int]:
        """The eSpeak process's pid (None while there is none: its restart failed)."""
        process = self._process
        return process.pid if process is not None else None

    def voice_for(self, language: str) -> Optional[str]:
        """The eSpeak language code a request's language or locale is read with (None: no voice)."""
        return espeak_voice(language, self.voices)

    def supports(self, language: str) -> bool:
        """Whether eSpeak NG has a voice for ``language`` (its locale's, or its language's)."""
        return self.voice_for(language) is not None

    def check(self, language: str) -> None:
        """UnsupportedPhonemeLanguageError unless ``supports(language)``."""
        if not self.supports(language):
            raise UnsupportedPhonemeLanguageError(language)

    def word(self, word: str, language: str) -> tuple[str, ...]:
        """The phonemes of one spoken word; () for a word with nothing to say (punctuation only).
        UnsupportedPhonemeLanguageError for a language eSpeak has no voice for."""
        return self.words([word], language)[0]

    def words(self, words: Sequence[str], language: str) -> list[tuple[str, ...]]:
        """The phonemes of each word, as ``word`` gives them, in one request for those not cached.
        PhonemesUnavailableError if the eSpeak process is gone and cannot be started again."""
        voice = self.voice_for(language)
        if voice is None:
            raise UnsupportedPhonemeLanguageError(language)
        texts = [_sayable(w) for w in words]
        with self._lock:
            found = [self._cached(voice, text) for text in texts]
            missing = list(dict.fromkeys(t for t, f in zip(texts, found) if f is None))
            read = self._read(voice, missing) if missing else {}
        return [f if f is not None else read.get(t, ()) for t, f in zip(texts, found)]

    def close(self) -> None:
        """End the eSpeak process (a later call starts another)."""
        with self._lock:
            if self._process is not None:
                self._process.close()
                self._process = None

    # --- under the lock ------------------------------------------------------------------------

    def _cached(self, voice: str, text: str) -> Optional[tuple[str, ...]]:
        if not text:
            return ()
        key = (voice, text)
        phonemes = self._cache.get(key)
        if phonemes is not None:
            self._cache.move_to_end(key)
        return phonemes

    def _remember(self, voice: str, text: str, phonemes: tuple[str, ...]) -> None:
        self._cache[(voice, text)] = phonemes
        if len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)

    def _read(self, voice: str, texts: list[str]) -> dict[str, tuple[str, ...]]:
        """``texts`` read by the process; after a loss, one at a time, so that only a text that kills
        it goes without phonemes (remembered as none, not tried again)."""
        try:
            return self._ask(voice, texts)
        except EspeakProcessLost as lost:
            self._replace(lost.reason, str(lost))
        read: dict[str, tuple[str, ...]] = {}
        restarts_left = _RESTARTS_PER_CALL - 1
        for text in texts:
            if restarts_left == 0:
                break  # the rest get no phonemes this time, and are not remembered so
            try:
                read.update(self._ask(voice, [text]))
            except EspeakProcessLost as lost:
                logger.warning("phonemes: a word of %d characters (language %s) stops eSpeak NG; it gets no "
                               "phonemes", len(text), voice)
                self._remember(voice, text, ())
                read[text] = ()
                self._replace(lost.reason, str(lost))
                restarts_left -= 1
        return read

    def _ask(self, voice: str, texts: list[str]) -> dict[str, tuple[str, ...]]:
        if self._process is None:
            self._process = self._spawn()
        reading = self._process.read(voice, texts, self._request_timeout_s)
        if reading.phonemes is None:  # listed at its start, so only a damaged install gets here
            raise UnsupportedPhonemeLanguageError(voice)
        if voice.split("-")[0] in _TONE_LANGUAGES:
            reading = Reading([tuple(q for q in map(_without_tone, said) if q) for said in reading.phonemes],
                              reading.voice_changes)
        for text, phonemes in zip(texts, reading.phonemes):
            self._remember(voice, text, phonemes)
        if reading.voice_changes >= self._recycle_after:
            try:
                self._replace("recycle", f"chose {reading.voice_changes} voices")
            except PhonemesUnavailableError:
                pass  # these texts are read; the next call tries to start one again
        return dict(zip(texts, reading.phonemes))

    def _replace(self, reason: str, why: str) -> None:
        """A fresh process for one lost (or recycled); PhonemesUnavailableError if it cannot start."""
        _RESTARTS[reason] += 1
        old, self._process = self._process, None
        if old is not None:
            old.close()
        log = logger.info if reason == "recycle" else logger.warning
        log("phonemes: eSpeak NG process replaced (%s): %s", reason, why)
        self._process = self._spawn()

    def _spawn(self) -> EspeakProcess:
        try:
            return EspeakProcess(*self._start)
        except EspeakUnavailable as exc:
            raise PhonemesUnavailableError(str(exc)) from exc


def _sayable(word: str) -> str:
    """What eSpeak is given of a spoken word: the word without punctuation at its ends ("world," ->
    "world"; "don't" stays) and without symbols, emoji and invisible marks ("Thanks🙏" -> "Thanks"),
    or "" for one with no letter or digit: eSpeak would name an emoji ("folded hands") that Gepard
    does not say (api/text/speech.py)."""
    word = "".join(ch for ch in word if unicodedata.category(ch) not in _UNSAID_CATEGORIES)
    start, end = 0, len(word)
    while start < end and unicodedata.category(word[start]).startswith("P"):
        start += 1
    while end > start and unicodedata.category(word[end - 1]).startswith("P"):
        end -= 1
    return word[start:end] if has_speech(word[start:end]) else ""


def _without_tone(phoneme: str) -> str:
    """One phoneme of a tone language in IPA without its tone: "i2" -> "i", "uoɜ" -> "uo" (eSpeak
    prints the digit 3 as "ɜ"), "ts." -> "ʈʂ", "ph" -> "pʰ", "onɡ5" -> "oŋ", "aa6" -> "aː"; a tone
    that stands alone ("1": Cantonese eSpeak spelling "Vạ" letter by letter) -> "", which the caller
    drops: a tone has no mouth shape."""
    item = phoneme.rstrip(_TONE_MARKS)
    if len(item) > 1 and item.endswith("ɜ") and (item[-2] in _VOWELS or item[-2] == "ː"):
        item = item[:-1]
    item = _RETROFLEX.get(item, item).replace("nɡ", "ŋ").replace("aa", "aː")
    if len(item) > 1 and item.endswith("h") and not any(ch in _VOWELS for ch in item):
        item = item[:-1] + "ʰ"  # an aspirated stop or affricate: "ph", "tɕh"
    return item


def _weight(phoneme: str) -> float:
    if not any(ch in _VOWELS for ch in phoneme):
        return _CONSONANT_WEIGHT
    return _LONG_VOWEL_WEIGHT if "ː" in phoneme else _VOWEL_WEIGHT


def _tile(start: float, end: float, phonemes: Sequence[str]) -> list[tuple[float, float]]:
    """Spans for ``phonemes`` that tile [start, end] in order, each by its weight."""
    weights = [_weight(p) for p in phonemes]
    total = sum(weights)
    spans, at, acc = [], start, 0.0
    for i, w in enumerate(weights):
        acc += w
        nxt = end if i == len(weights) - 1 else start + (end - start) * acc / total
        spans.append((at, nxt))
        at = nxt
    return spans


def phoneme_timestamps(words: WordTimestamps, language: str, reader: "Phonemizer") -> PhonemeTimestamps:
    """The phonemes of the spoken ``words`` (their normalised words, with their estimated spans),
    each word's span shared among its phonemes."""
    phonemes: list[str] = []
    starts: list[float] = []
    ends: list[float] = []
    for said, start, end in zip(reader.words(words.words, language), words.start, words.end):
        for phoneme, (s, e) in zip(said, _tile(start, end, said)):
            phonemes.append(phoneme)
            starts.append(s)
            ends.append(e)
    return PhonemeTimestamps(tuple(phonemes), tuple(starts), tuple(ends))


_shared: Optional[Phonemizer] = None
_shared_failure: Optional[tuple[float, str]] = None  # (when, why) the last start failed
_shared_lock = threading.Lock()


def phonemizer() -> Phonemizer:
    """The process's phonemizer, started at its first use. PhonemesUnavailableError if it cannot
    be; that answer is kept for a minute, so requests asking meanwhile do not each try again."""
    global _shared, _shared_failure
    reader = _shared
    if reader is not None:
        return reader
    with _shared_lock:
        if _shared is not None:
            return _shared
        if _shared_failure is not None and time.monotonic() - _shared_failure[0] < _RETRY_UNAVAILABLE_S:
            raise PhonemesUnavailableError(_shared_failure[1])
        try:
            _shared = Phonemizer()
        except PhonemesUnavailableError as exc:
            _shared_failure = (time.monotonic(), str(exc))
            raise
        _shared_failure = None
        logger.info("phonemes: eSpeak NG started (pid %s, %d languages)", _shared.pid, len(_shared.voices))
        return _shared


def phonemizer_started() -> bool:
    """Whether ``phonemizer()`` answers at once: its process started, or its start failed less
    than a minute ago (so it raises without trying again)."""
    failure = _shared_failure
    return _shared is not None or (failure is not None and time.monotonic() - failure[0] < _RETRY_UNAVAILABLE_S)


@atexit.register
def close_phonemizer() -> None:
    """End the shared phonemizer's eSpeak process (the gateway's shutdown, and at exit)."""
    global _shared
    with _shared_lock:
        reader, _shared = _shared, None
    if reader is not None:
        reader.close()
