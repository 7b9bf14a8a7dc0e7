"""Sample encodings of the Cartesia ``output_format.encoding`` field: float32 PCM <-> bytes.

All encoders take ``pcm  # [T] float32, nominal range [-1, 1]`` (mono; any float dtype is
accepted and converted) and return little-endian bytes, ``sample_width`` bytes per sample:

- ``pcm_f32le``: IEEE-754 float32, values in [-1, 1] passed through unchanged; values past
  +-1 are clipped to +-1 (as every other encoding clips: resampling overshoots near full-scale
  peaks, and a client converting with ``int16(x * 32767)`` would wrap), NaN becomes 0 and +-inf
  +-1, so a client never receives non-finite or out-of-range samples.
- ``pcm_s16le``: ``round(x * 32768)`` clipped to [-32768, 32767], so every int16 value survives
  a s16 -> f32 -> s16 round trip exactly (``decode`` divides by 32768).
- ``pcm_mulaw`` / ``pcm_alaw``: ITU-T G.711 (mu-law: 14-bit magnitude, bias 0x84/4 = 33, 8
  segments, code bits inverted; A-law: 13-bit magnitude, 8 segments, even bits inverted with 0x55),
  applied to the ``pcm_s16le`` value of each sample. Encoding is a lookup in a 65536-entry table
  built once at import from the segment definition; decoding is a 256-entry table.

Worked example: ``encode_pcm(np.array([0.5, -1.0], np.float32), AudioEncoding.PCM_S16LE)`` is
``b"\\x00\\x40\\x00\\x80"`` (16384, -32768).
"""

from __future__ import annotations

import enum

import numpy as np

from api.audio.errors import UnsupportedEncodingError

__all__ = [
    "AudioEncoding",
    "alaw_to_linear",
    "decode_pcm",
    "encode_pcm",
    "float_to_s16",
    "linear_to_alaw",
    "linear_to_mulaw",
    "mulaw_to_linear",
    "s16_to_float",
]

_S16_SCALE = 32768.0


class AudioEncoding(str, enum.Enum):
    """The four PCM encodings of the protocol; the value is the wire string."""

    PCM_F32LE = "pcm_f32le"
    PCM_S16LE = "pcm_s16le"
    PCM_MULAW = "pcm_mulaw"
    PCM_ALAW = "pcm_alaw"

    @property
    def sample_width(self) -> int:
        """Bytes per (mono) sample."""
        return _SAMPLE_WIDTH[self]

    @classmethod
    def parse(cls, value: object) -> "AudioEncoding":
        """Wire string -> member; raises UnsupportedEncodingError naming the bad value."""
        return parse_wire_enum(cls, value, "output_format.encoding", UnsupportedEncodingError)


def parse_wire_enum(cls, value: object, field: str, error: type):
    """A wire string -> member of the str-enum ``cls``; ``error(field, message)`` names the bad value."""
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except ValueError:
        accepted = ", ".join(m.value for m in cls)
        raise error(field, f"unsupported {field} {value!r}; expected one of: {accepted}") from None


_SAMPLE_WIDTH = {
    AudioEncoding.PCM_F32LE: 4,
    AudioEncoding.PCM_S16LE: 2,
    AudioEncoding.PCM_MULAW: 1,
    AudioEncoding.PCM_ALAW: 1,
}


# --- linear <-> float -------------------------------------------------------------------------


def _as_float32(pcm: np.ndarray) -> np.ndarray:
    """Any 1-D array-like -> finite float32 [T] (NaN -> 0, +-inf -> +-1)."""
    x = np.asarray(pcm)
    if x.ndim != 1:
        raise ValueError(f"expected mono PCM of shape [T], got shape {x.shape}")
    x = x.astype(np.float32, copy=False)
    if not np.isfinite(x).all():
        x = np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0)
    return x


def float_to_s16(pcm: np.ndarray) -> np.ndarray:
    """[T] float -> [T] int16: ``round(x * 32768)`` clipped to the int16 range."""
    x = _as_float32(pcm).astype(np.float64) * _S16_SCALE
    return np.clip(np.rint(x), -32768, 32767).astype(np.int16)


def s16_to_float(s16: np.ndarray) -> np.ndarray:
    """[T] int16 -> [T] float32 in [-1, 1): ``s / 32768``."""
    return (np.asarray(s16, dtype=np.int16).astype(np.float32) / np.float32(_S16_SCALE)).astype(
        np.float32
    )


# --- G.711 ------------------------------------------------------------------------------------
# Segment end points (inclusive) of the 8 chords, on the magnitude scale each law works on.
_MULAW_SEG_END = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], dtype=np.int32)
_ALAW_SEG_END = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], dtype=np.int32)
_MULAW_BIAS = 0x84  # 132 on the 16-bit scale, 33 on the 14-bit scale
_MULAW_CLIP = 8159  # largest 14-bit magnitude before the bias takes it past the last chord


def _mulaw_encode_all(s16: np.ndarray) -> np.ndarray:
    """G.711 mu-law of int16 values (vectorised definition; used once to build the table)."""
    v = s16.astype(np.int32) >> 2  # 16-bit -> 14-bit, arithmetic shift (floor)
    negative = v < 0
    mag = np.where(negative, -v, v)
    mag = np.minimum(mag, _MULAW_CLIP) + (_MULAW_BIAS >> 2)
    seg = np.searchsorted(_MULAW_SEG_END, mag, side="left")  # first chord whose end >= mag
    mantissa = (mag >> (seg + 1)) & 0x0F
    code = (seg << 4) | mantissa
    code = np.where(seg >= 8, 0x7F, code)
    mask = np.where(negative, 0x7F, 0xFF)
    return (code ^ mask).astype(np.uint8)


def _mulaw_decode_all(codes: np.ndarray) -> np.ndarray:
    """G.711 mu-law code -> int16 linear value (the centre of the code's interval)."""
    u = (~codes.astype(np.int32)) & 0xFF
    t = ((u & 0x0F) << 3) + _MULAW_BIAS
    t = t << ((u & 0x70) >> 4)
    return np.where(u & 0x80, _MULAW_BIAS - t, t - _MULAW_BIAS).astype(np.int16)


def _alaw_encode_all(s16: np.ndarray) -> np.ndarray:
    """G.711 A-law of int16 values (vectorised definition; used once to build the table)."""
    v = s16.astype(np.int32) >> 3  # 16-bit -> 13-bit
    negative = v < 0
    mag = np.where(negative, -v - 1, v)  # one's-complement magnitude for negatives
    mask = np.where(negative, 0x55, 0xD5)
    seg = np.searchsorted(_ALAW_SEG_END, mag, side="left")
    shift = np.where(seg < 2, 1, seg)
    code = (np.minimum(seg, 7) << 4) | ((mag >> shift) & 0x0F)
    code = np.where(seg >= 8, 0x7F, code)
    return (code ^ mask).astype(np.uint8)


def _alaw_decode_all(codes: np.ndarray) -> np.ndarray:
    """G.711 A-law code -> int16 linear value (the centre of the code's interval)."""
    a = codes.astype(np.int32) ^ 0x55
    t = (a & 0x0F) << 4
    seg = (a & 0x70) >> 4
    t = np.where(seg == 0, t + 8, t + 0x108)
    t = np.where(seg > 1, t << np.maximum(seg - 1, 0), t)
    return np.where(a & 0x80, t, -t).astype(np.int16)


_ALL_S16 = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16)
_ALL_CODES = np.arange(256, dtype=np.int32).astype(np.uint8)
# Indexed by the int16 value's bit pattern (``s16.view(np.uint16)``); 64 KiB each.
_MULAW_ENCODE = np.empty(65536, dtype=np.uint8)
_MULAW_ENCODE[_ALL_S16.view(np.uint16)] = _mulaw_encode_all(_ALL_S16)
_ALAW_ENCODE = np.empty(65536, dtype=np.uint8)
_ALAW_ENCODE[_ALL_S16.view(np.uint16)] = _alaw_encode_all(_ALL_S16)
_MULAW_DECODE = _mulaw_decode_all(_ALL_CODES)
_ALAW_DECODE = _alaw_decode_all(_ALL_CODES)
del _ALL_S16, _ALL_CODES


def linear_to_mulaw(s16: np.ndarray) -> np.ndarray:
    """[T] int16 -> [T] uint8 G.711 mu-law codes."""
    return _MULAW_ENCODE[np.asarray(s16, dtype=np.int16).view(np.uint16)]


def mulaw_to_linear(codes: np.ndarray) -> np.ndarray:
    """[T] uint8 G.711 mu-law codes -> [T] int16."""
    return _MULAW_DECODE[np.asarray(codes, dtype=np.uint8)]


def linear_to_alaw(s16: np.ndarray) -> np.ndarray:
    """[T] int16 -> [T] uint8 G.711 A-law codes."""
    return _ALAW_ENCODE[np.asarray(s16, dtype=np.int16).view(np.uint16)]


def alaw_to_linear(codes: np.ndarray) -> np.ndarray:
    """[T] uint8 G.711 A-law codes -> [T] int16."""
    return _ALAW_DECODE[np.asarray(codes, dtype=np.uint8)]


# --- public byte-level API --------------------------------------------------------------------


def encode_pcm(pcm: np.ndarray, encoding: AudioEncoding | str) -> bytes:
    """``pcm  # [T] float32 in [-1, 1]`` -> ``T * encoding.sample_width`` bytes."""
    enc = AudioEncoding.parse(encoding)
    if enc is AudioEncoding.PCM_F32LE:
        return np.clip(_as_float32(pcm), -1.0, 1.0).astype("<f4", copy=False).tobytes()
    s16 = float_to_s16(pcm)
    if enc is AudioEncoding.PCM_S16LE:
        return s16.astype("<i2", copy=False).tobytes()
    if enc is AudioEncoding.PCM_MULAW:
        return linear_to_mulaw(s16).tobytes()
    return linear_to_alaw(s16).tobytes()


def decode_pcm(data: bytes, encoding: AudioEncoding | str) -> np.ndarray:
    """Bytes in ``encoding`` -> ``[T] float32`` (the inverse of encode_pcm up to quantisation).

    Raises ValueError when ``len(data)`` is not a multiple of the sample width.
    """
    enc = AudioEncoding.parse(encoding)
    if len(data) % enc.sample_width:
        raise ValueError(
            f"{enc.value} data must be a multiple of {enc.sample_width} bytes, got {len(data)}"
        )
    if enc is AudioEncoding.PCM_F32LE:
        return np.frombuffer(data, dtype="<f4").astype(np.float32)
    if enc is AudioEncoding.PCM_S16LE:
        return s16_to_float(np.frombuffer(data, dtype="<i2"))
    codes = np.frombuffer(data, dtype=np.uint8)
    if enc is AudioEncoding.PCM_MULAW:
        return s16_to_float(mulaw_to_linear(codes))
    return s16_to_float(alaw_to_linear(codes))
