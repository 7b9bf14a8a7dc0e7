"""Byte-level checks of what the TTS routes return, independent of the gateway's own audio code.

The tiny checkpoint (tests/api/conftest.py) makes every engine request exactly 24 frames of 1024
samples at 22050 Hz, and every route resamples each segment on its own (``AudioSink.end_segment``),
so the audio of ``n`` segments at ``rate`` Hz is exactly ``n * round(24 * 1024 * rate / 22050)``
samples. Containers are parsed here from their specifications, not with api.audio.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

CODEC_RATE_HZ = 22050
SAMPLES_PER_SEGMENT = 24 * 1024  # codec-rate samples of one engine request with the tiny checkpoint
SAMPLE_WIDTH = {"pcm_f32le": 4, "pcm_s16le": 2, "pcm_mulaw": 1, "pcm_alaw": 1}
WAV_FORMAT_TAG = {"pcm_s16le": 1, "pcm_f32le": 3, "pcm_alaw": 6, "pcm_mulaw": 7}
RATES = (8000, 16000, 22050, 24000, 44100, 48000)


def expected_samples(segments: int, rate_hz: int) -> int:
    """Output samples of ``segments`` engine requests at ``rate_hz`` (each segment resampled on its own)."""
    return segments * round(SAMPLES_PER_SEGMENT * rate_hz / CODEC_RATE_HZ)


def expected_bytes(segments: int, encoding: str, rate_hz: int) -> int:
    return expected_samples(segments, rate_hz) * SAMPLE_WIDTH[encoding]


def stretched_samples(segments: int, speed: float, rate_hz: int = CODEC_RATE_HZ) -> int:
    """Output samples of ``segments`` engine requests spoken at ``speed``: each segment's speech is
    stretched to exactly ``round(N / speed)`` codec-rate samples, then resampled on its own."""
    return segments * round(round(SAMPLES_PER_SEGMENT / speed) * rate_hz / CODEC_RATE_HZ)


def spectral_centroid_hz(pcm: np.ndarray, rate_hz: int = CODEC_RATE_HZ) -> float:
    """The power-weighted mean frequency (Welch's PSD): kept by a pitch-preserving stretch, scaled
    by the factor when audio is merely played faster (resampled)."""
    import scipy.signal

    freqs, power = scipy.signal.welch(pcm, rate_hz, nperseg=1024)
    return float((freqs * power).sum() / power.sum())


# --- G.711 reference (the classic Sun/CCITT reference code, as the stdlib's audioop does it) ----------

_SEG_U_END = (0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF)
_SEG_A_END = (0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF)


def _segment(value: int, ends: tuple[int, ...]) -> int:
    return next((i for i, end in enumerate(ends) if value <= end), len(ends))


def _ulaw_encode_one(pcm: int) -> int:
    pcm >>= 2
    mask = 0x7F if pcm < 0 else 0xFF
    pcm = min(-pcm if pcm < 0 else pcm, 8159) + 33
    seg = _segment(pcm, _SEG_U_END)
    return (0x7F ^ mask) if seg >= 8 else (((seg << 4) | ((pcm >> (seg + 1)) & 0xF)) ^ mask)


def _ulaw_decode_one(code: int) -> int:
    code = ~code & 0xFF
    t = (((code & 0x0F) << 3) + 0x84) << ((code & 0x70) >> 4)
    return (0x84 - t) if code & 0x80 else (t - 0x84)


def _alaw_encode_one(pcm: int) -> int:
    pcm >>= 3
    mask = 0xD5 if pcm >= 0 else 0x55
    pcm = pcm if pcm >= 0 else -pcm - 1
    seg = _segment(pcm, _SEG_A_END)
    if seg >= 8:
        return 0x7F ^ mask
    return ((seg << 4) | ((pcm >> (1 if seg < 2 else seg)) & 0xF)) ^ mask


def _alaw_decode_one(code: int) -> int:
    code ^= 0x55
    t, seg = (code & 0x0F) << 4, (code & 0x70) >> 4
    t = t + 8 if seg == 0 else (t + 0x108) << max(seg - 1, 0)
    return t if code & 0x80 else -t


_LIN = np.arange(-32768, 32768)
ULAW_ENCODE = np.array([_ulaw_encode_one(int(x)) for x in _LIN], np.uint8)  # index: s16 + 32768
ALAW_ENCODE = np.array([_alaw_encode_one(int(x)) for x in _LIN], np.uint8)
ULAW_DECODE = np.array([_ulaw_decode_one(c) for c in range(256)], np.int16)  # index: code byte
ALAW_DECODE = np.array([_alaw_decode_one(c) for c in range(256)], np.int16)


def g711_encode(s16: bytes, encoding: str) -> bytes:
    table = ULAW_ENCODE if encoding == "pcm_mulaw" else ALAW_ENCODE
    return table[np.frombuffer(s16, "<i2").astype(np.int32) + 32768].tobytes()


def g711_decode(codes: bytes, encoding: str) -> bytes:
    table = ULAW_DECODE if encoding == "pcm_mulaw" else ALAW_DECODE
    return table[np.frombuffer(codes, np.uint8)].astype("<i2").tobytes()


def decode(data: bytes, encoding: str) -> np.ndarray:
    """Raw samples -> float32 in [-1, 1] (G.711 through the reference decoder above)."""
    if encoding == "pcm_f32le":
        return np.frombuffer(data, "<f4").astype(np.float32)
    if encoding == "pcm_s16le":
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
    return np.frombuffer(g711_decode(data, encoding), "<i2").astype(np.float32) / 32768.0


@dataclass(frozen=True)
class WavInfo:
    format_tag: int
    channels: int
    sample_rate_hz: int
    byte_rate: int
    block_align: int
    bits: int
    riff_size: int
    data_size: int
    data: bytes


def parse_wav(body: bytes) -> WavInfo:
    """Walk the RIFF chunks; the data chunk runs to its size or, for 0xFFFFFFFF, to the end."""
    assert body[:4] == b"RIFF" and body[8:12] == b"WAVE", body[:16]
    riff_size = struct.unpack("<I", body[4:8])[0]
    pos, fmt = 12, None
    while pos + 8 <= len(body):
        cid, size = body[pos:pos + 4], struct.unpack("<I", body[pos + 4:pos + 8])[0]
        if cid == b"fmt ":
            fmt = struct.unpack("<HHIIHH", body[pos + 8:pos + 24])
        if cid == b"data":
            assert fmt is not None, "fmt chunk must come before data"
            start = pos + 8
            data = body[start:] if size == 0xFFFFFFFF else body[start:start + size]
            return WavInfo(*fmt, riff_size=riff_size, data_size=size, data=data)
        pos += 8 + size + (size & 1)
    raise AssertionError("no data chunk")


# MPEG audio layer III frame headers (ISO 11172-3 / 13818-3): bitrates in kbit/s by version.
_MP3_BITRATES = {
    "1": (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    "2": (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


@dataclass(frozen=True)
class Mp3Frame:
    sample_rate_hz: int
    bit_rate_kbps: int
    mono: bool
    length: int
    samples: int


def parse_mp3(body: bytes) -> list[Mp3Frame]:
    """Every frame of a headerless (no ID3) layer III stream; asserts they tile the body exactly."""
    frames, pos = [], 0
    while pos < len(body):
        b1, b2, b3 = body[pos + 1], body[pos + 2], body[pos + 3]
        assert body[pos] == 0xFF and (b1 & 0xE0) == 0xE0, f"no frame sync at byte {pos}"
        version = (b1 >> 3) & 3  # 3: MPEG-1, 2: MPEG-2, 0: MPEG-2.5
        assert (b1 >> 1) & 3 == 1, "not layer III"
        rate = _MP3_RATES[version][(b2 >> 2) & 3]
        kbps = _MP3_BITRATES["1" if version == 3 else "2"][b2 >> 4]
        padding = (b2 >> 1) & 1
        per_frame = 1152 if version == 3 else 576
        length = (144 if version == 3 else 72) * kbps * 1000 // rate + padding
        frames.append(Mp3Frame(rate, kbps, (b3 >> 6) == 3, length, per_frame))
        pos += length
    assert pos == len(body), f"last frame overruns the body ({pos} > {len(body)})"
    return frames
