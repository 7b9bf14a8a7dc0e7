"""Reference clips for cloning: bytes of a wav/flac/ogg/mp3 upload -> mono float32 @ 22.05 kHz.

    pcm = load_reference_clip(data, filename="me.mp3", content_type="audio/mpeg")
    # pcm: [N] float32 in [-1, 1] @ 22050 Hz, N <= 15 s * 22050

Steps: size limit -> format sniffed from the first bytes (the declared filename / content type
only decide between "corrupt" and "unsupported" when the bytes match nothing) -> the header's
rate, channels and length checked against the decode bounds -> decode with libsndfile (via
soundfile; libsndfile >= 1.1 reads MPEG audio, so mp3 needs nothing else) of only the first
``max_ref_seconds`` -> mix to mono -> too-short and silence checks -> resample with soxr ("HQ")
to ``target_rate``.

libsndfile reads the upload in a child process (voices/clip_decoder.py, ~0.1 s to start): it is C
parsing a client's bytes, and a crash there must cost that clip a 400 ``invalid_clip``, never the
gateway. A decode that takes longer than ``DECODE_TIMEOUT_S`` is killed and refused the same way.

Decode bounds. A few KB of FLAC can declare minutes of 655,350 Hz x 8-channel silence, which
decodes to hundreds of MB (the byte limit says nothing about that). So before any sample is
decoded, the header must declare at most ``MAX_SAMPLE_RATE_HZ`` (192 kHz) and ``MAX_CHANNELS`` (8),
and the frames that would be kept (the first ``max_ref_seconds``, or all of them when that is 0)
times the channels must stay within ``MAX_DECODED_SAMPLES`` (5,760,000: 60 s of 48 kHz stereo,
23 MB of float32); otherwise the clip is refused with a 400 naming the limit. Only those frames
are read.

Silence: a clip is rejected when the RMS level of the kept audio is below
``SILENCE_THRESHOLD_DBFS`` = -60 dBFS (RMS relative to a full-scale sine's peak of 1.0). Speech
recorded at ordinary levels sits around -35..-15 dBFS RMS and a quiet room's noise floor around
-60..-80 dBFS, so a clip below -60 dBFS carries no usable voice (digital silence is -inf).

All work here is CPU-bound and blocking: call it in a worker thread (voices/cloning.py runs it on
the clone executor). ``check``, when given, is called between the steps (before the decode, before
the resample) and may raise to stop a clip nobody waits for any more.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import threading
from typing import Callable, Optional

import numpy as np
import soxr

from voices import clip_decoder

from voices.errors import (
    ClipSilentError,
    ClipTooLargeError,
    ClipTooShortError,
    CorruptClipError,
    InvalidClipError,
    UnsupportedAudioFormatError,
    VoiceCloningError,
)

logger = logging.getLogger(__name__)

TARGET_RATE_HZ = 22050
DEFAULT_MAX_BYTES = 20_000_000
DEFAULT_MAX_REF_SECONDS = 15.0
DEFAULT_MIN_SECONDS = 3.0
SILENCE_THRESHOLD_DBFS = -60.0
SUPPORTED_FORMATS = ("wav", "flac", "ogg", "mp3")
#: Decode bounds, checked on the header before decoding (module docstring).
MAX_SAMPLE_RATE_HZ = 192_000
MAX_CHANNELS = 8
MAX_DECODED_SAMPLES = 48_000 * 2 * 60
#: Seconds the decoder process may take for one clip (60 s of 48 kHz stereo MP3 takes ~1 s here).
DECODE_TIMEOUT_S = 30.0

_EXTENSIONS = {
    ".wav": "wav", ".wave": "wav", ".flac": "flac", ".ogg": "ogg", ".oga": "ogg", ".opus": "ogg",
    ".mp3": "mp3",
}
_CONTENT_TYPES = {
    "audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/vnd.wave": "wav",
    "audio/flac": "flac", "audio/x-flac": "flac",
    "audio/ogg": "ogg", "application/ogg": "ogg", "audio/opus": "ogg", "audio/vorbis": "ogg",
    "audio/mpeg": "mp3", "audio/mp3": "mp3", "audio/mpeg3": "mp3", "audio/x-mpeg-3": "mp3",
}


class ClipDecodesTooLargeError(ClipTooLargeError):
    """The clip's header declares more samples to decode than MAX_DECODED_SAMPLES (400
    ``clip_too_large``, like a clip with too many bytes)."""

    def __init__(self, name: str, frames: int, channels: int, rate_hz: int, max_samples: int) -> None:
        samples = frames * channels
        InvalidClipError.__init__(
            self,
            f"reference clip {name} would decode to {samples:,} samples ({frames / rate_hz:.1f} s kept x "
            f"{channels} channels at {rate_hz} Hz); at most {max_samples:,} samples are decoded (60 s of "
            "48 kHz stereo): send fewer channels, a lower sample rate or a shorter clip",
        )
        self.size_bytes = samples * 4  # as float32, the unit ClipTooLargeError counts in
        self.max_bytes = max_samples * 4
        self.samples = samples
        self.max_samples = max_samples


def sniff_format(data: bytes) -> Optional[str]:
    """The container named by the first bytes: "wav", "flac", "ogg", "mp3", or None."""
    head = data[:16]
    if len(head) >= 12 and head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:3] == b"ID3":
        return "mp3"
    # MPEG audio frame sync: 11 set bits, then version, then layer != 00 (00 is AAC in ADTS)
    if len(head) >= 2 and head[0] == 0xFF and (head[1] & 0xE0) == 0xE0 and (head[1] >> 1) & 0x3:
        return "mp3"
    return None


def declared_format(filename: Optional[str], content_type: Optional[str]) -> tuple[Optional[str], str]:
    """(supported format the upload claims to be or None, a description of the claim)."""
    ctype = (content_type or "").split(";")[0].strip().lower()
    ext = os.path.splitext(filename or "")[1].lower()
    claim = _CONTENT_TYPES.get(ctype) or _EXTENSIONS.get(ext)
    parts = []
    if ctype and ctype != "application/octet-stream":
        parts.append(f"content type {ctype!r}")
    if ext:
        parts.append(f"extension {ext!r}")
    return claim, (" and ".join(parts) or "no content type or extension")


def load_reference_clip(
    data: bytes,
    *,
    filename: Optional[str] = None,
    content_type: Optional[str] = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_ref_seconds: float = DEFAULT_MAX_REF_SECONDS,
    min_seconds: float = DEFAULT_MIN_SECONDS,
    target_rate: int = TARGET_RATE_HZ,
    silence_threshold_dbfs: float = SILENCE_THRESHOLD_DBFS,
    check: Optional[Callable[[], None]] = None,
) -> np.ndarray:
    """Decode an uploaded reference clip to mono float32 [N] @ ``target_rate`` Hz.

    Keeps the first ``max_ref_seconds`` (0 keeps everything). Raises ClipTooLargeError,
    UnsupportedAudioFormatError, CorruptClipError, ClipTooShortError or ClipSilentError, or what
    ``check`` raises (called before the decode and before the resample).
    """
    check = check or _go_on
    if max_ref_seconds and max_ref_seconds < min_seconds:
        raise ValueError(f"max_ref_seconds ({max_ref_seconds}) must be 0 or >= min_seconds ({min_seconds})")
    name = repr(filename) if filename else "upload"
    # 1) size, before any decoding
    if len(data) > max_bytes:
        raise ClipTooLargeError(len(data), max_bytes)
    if not data:
        raise CorruptClipError(f"reference clip {name} is empty (0 bytes)")
    # 2) format: the bytes decide; the claim only explains a mismatch
    fmt = sniff_format(data)
    if fmt is None:
        claim, described = declared_format(filename, content_type)
        if claim is not None:
            raise CorruptClipError(
                f"reference clip {name} is declared as {claim} ({described}) but its bytes are not "
                f"a {claim} stream (they start with {data[:8].hex(' ')})"
            )
        raise UnsupportedAudioFormatError(
            f"reference clip {name} has an unsupported audio format ({described}; bytes start with "
            f"{data[:8].hex(' ')}); supported formats: {', '.join(SUPPORTED_FORMATS)}"
        )
    # 3) decode at most max_ref_seconds
    check()
    pcm, rate_hz = _decode(data, fmt, name, max_ref_seconds)  # [frames, channels] float32
    # 4) mono
    mono = pcm.mean(axis=1, dtype=np.float64).astype(np.float32) if pcm.shape[1] > 1 else pcm[:, 0]
    if not np.isfinite(mono).all():
        raise CorruptClipError(f"reference clip {name} decodes to non-finite samples")
    # 5) duration and level
    duration_s = mono.shape[0] / rate_hz
    if duration_s < min_seconds:
        raise ClipTooShortError(duration_s, min_seconds)
    rms = float(np.sqrt(np.mean(np.square(mono, dtype=np.float64))))
    level_dbfs = 20.0 * math.log10(rms) if rms > 0 else float("-inf")
    if level_dbfs < silence_threshold_dbfs:
        raise ClipSilentError(level_dbfs, silence_threshold_dbfs)
    # 6) resample: [N_in] @ rate_hz -> [N_out] @ target_rate
    check()
    if rate_hz != target_rate:
        mono = soxr.resample(mono, rate_hz, target_rate, quality="HQ").astype(np.float32, copy=False)
    if max_ref_seconds:
        mono = mono[: int(round(max_ref_seconds * target_rate))]
    logger.debug("reference clip %s: %s %d Hz, %.2f s kept, %.1f dBFS", name, fmt, rate_hz, duration_s, level_dbfs)
    return np.ascontiguousarray(np.clip(mono, -1.0, 1.0), dtype=np.float32)


def _go_on() -> None:
    """The default ``check``: nothing stops a decode."""


def _frames_to_decode(name: str, rate_hz: int, channels: int, declared_frames: int, max_ref_seconds: float) -> int:
    """How many frames to read, after checking the header against the decode bounds (module
    docstring); raises before anything is decoded."""
    if rate_hz <= 0 or channels <= 0:
        raise CorruptClipError(f"reference clip {name} declares {rate_hz} Hz, {channels} channels")
    if rate_hz > MAX_SAMPLE_RATE_HZ or channels > MAX_CHANNELS:
        raise UnsupportedAudioFormatError(
            f"reference clip {name} is {rate_hz} Hz with {channels} channels; at most {MAX_SAMPLE_RATE_HZ} Hz "
            f"and {MAX_CHANNELS} channels are accepted (a voice needs no more than 48 kHz mono)"
        )
    frames = max(int(declared_frames), 0)
    if max_ref_seconds:
        wanted = int(math.ceil(max_ref_seconds * rate_hz))
        frames = min(frames, wanted) if frames else wanted  # unknown length: read at most ``wanted``
    if frames * channels > MAX_DECODED_SAMPLES:
        raise ClipDecodesTooLargeError(name, frames, channels, rate_hz, MAX_DECODED_SAMPLES)
    return frames


#: The decoder process's program (a test points it at one that crashes).
DECODER_SCRIPT = clip_decoder.__file__


def _decode(data: bytes, fmt: str, name: str, max_ref_seconds: float) -> tuple[np.ndarray, int]:
    """libsndfile decode of the first ``max_ref_seconds`` (0: all) -> ([frames, ch] float32, rate),
    in a decoder process (voices/clip_decoder.py). The header is checked against the decode bounds
    before anything is decoded (``_frames_to_decode``)."""
    cannot = f"reference clip {name} looks like {fmt} but cannot be decoded"
    timeout_s = DECODE_TIMEOUT_S
    # its stderr goes to a file, read only for the log line of a failure ("*** buffer overflow
    # detected ***"): a pipe nobody reads could fill and stall it
    errors = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen([sys.executable, "-P", DECODER_SCRIPT], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errors, close_fds=True)
    except OSError as exc:
        errors.close()
        raise VoiceCloningError(f"the clip decoder process did not start: {exc}") from exc
    timed_out = threading.Event()

    def kill() -> None:  # a decode that never ends is killed
        timed_out.set()
        proc.kill()

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(len(data).to_bytes(clip_decoder.LENGTH_BYTES, "big") + data)
        proc.stdin.flush()
        header = _decoder_line(proc)
        if "error" in header:
            raise CorruptClipError(f"{cannot}: {header['error']}")
        rate_hz = int(header["rate"])
        frames = _frames_to_decode(name, rate_hz, int(header["channels"]), int(header["frames"]), max_ref_seconds)
        proc.stdin.write(f"{frames}\n".encode())
        proc.stdin.close()
        body = _decoder_line(proc)
        if "error" in body:
            raise CorruptClipError(f"{cannot}: {body['error']}")
        channels, read = int(header["channels"]), int(body["frames"])
        if not 0 <= read <= frames:
            raise ValueError(f"the decoder read {read} frames of the {frames} asked for")
        samples = proc.stdout.read(read * channels * 4)
        if len(samples) != read * channels * 4:
            raise OSError("the decoder's samples were cut short")
    except InvalidClipError:
        raise  # the header is out of the decode bounds, or libsndfile refused the bytes
    except (OSError, ValueError, KeyError) as exc:  # it ended (crash, kill) or spoke nonsense
        code = proc.wait()
        killed = timed_out.is_set()
        errors.seek(0)
        said = errors.read().decode("utf-8", errors="replace").strip().splitlines()
        logger.warning("clip decoder %s on reference clip %s (%s, %d bytes): %s%s",
                       "timed out" if killed else f"ended with {code}", name, fmt, len(data), exc,
                       f" ({said[-1][:200]})" if said else "")
        if killed:
            raise CorruptClipError(f"{cannot}: decoding took longer than {timeout_s:g} s") from None
        raise CorruptClipError(f"{cannot}: the decoder failed on it") from None
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, errors):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
    pcm = np.frombuffer(samples, dtype=np.float32).reshape(read, channels)
    if pcm.shape[0] == 0:
        raise CorruptClipError(f"reference clip {name} is a {fmt} file with no audio frames")
    return pcm, rate_hz


def _decoder_line(proc: subprocess.Popen) -> dict:
    """One JSON line from the decoder process; OSError when it ended without one."""
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line:
        raise OSError("the decoder ended without answering")
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError(f"the decoder answered {line[:80]!r}")
    return message
