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
  has it (en-GB, es-ES, pt-PT), else its language's.
- **Times.** A word's span goes to its phonemes by weight: a vowel 1.6, a long one (``ː``) 2.0, a
  consonant 1.0 (vowels carry most of a syllable's length). The phonemes of a word tile its span
  exactly, in order; a word with no span gives its phonemes none (start = end).

eSpeak NG (GPL-3.0-or-later) is loaded at run time from the ``espeakng-loader`` wheel, which bundles
the library and its data for every language (about 20 MB); a system ``libespeak-ng`` is the fallback.
Its state (the current voice) is global to the process, so every call holds one lock, and the voice
is chosen again only when it changes (~60 µs, and a small leak inside eSpeak each time); a word
costs ~15 µs, readings are cached (a segment's words already read cost ~0.1 ms in all), and eSpeak
never sees more than 32 characters at once (longer words crash eSpeak NG 1.52).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Sequence

from api.text.errors import PhonemesUnavailableError, UnsupportedPhonemeLanguageError
from api.text.speech import has_speech
from api.text.timestamps import WordTimestamps

__all__ = [
    "PhonemeTimestamps",
    "Phonemizer",
    "phoneme_timestamps",
    "phonemizer",
]

logger = logging.getLogger(__name__)

# A bare language code speaks as Gepard's voices do (en-US, es-MX, pt-BR, nl-NL).
_DIALECT_OF = {"en": "en-us", "es": "es-419", "pt": "pt-br"}
_STRESS = str.maketrans("", "", "ˈˌ")
_SEPARATOR = "_"
_IPA_MODE = 0x02 | (ord(_SEPARATOR) << 8)  # espeakPHONEMES_IPA, phonemes separated by "_"
_CHARS_UTF8 = 1
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_DONT_EXIT = 0x8000  # a data error returns -1 instead of ending the process
_VOWELS = set("aeiouyɑɐɒæɛɜɝəɚɘɵɞʌɔɪʊʏøœɤɯɨʉɶᵻ")
_VOWEL_WEIGHT, _LONG_VOWEL_WEIGHT, _CONSONANT_WEIGHT = 1.6, 2.0, 1.0
_CACHE_SIZE = 16384
_ESPEAK_LOCK = threading.Lock()  # eSpeak's state is the library's, shared by every Phonemizer
_espeak_voice: Optional[str] = None  # the voice eSpeak is on (under the lock); None: unknown
# eSpeak NG 1.52 overflows buffers on some long words ("s'" * 68, "a." * 193: the process dies);
# fuzzing found no crash in words of at most 40 characters, so it is given at most this many at once
_MAX_PIECE = 32
# symbols (emoji among them), modifier symbols, format and private-use characters, and combining
# enclosing marks (keycaps): nothing Gepard says
_UNSAID_CATEGORIES = frozenset({"So", "Sk", "Cf", "Co", "Me"})


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


class _VoiceProperties(ctypes.Structure):
    """eSpeak's ``espeak_VOICE``: a voice is chosen by its ``languages`` field."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_char_p),
        ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    ]


def _library_paths() -> tuple[str, Optional[str]]:
    """(libespeak-ng, the directory holding ``espeak-ng-data``) from the wheel, else the system's."""
    try:
        import espeakng_loader
    except ImportError:
        found = ctypes.util.find_library("espeak-ng")
        if found is None:
            raise PhonemesUnavailableError(
                "phoneme timestamps need eSpeak NG: install the espeakng-loader wheel (./run.sh setup does) "
                "or the system's libespeak-ng"
            ) from None
        return found, None
    return espeakng_loader.get_library_path(), os.path.dirname(espeakng_loader.get_data_path())


class Phonemizer:
    """Words to IPA phonemes through eSpeak NG (see the module docstring)."""

    def __init__(self, library_path: Optional[str] = None, data_dir: Optional[str] = None) -> None:
        if library_path is None:
            library_path, data_dir = _library_paths()
        try:
            lib = ctypes.CDLL(library_path)
        except OSError as exc:
            raise PhonemesUnavailableError(f"eSpeak NG did not load from {library_path}: {exc}") from exc
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetVoiceByProperties.restype = ctypes.c_int
        lib.espeak_SetVoiceByProperties.argtypes = [ctypes.POINTER(_VoiceProperties)]
        lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
        path = data_dir.encode() if data_dir else None
        global _espeak_voice
        with _ESPEAK_LOCK:
            rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, path, _INITIALIZE_DONT_EXIT)
            _espeak_voice = None  # initialising chose eSpeak's default voice
        if rate <= 0:
            raise PhonemesUnavailableError(f"eSpeak NG found no data (library {library_path}, data {data_dir})")
        self._lib = lib
        self._known: dict[str, bool] = {}  # language code -> whether eSpeak has a voice for it
        self._cache: OrderedDict[tuple[str, str], tuple[str, ...]] = OrderedDict()

    @staticmethod
    def voice_for(language: str) -> str:
        """The eSpeak language code a request's language or locale is read with."""
        code = language.strip().lower().replace("_", "-")
        return _DIALECT_OF.get(code, code)

    def supports(self, language: str) -> bool:
        """Whether eSpeak NG has a voice for ``language`` (its locale's, or its language's)."""
        voice = self.voice_for(language)
        known = self._known.get(voice)  # answered before: no wait for the lock (the event loop asks)
        if known is not None:
            return known
        with _ESPEAK_LOCK:
            return self._select(voice)

    def check(self, language: str) -> None:
        """UnsupportedPhonemeLanguageError unless ``supports(language)``."""
        if not self.supports(language):
            raise UnsupportedPhonemeLanguageError(language)

    def word(self, word: str, language: str) -> tuple[str, ...]:
        """The phonemes of one spoken word; () for a word with nothing to say (punctuation only).
        UnsupportedPhonemeLanguageError for a language eSpeak has no voice for."""
        return self.words([word], language)[0]

    def words(self, words: Sequence[str], language: str) -> list[tuple[str, ...]]:
        """The phonemes of each word, as ``word`` gives them, eSpeak's voice chosen once for all."""
        voice = self.voice_for(language)
        texts = [_sayable(w) for w in words]
        out: list[tuple[str, ...]] = []
        selected = False
        with _ESPEAK_LOCK:
            for text in texts:
                key = (voice, text)
                cached = self._cache.get(key) if text else ()
                if cached is not None:
                    if text:
                        self._cache.move_to_end(key)
                    out.append(cached)
                    continue
                if not selected:
                    if not self._select(voice):
                        raise UnsupportedPhonemeLanguageError(language)
                    selected = True
                phonemes = self._read(text)
                self._cache[key] = phonemes
                if len(self._cache) > _CACHE_SIZE:
                    self._cache.popitem(last=False)
                out.append(phonemes)
        return out

    # --- eSpeak calls, under the lock ----------------------------------------------------------

    def _select(self, voice: str) -> bool:
        """Make ``voice`` eSpeak's current one (its locale's, else its language's); False if it has
        neither. Only a change calls eSpeak: each choice leaks ~1.3 KB in it (a copy of the voice
        queued for audio that phonemisation never reads)."""
        global _espeak_voice
        if _espeak_voice == voice:
            return True
        if self._known.get(voice) is False:
            return False
        candidates = [voice] if "-" not in voice else [voice, voice.split("-")[0]]
        for code in candidates:
            props = _VoiceProperties(languages=code.encode())
            if self._lib.espeak_SetVoiceByProperties(ctypes.byref(props)) == 0:
                self._known[voice] = True
                _espeak_voice = voice
                return True
        self._known[voice] = False
        _espeak_voice = None  # a failed choice may leave eSpeak on some other voice
        return False

    def _read(self, text: str) -> tuple[str, ...]:
        out: list[str] = []
        for start in range(0, len(text), _MAX_PIECE):  # a longer word in pieces (see _MAX_PIECE)
            out.extend(self._read_piece(text[start:start + _MAX_PIECE]))
        return tuple(out)

    def _read_piece(self, text: str) -> list[str]:
        # a lone surrogate (JSON allows "\ud800") has no UTF-8 form and no sound: left out
        buffer = ctypes.create_string_buffer(text.encode("utf-8", errors="ignore"))
        cursor = ctypes.c_void_p(ctypes.addressof(buffer))
        out: list[str] = []
        while cursor.value:  # one clause a call; eSpeak moves the cursor on, to NULL at the end
            clause = self._lib.espeak_TextToPhonemes(ctypes.byref(cursor), _CHARS_UTF8, _IPA_MODE)
            if clause:
                out.extend(_split(clause.decode("utf-8", errors="replace")))
        return out


def _split(ipa: str) -> list[str]:
    """eSpeak's "h_ə_l_ˈoʊ w_ˈɜː_l_d" -> h, ə, l, oʊ, w, ɜː, l, d (no stress, no "(en)" marks)."""
    phonemes = []
    for item in ipa.replace(" ", _SEPARATOR).split(_SEPARATOR):
        while "(" in item and ")" in item:  # a language switch: "(en)" before a foreign word
            start = item.index("(")
            item = item[:start] + item[item.index(")", start) + 1:]
        item = item.translate(_STRESS).strip()
        if item:
            phonemes.append(item)
    return phonemes


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


@lru_cache(maxsize=1)
def phonemizer() -> Phonemizer:
    """The process's phonemizer, loaded at its first use (PhonemesUnavailableError if it cannot be)."""
    reader = Phonemizer()
    logger.info("phonemes: eSpeak NG loaded")
    return reader
