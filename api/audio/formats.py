"""``OutputFormat``: the validated ``output_format`` of a TTS request (container, encoding, rate).

Accepted values (protocol section 3.3):

- container: ``raw`` | ``wav`` | ``mp3`` | ``ogg`` (``ogg``: a Gepard extension, Opus only)
- encoding (raw/wav only; ignored for mp3): ``pcm_f32le`` | ``pcm_s16le`` | ``pcm_mulaw`` | ``pcm_alaw``,
  and the extension ``opus`` (raw: one Opus packet per chunk; ogg: an Ogg Opus file)
- sample_rate: 8000, 16000, 22050, 24000, 44100, 48000 (Hz); Opus: 8000, 16000, 24000, 48000
- bit_rate (mp3 only; ignored otherwise): 32000, 64000, 96000, 128000, 192000 (bit/s). The SDK
  types require it for mp3; a missing one is tolerated and defaults to 128000. Opus takes any
  bit_rate in [6000, 256000] and defaults to 64000.

Opus is not in Cartesia's API (the SDK's ``output_format`` types have no such container or
encoding): it is an extension here, and every format the SDK types allow parses exactly as before.

Invalid values raise an ``AudioFormatError`` subclass whose message names the field and the bad
value, e.g. ``unsupported output_format.sample_rate 11025; expected one of: 8000, 16000, ...``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from api.audio.encoding import AudioEncoding, parse_wire_enum
from api.audio.opus import DEFAULT_OPUS_BIT_RATE_BPS, OPUS_BIT_RATE_RANGE_BPS, OPUS_SAMPLE_RATES_HZ
from api.audio.errors import (
    UnsupportedBitRateError,
    UnsupportedContainerError,
    UnsupportedEncodingError,
    UnsupportedSampleRateError,
)

__all__ = [
    "DEFAULT_MP3_BIT_RATE_BPS",
    "OPUS_ENCODING",
    "SUPPORTED_BIT_RATES_BPS",
    "SUPPORTED_SAMPLE_RATES_HZ",
    "Container",
    "OutputFormat",
]

SUPPORTED_SAMPLE_RATES_HZ: tuple[int, ...] = (8000, 16000, 22050, 24000, 44100, 48000)
SUPPORTED_BIT_RATES_BPS: tuple[int, ...] = (32000, 64000, 96000, 128000, 192000)
DEFAULT_MP3_BIT_RATE_BPS = 128000
#: The wire ``encoding`` of Opus output (container ``raw``: packets; ``ogg``: a file).
OPUS_ENCODING = "opus"


class Container(str, enum.Enum):
    """``output_format.container``; the value is the wire string."""

    RAW = "raw"
    WAV = "wav"
    MP3 = "mp3"
    OGG = "ogg"  # Ogg Opus (extension)

    @classmethod
    def parse(cls, value: object) -> "Container":
        return parse_wire_enum(cls, value, "output_format.container", UnsupportedContainerError)


_MEDIA_TYPES = {
    Container.RAW: "application/octet-stream",
    Container.WAV: "audio/wav",
    Container.MP3: "audio/mpeg",
    Container.OGG: "audio/ogg",
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

    PCM (raw, wav): ``encoding`` set, ``opus`` false, no bit rate. MP3: no encoding, a bit rate.
    Opus (``opus`` true; container raw = packets, ogg = file): no encoding, a bit rate, an Opus
    rate. Build it from wire values with ``OutputFormat.parse(...)``; the constructor validates
    too (so an invalid instance cannot exist).
    """

    container: Container
    encoding: Optional[AudioEncoding]
    sample_rate_hz: int
    bit_rate_bps: Optional[int] = None
    opus: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.container, Container):
            raise UnsupportedContainerError(
                "output_format.container",
                f"container must be a Container, got {self.container!r}",
            )
        if self.opus or self.container is Container.OGG:
            self._check_opus()
            return
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

    def _check_opus(self) -> None:
        if not self.opus:
            raise UnsupportedEncodingError(
                "output_format.encoding", "container 'ogg' carries Opus only; set encoding 'opus'"
            )
        if self.container not in (Container.RAW, Container.OGG):
            raise UnsupportedContainerError(
                "output_format.container",
                f"opus goes in container 'ogg' (a file) or 'raw' (packets), not {self.container.value!r}",
            )
        if self.encoding is not None:
            raise UnsupportedEncodingError("output_format.encoding", "opus output has no PCM encoding")
        rate = _as_int(self.sample_rate_hz)
        if rate is None or rate not in OPUS_SAMPLE_RATES_HZ:
            rates = ", ".join(str(r) for r in OPUS_SAMPLE_RATES_HZ)
            raise UnsupportedSampleRateError(
                "output_format.sample_rate",
                f"unsupported output_format.sample_rate {self.sample_rate_hz!r} for opus; expected one of: {rates}",
            )
        lo, hi = OPUS_BIT_RATE_RANGE_BPS
        bits = _as_int(self.bit_rate_bps)
        if bits is None or not lo <= bits <= hi:
            raise UnsupportedBitRateError(
                "output_format.bit_rate",
                f"unsupported output_format.bit_rate {self.bit_rate_bps!r} for opus; expected an integer in [{lo}, {hi}]",
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
        opus = kind is Container.OGG or (kind is Container.RAW and encoding == OPUS_ENCODING)
        if sample_rate is None:
            raise UnsupportedSampleRateError(
                "output_format.sample_rate", "output_format.sample_rate is required"
            )
        if opus:
            if encoding is None:
                raise UnsupportedEncodingError(
                    "output_format.encoding", "output_format.encoding is required for container 'ogg' (it is 'opus')"
                )
            if encoding != OPUS_ENCODING:
                raise UnsupportedEncodingError(
                    "output_format.encoding",
                    f"unsupported output_format.encoding {encoding!r} for container 'ogg'; expected one of: opus",
                )
            bits = DEFAULT_OPUS_BIT_RATE_BPS if bit_rate is None else bit_rate
            rate_ = _as_int(sample_rate)
            return cls(kind, None, sample_rate if rate_ is None else rate_, _as_int(bits) or bits, opus=True)  # type: ignore[arg-type]
        if encoding == OPUS_ENCODING and kind is Container.WAV:
            raise UnsupportedEncodingError(
                "output_format.encoding",
                "unsupported output_format.encoding 'opus' for container 'wav'; Opus goes in container 'ogg' "
                "(a file) or 'raw' (packets, on /tts/sse and /tts/websocket)",
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
        """Bytes per sample for raw/wav; None for mp3 and opus (compressed)."""
        return None if self.encoding is None else self.encoding.sample_width

    @property
    def unit_bytes(self) -> int:
        """The step a chunk of this audio may be cut at: a sample for PCM; 1 for compressed
        output (raw Opus is never cut: each packet is one chunk, far under any message limit)."""
        return self.bytes_per_sample or 1

    @property
    def is_opus_packets(self) -> bool:
        """Raw Opus: the audio is a sequence of packets, one per chunk event."""
        return self.opus and self.container is Container.RAW
