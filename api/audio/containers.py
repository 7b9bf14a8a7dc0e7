"""Streaming container writers: float32 PCM at the output rate -> the bytes of a response body.

Every writer has the same two calls::

    body = writer.write(pcm)   # pcm  # [T] float32 @ output sample rate; returns bytes (maybe b"")
    tail = writer.finish()     # the rest of the stream; the writer is closed afterwards

- ``RawWriter``: the encoded samples, nothing else (``raw`` container; SSE/WebSocket chunks).
- ``WavWriter``: a RIFF/WAVE header before the first samples, then the encoded samples.
- ``Mp3Writer``: a LAME encoder (``lameenc``), MP3 frames as they complete, the rest on finish.
- ``OpusPacketWriter``: raw Opus packets (one per 20 ms) for SSE/WebSocket chunks (extension).
- ``api.audio.av_writer.AvWriter``: Ogg Opus, AAC and FLAC through FFmpeg (PyAV).

``write_units`` / ``finish_units`` give the same bytes as the pieces that may each go out as
one chunk event (cut further only at ``OutputFormat.unit_bytes``): one piece for PCM, one per
packet for raw Opus, whose packets must reach the client whole and apart.

WAV header (``wav_header``). Format tags: 1 = PCM (``pcm_s16le``, 16 bit), 3 = IEEE float
(``pcm_f32le``, 32 bit), 7 = mu-law and 6 = A-law (8 bit). Non-PCM tags get the 18-byte ``fmt ``
chunk (``cbSize = 0``) and a ``fact`` chunk holding the sample count, as the RIFF spec asks.
Sizes: when the sample count is known up front they are exact (RIFF size = file length - 8, and an
odd data chunk is followed by one pad byte, written by ``finish``). When it is not known - the
normal case for a streamed ``/tts/bytes`` body - the RIFF size, the data size and the ``fact``
count are all ``0xFFFFFFFF``: the convention ffmpeg and sox use for unseekable output; readers
that honour it (libsndfile/soundfile, ffmpeg, browsers) read the data chunk to the end of the
stream. Python's ``wave`` reads the known-length variant (PCM only: it has no float/G.711 support).

MP3: the protocol's rates (8000..48000 Hz) are all LAME rates (MPEG-1 32/44.1/48 kHz, MPEG-2
16/22.05/24 kHz, MPEG-2.5 8 kHz), so no resampling is needed beyond the pipeline's own; the
output rate is pinned to the input rate (LAME would otherwise lower it at low bit rates). MPEG-2
frames cap at 160 kbit/s and LAME caps 8 kHz at 64 kbit/s, so 192000 at <= 24 kHz (and > 64000
at 8 kHz) is clamped by LAME to those maxima. The decoded stream starts with LAME's encoder delay
(~1 frame of silence) and ends with padding to a whole frame, as every MP3 does.
"""

from __future__ import annotations

import abc
import struct
from typing import Optional

import lameenc
import numpy as np

from api.audio.encoding import AudioEncoding, encode_pcm, float_to_s16
from api.audio.formats import Container, OutputFormat

__all__ = [
    "UNKNOWN_SIZE",
    "ContainerWriter",
    "Mp3Writer",
    "OpusPacketWriter",
    "RawWriter",
    "WavWriter",
    "make_writer",
    "wav_header",
]

UNKNOWN_SIZE = 0xFFFFFFFF  # RIFF/data/fact size of a stream whose length is not known up front

_WAV_FORMAT_TAG = {
    AudioEncoding.PCM_S16LE: 1,  # WAVE_FORMAT_PCM
    AudioEncoding.PCM_F32LE: 3,  # WAVE_FORMAT_IEEE_FLOAT
    AudioEncoding.PCM_ALAW: 6,  # WAVE_FORMAT_ALAW
    AudioEncoding.PCM_MULAW: 7,  # WAVE_FORMAT_MULAW
}


def wav_header(
    encoding: AudioEncoding, sample_rate_hz: int, num_samples: Optional[int] = None, channels: int = 1
) -> bytes:
    """The RIFF/WAVE header up to and including the ``data`` chunk's size field.

    num_samples: samples per channel that will follow, or None for a stream of unknown length
    (sizes set to 0xFFFFFFFF). Sizes that would not fit in 32 bits raise ValueError.
    """
    encoding = AudioEncoding.parse(encoding)
    if num_samples is not None and num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    if channels < 1:
        raise ValueError(f"channels must be >= 1, got {channels}")
    tag = _WAV_FORMAT_TAG[encoding]
    width = encoding.sample_width
    block_align = width * channels
    fmt = struct.pack(
        "<HHIIHH", tag, channels, sample_rate_hz, sample_rate_hz * block_align, block_align, 8 * width
    )
    if tag != 1:
        fmt += struct.pack("<H", 0)  # cbSize: no extension
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    if num_samples is None:
        data_size = riff_size = fact_count = UNKNOWN_SIZE
    else:
        data_size = num_samples * block_align
        fact_count = num_samples
    if tag != 1:
        chunks += b"fact" + struct.pack("<II", 4, fact_count & 0xFFFFFFFF)
    if num_samples is not None:
        riff_size = 4 + len(chunks) + 8 + data_size + (data_size & 1)
        if riff_size > 0xFFFFFFFE:
            raise ValueError(f"{num_samples} samples do not fit in a RIFF file")
    return b"RIFF" + struct.pack("<I", riff_size) + b"WAVE" + chunks + b"data" + struct.pack(
        "<I", data_size
    )


class ContainerWriter(abc.ABC):
    """float32 PCM at the output rate -> body bytes, incrementally. Not thread-safe."""

    def __init__(self) -> None:
        self._finished = False

    def write(self, pcm: np.ndarray) -> bytes:
        """``pcm  # [T] float32 @ output rate`` -> the bytes now ready (may be empty)."""
        if self._finished:
            raise RuntimeError(f"{type(self).__name__} is finished; create a new one")
        return self._write(np.asarray(pcm, dtype=np.float32))

    def finish(self) -> bytes:
        """The remaining bytes of the stream; afterwards ``write`` raises RuntimeError."""
        if self._finished:
            raise RuntimeError(f"{type(self).__name__} is already finished")
        self._finished = True
        return self._finish()

    def write_units(self, pcm: np.ndarray) -> list[bytes]:
        """``write`` as chunk-sized pieces (see the module docstring); never an empty piece."""
        data = self.write(pcm)
        return [data] if data else []

    def finish_units(self) -> list[bytes]:
        """``finish`` as chunk-sized pieces."""
        data = self.finish()
        return [data] if data else []

    @abc.abstractmethod
    def _write(self, pcm: np.ndarray) -> bytes: ...

    @abc.abstractmethod
    def _finish(self) -> bytes: ...


class RawWriter(ContainerWriter):
    """Headerless samples in ``encoding``."""

    def __init__(self, encoding: AudioEncoding) -> None:
        super().__init__()
        self.encoding = AudioEncoding.parse(encoding)

    def _write(self, pcm: np.ndarray) -> bytes:
        return encode_pcm(pcm, self.encoding)

    def _finish(self) -> bytes:
        return b""


class WavWriter(ContainerWriter):
    """A WAV stream: header with the first bytes, then samples.

    num_samples: the exact number of samples that will be written, when known (exact sizes;
    writing more raises ValueError, finishing with fewer raises ValueError), or None for the
    0xFFFFFFFF streaming convention (see the module docstring).
    """

    def __init__(
        self, encoding: AudioEncoding, sample_rate_hz: int, num_samples: Optional[int] = None
    ) -> None:
        super().__init__()
        self.encoding = AudioEncoding.parse(encoding)
        self.sample_rate_hz = sample_rate_hz
        self.num_samples = num_samples
        self._header: Optional[bytes] = wav_header(self.encoding, sample_rate_hz, num_samples)
        self._written = 0

    def _take_header(self) -> bytes:
        header, self._header = self._header or b"", None
        return header

    def _write(self, pcm: np.ndarray) -> bytes:
        if self.num_samples is not None and self._written + len(pcm) > self.num_samples:
            raise ValueError(
                f"WAV header declared {self.num_samples} samples; "
                f"writing {len(pcm)} more after {self._written} exceeds it"
            )
        self._written += len(pcm)
        return self._take_header() + encode_pcm(pcm, self.encoding)

    def _finish(self) -> bytes:
        if self.num_samples is not None and self._written != self.num_samples:
            raise ValueError(
                f"WAV header declared {self.num_samples} samples but {self._written} were written"
            )
        odd_data = (self._written * self.encoding.sample_width) % 2 == 1
        pad = b"\x00" if self.num_samples is not None and odd_data else b""  # RIFF word alignment
        return self._take_header() + pad


class Mp3Writer(ContainerWriter):
    """Mono MP3 (CBR) via LAME. ``quality``: LAME's 0 (best, slowest) .. 9 (worst, fastest)."""

    def __init__(self, sample_rate_hz: int, bit_rate_bps: int, quality: int = 5) -> None:
        super().__init__()
        self.sample_rate_hz = sample_rate_hz
        self.bit_rate_bps = bit_rate_bps
        self._encoder = lameenc.Encoder()
        self._encoder.set_channels(1)
        self._encoder.set_in_sample_rate(sample_rate_hz)
        self._encoder.set_out_sample_rate(sample_rate_hz)
        self._encoder.set_bit_rate(bit_rate_bps // 1000)
        self._encoder.set_quality(quality)

    def _write(self, pcm: np.ndarray) -> bytes:
        return bytes(self._encoder.encode(float_to_s16(pcm).astype("<i2").tobytes()))

    def _finish(self) -> bytes:
        # LAME refuses to flush an encoder that never saw input; an empty encode starts it.
        start = bytes(self._encoder.encode(b""))
        return start + bytes(self._encoder.flush())


class OpusPacketWriter(ContainerWriter):
    """Raw Opus packets (``api.audio.opus.OpusPacketEncoder``); ``write_units`` gives one piece per
    packet, ``write`` their concatenation (which no client could split again: chunked routes only)."""

    def __init__(self, sample_rate_hz: int, bit_rate_bps: int) -> None:
        super().__init__()
        from api.audio.opus import OpusPacketEncoder

        self.encoder = OpusPacketEncoder(sample_rate_hz, bit_rate_bps)
        self._pending: list[bytes] = []

    def write_units(self, pcm: np.ndarray) -> list[bytes]:
        self.write(pcm)
        out, self._pending = self._pending, []
        return out

    def finish_units(self) -> list[bytes]:
        self.finish()
        out, self._pending = self._pending, []
        return out

    def _write(self, pcm: np.ndarray) -> bytes:
        packets = self.encoder.encode(pcm)
        self._pending += packets
        return b"".join(packets)

    def _finish(self) -> bytes:
        packets = self.encoder.finish()
        self._pending += packets
        return b"".join(packets)


def make_writer(fmt: OutputFormat, num_samples: Optional[int] = None) -> ContainerWriter:
    """The writer for ``fmt``; ``num_samples`` (output-rate samples) only matters for WAV."""
    if fmt.is_opus_packets:
        return OpusPacketWriter(fmt.sample_rate_hz, fmt.bit_rate_bps or 0)
    if fmt.container is Container.OGG:
        from api.audio.av_writer import AvFormat, AvWriter  # imports this module: imported here

        return AvWriter(AvFormat.OGG_OPUS, fmt.sample_rate_hz, fmt.bit_rate_bps)
    if fmt.container is Container.RAW:
        return RawWriter(fmt.encoding)
    if fmt.container is Container.WAV:
        return WavWriter(fmt.encoding, fmt.sample_rate_hz, num_samples)
    return Mp3Writer(fmt.sample_rate_hz, fmt.bit_rate_bps)
