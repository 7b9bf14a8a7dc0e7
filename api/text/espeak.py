"""eSpeak NG through ctypes, run as a child process of the gateway (api/text/espeak_process.py).

eSpeak NG is C with global state and known buffer overflows (1.52 ends the process on some long
words), so the gateway never loads it: this module runs as ``python -P api/text/espeak.py`` and
answers requests on its stdin/stdout. A crash or a hang then costs a restart of this small process
(~50 ms), never the server and its streams. It imports only the standard library, msgpack and
``espeakng_loader``, so it starts fast and shares nothing with the gateway's packages.

Frames, both ways: a 4-byte big-endian length, then a msgpack map.

    child -> parent, once at start: {"voices": [language codes eSpeak lists]} or {"error": why}
    parent -> child: {"voice": language code, "texts": [text, ...]}
    child -> parent: {"phonemes": [[phoneme, ...] per text], "voice_changes": voices chosen so far}
                     or {"error": why} (no voice for that code)

Phonemes are eSpeak's IPA, one phoneme an item ("danger" -> d, eɪ, n, dʒ, ɚ): stress marks and the
language-switch marks ("(en)") are left out, length marks stay on their vowel ("iː").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import struct
import sys
from typing import Any, BinaryIO, Optional

import msgpack

__all__ = ["HEADER", "MAX_FRAME", "Espeak", "EspeakUnavailable", "decode_frame", "encode_frame", "split_ipa"]

_SEPARATOR = "_"
_IPA_MODE = 0x02 | (ord(_SEPARATOR) << 8)  # espeakPHONEMES_IPA, phonemes separated by "_"
_CHARS_UTF8 = 1
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_DONT_EXIT = 0x8000  # a data error returns -1 instead of ending the process
_STRESS = str.maketrans("", "", "ˈˌ")
# eSpeak NG 1.52 overflows buffers on some long words ("s'" * 68, "a." * 193: the process dies);
# fuzzing found no crash in words of at most 40 characters, so it is given at most this many at once
MAX_PIECE = 32
HEADER = struct.Struct(">I")  # a frame's length, before its msgpack body
MAX_FRAME = 64 << 20  # a frame longer than this is a broken stream, not a request


class EspeakUnavailable(Exception):
    """eSpeak NG could not be loaded (no library, no data)."""


class _Voice(ctypes.Structure):
    """eSpeak's ``espeak_VOICE``. ``languages`` is a list of (priority byte, NUL-terminated code),
    ended by a zero byte, so it is read as a raw pointer."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_void_p),
        ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    ]


def library_paths() -> tuple[str, Optional[str]]:
    """(libespeak-ng, the directory holding ``espeak-ng-data``) from the wheel, else the system's."""
    try:
        import espeakng_loader
    except ImportError:
        found = ctypes.util.find_library("espeak-ng")
        if found is None:
            raise EspeakUnavailable(
                "phoneme timestamps need eSpeak NG: install the espeakng-loader wheel (./run.sh setup does) "
                "or the system's libespeak-ng"
            ) from None
        return found, None
    return espeakng_loader.get_library_path(), os.path.dirname(espeakng_loader.get_data_path())


class Espeak:
    """One process's eSpeak NG: its voices, the current one, and text read as phonemes."""

    def __init__(self, library_path: Optional[str] = None, piece: int = MAX_PIECE) -> None:
        data_dir = None
        if library_path is None:
            library_path, data_dir = library_paths()
        try:
            lib = ctypes.CDLL(library_path)
        except OSError as exc:
            raise EspeakUnavailable(f"eSpeak NG did not load from {library_path}: {exc}") from exc
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_ListVoices.restype = ctypes.POINTER(ctypes.POINTER(_Voice))
        lib.espeak_ListVoices.argtypes = [ctypes.c_void_p]
        lib.espeak_SetVoiceByProperties.restype = ctypes.c_int
        lib.espeak_SetVoiceByProperties.argtypes = [ctypes.POINTER(_Voice)]
        lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
        path = data_dir.encode() if data_dir else None
        if lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, path, _INITIALIZE_DONT_EXIT) <= 0:
            raise EspeakUnavailable(f"eSpeak NG found no data (library {library_path}, data {data_dir})")
        self._lib = lib
        self._piece = piece
        self._voice: Optional[str] = None  # None: initialising chose eSpeak's default voice
        self.voice_changes = 0

    def voices(self) -> list[str]:
        """Every language code some voice of eSpeak lists ("en-us", "es-419", "pt", "zh", ...)."""
        codes: set[str] = set()
        listed = self._lib.espeak_ListVoices(None)
        i = 0
        while listed[i]:
            at = listed[i].contents.languages
            while at and ctypes.string_at(at, 1) != b"\x00":  # (priority byte, code, NUL) ..., 0
                code = ctypes.string_at(at + 1)
                codes.add(code.decode("ascii", errors="replace").lower())
                at += len(code) + 2
            i += 1
        return sorted(codes)

    def select(self, code: str) -> bool:
        """Make eSpeak read in ``code``; False if no voice of it has that language. Only a change
        calls eSpeak: each choice leaks ~1.3 KB inside it (a copy of the voice queued for audio
        that phonemisation never reads)."""
        if self._voice == code:
            return True
        self.voice_changes += 1
        name = ctypes.create_string_buffer(code.encode())  # alive until eSpeak has read it
        if self._lib.espeak_SetVoiceByProperties(ctypes.byref(_Voice(languages=ctypes.addressof(name)))) == 0:
            self._voice = code
            return True
        self._voice = None  # a failed choice may leave eSpeak on some other voice
        return False

    def read(self, text: str) -> list[str]:
        """The phonemes of ``text`` in the current voice, in pieces of at most ``piece`` characters."""
        out: list[str] = []
        for start in range(0, len(text), self._piece):
            out.extend(self._read_piece(text[start:start + self._piece]))
        return out

    def _read_piece(self, text: str) -> list[str]:
        # a lone surrogate (JSON allows "\ud800") has no UTF-8 form and no sound: left out
        buffer = ctypes.create_string_buffer(text.encode("utf-8", errors="ignore"))
        cursor = ctypes.c_void_p(ctypes.addressof(buffer))
        out: list[str] = []
        while cursor.value:  # one clause a call; eSpeak moves the cursor on, to NULL at the end
            clause = self._lib.espeak_TextToPhonemes(ctypes.byref(cursor), _CHARS_UTF8, _IPA_MODE)
            if clause:
                out.extend(split_ipa(clause.decode("utf-8", errors="replace")))
        return out


def split_ipa(ipa: str) -> list[str]:
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


def encode_frame(message: dict[str, Any]) -> bytes:
    body = msgpack.packb(message, use_bin_type=True)
    return HEADER.pack(len(body)) + body


def decode_frame(body: bytes) -> dict[str, Any]:
    message = msgpack.unpackb(body, raw=False)
    if not isinstance(message, dict):
        raise ValueError(f"an eSpeak frame is a map, not {type(message).__name__}")
    return message


def _read_exactly(stream: BinaryIO, size: int) -> Optional[bytes]:
    data = stream.read(size)
    return data if data is not None and len(data) == size else None


def serve(argv: list[str]) -> int:
    """The child's loop: answer frames on stdin until it closes. ``argv``: [library path or "",
    piece length or ""]."""
    # A signal to the whole process group (Ctrl-C in a terminal, systemd's KillMode=control-group)
    # is the gateway's to act on: it drains, and its end closes stdin, which ends this (not
    # PR_SET_PDEATHSIG: that fires when the thread that started it ends, not the gateway)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    library = argv[0] if argv and argv[0] else None
    piece = int(argv[1]) if len(argv) > 1 and argv[1] else MAX_PIECE

    def reply(message: dict[str, Any]) -> None:
        replies.write(encode_frame(message))
        replies.flush()

    try:
        espeak = Espeak(library, piece)
    except EspeakUnavailable as exc:
        reply({"error": str(exc)})
        return 1
    reply({"voices": espeak.voices()})
    while True:
        header = _read_exactly(requests, HEADER.size)
        if header is None:
            return 0  # the gateway closed stdin: its phonemizer closed, or it ended
        (size,) = HEADER.unpack(header)
        body = _read_exactly(requests, size) if size <= MAX_FRAME else None
        if body is None:
            return 2
        request = decode_frame(body)
        code, texts = str(request["voice"]), [str(t) for t in request["texts"]]
        if not espeak.select(code):
            reply({"error": f"eSpeak NG has no voice for {code!r}", "voice_changes": espeak.voice_changes})
            continue
        reply({"phonemes": [espeak.read(t) for t in texts], "voice_changes": espeak.voice_changes})


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
