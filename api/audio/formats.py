"""``OutputFormat``: the validated ``output_format`` of a TTS request (container, encoding, rate).

Accepted values (protocol section 3.3):

- container: ``raw`` | ``wav`` | ``mp3``
- encoding (raw/wav only; ignored for mp3): ``pcm_f32le`` | ``pcm_s16le`` | ``pcm_mulaw`` | ``pcm_alaw``
- sample_rate: 8000, 16000, 22050, 24000, 44100, 48000 (Hz)
- bit_rate (mp3 only; ignored otherwise): 32000, 64000, 96000, 128000, 192000 (bit/s). The SDK
  types require it for mp3; a missing one is tolerated and defaults to 128000.

Invalid values raise an ``AudioFormatError`` subclass whose message names the field and the bad
value, e.g. ``unsupported output_format.sample_rate 11025; expected one of: 8000, 16000, ...``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from api.audio.encoding import AudioEncoding, parse_wire_enum
from api.audio.errors import (
    UnsupportedBitRateError,
    UnsupportedContainerError,
    UnsupportedEncodingError,
    UnsupportedSampleRateError,
)

__all__ = [
    "DEFAULT_MP3_BIT_RATE_BPS",
    "SUPPORTED_BIT_RATES_BPS",
    "SUPPORTED_SAMPLE_RATES_HZ",
    "Container",
    "OutputFormat",
]

SUPPORTED_SAMPLE_RATES_HZ: tuple[int, ...] = (8000, 16000, 22050, 24000, 44100, 48000)
SUPPORTED_BIT_RATES_BPS: tuple[int, ...] = (32000, 64000, 96000, 128000, 192000)
DEFAULT_MP3_BIT_RATE_BPS = 128000


class Container(str, enum.Enum):
    """``output_format.container``; the value is the wire string."""

    RAW = "raw"
    WAV = "wav"
    MP3 = "mp3"

    @classmethod
    def parse(cls, value: object) -> "Container":
        return parse_wire_enum(cls, value, "output_format.container", UnsupportedContainerError)


_MEDIA_TYPES = {
    Container.RAW: "application/octet-stream",
    Container.WAV: "audio/wav",
    Container.MP3: "audio/mpeg",
}


def _as_int(value: object) -> Optional[int]:
    """Integral int/float -> int; anything else (bool, str, 44100.5) -> None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _check_choice(value: object, accepted: tuple[int, ...], field: str, error: type) -> int:
    as_int = _as_int(value)
    if as_int is None or as_int not in accepted:
        choices = ", ".join(str(a) for a in accepted)
        raise error(field, f"unsupported {field} {value!r}; expected one of: {choices}")
    return as_int


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """A validated output format.

    encoding is None exactly when container is MP3; bit_rate_bps is set exactly when container
    is MP3. Build it from wire values with ``OutputFormat.parse(...)``; the constructor validates
    too (so an invalid instance cannot exist).
    """

    container: Container
    encoding: Optional[AudioEncoding]
    sample_rate_hz: int
    bit_rate_bps: Optional[int] = None

    def __post_init__(self) -> None:
        if not isinstance(self.container, Container):
            raise UnsupportedContainerError(
                "output_format.container",
                f"container must be a Container, got {self.container!r}",
            )
        _check_choice(
            self.sample_rate_hz,
            SUPPORTED_SAMPLE_RATES_HZ,
            "output_format.sample_rate",
            UnsupportedSampleRateError,
        )
        if self.container is Container.MP3:
            if self.encoding is not None:
                raise UnsupportedEncodingError(
                    "output_format.encoding", "mp3 output has no encoding; pass encoding=None"
                )
            _check_choice(
                self.bit_rate_bps,
                SUPPORTED_BIT_RATES_BPS,
                "output_format.bit_rate",
                UnsupportedBitRateError,
            )
        else:
            if not isinstance(self.encoding, AudioEncoding):
                raise UnsupportedEncodingError(
                    "output_format.encoding",
                    f"output_format.encoding is required for container {self.container.value!r}",
                )
            if self.bit_rate_bps is not None:
                raise UnsupportedBitRateError(
                    "output_format.bit_rate",
                    f"bit_rate applies to mp3 only, not to container {self.container.value!r}",
                )

    @classmethod
    def parse(
        cls,
        container: object,
        encoding: object = None,
        sample_rate: object = None,
        bit_rate: object = None,
    ) -> "OutputFormat":
        """Wire values -> OutputFormat, leniently: mp3 ignores ``encoding``, raw/wav ignore
        ``bit_rate``, and a missing mp3 ``bit_rate`` means 128000. Raises AudioFormatError."""
        kind = Container.parse(container)
        if sample_rate is None:
            raise UnsupportedSampleRateError(
                "output_format.sample_rate", "output_format.sample_rate is required"
            )
        rate = _check_choice(
            sample_rate, SUPPORTED_SAMPLE_RATES_HZ, "output_format.sample_rate",
            UnsupportedSampleRateError,
        )
        if kind is Container.MP3:
            bits = DEFAULT_MP3_BIT_RATE_BPS if bit_rate is None else bit_rate
            bits = _check_choice(
                bits, SUPPORTED_BIT_RATES_BPS, "output_format.bit_rate", UnsupportedBitRateError
            )
            return cls(kind, None, rate, bits)
        if encoding is None:
            raise UnsupportedEncodingError(
                "output_format.encoding",
                f"output_format.encoding is required for container {kind.value!r}",
            )
        return cls(kind, AudioEncoding.parse(encoding), rate, None)

    @property
    def media_type(self) -> str:
        """HTTP Content-Type for a /tts/bytes body in this format."""
        return _MEDIA_TYPES[self.container]

    @property
    def bytes_per_sample(self) -> Optional[int]:
        """Bytes per sample for raw/wav; None for mp3 (compressed)."""
        return None if self.encoding is None else self.encoding.sample_width
