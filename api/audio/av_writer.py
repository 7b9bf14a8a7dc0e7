"""``AvWriter``: a ``ContainerWriter`` that encodes and muxes with FFmpeg through PyAV, for the
compressed outputs beyond MP3: Ogg Opus, AAC in ADTS, FLAC.

    writer = AvWriter(AvFormat.OGG_OPUS, 24000)
    body = writer.write(pcm)     # pcm  # [T] float32 @ 24000 Hz; the bytes the muxer has written
    tail = writer.finish()       # drains encoder and muxer (last pages, FLAC padding frame...)

Nothing waits longer than the codec needs: the muxer writes each packet through at once
(``flush_packets``), and Ogg closes a page per 20 ms Opus packet (``page_duration``), so a streamed
body carries the audio of each ``write`` as soon as the encoder releases it. The price is Ogg's
page header on every packet (28 bytes, ~11 kbit/s). Ogg and ADTS go to an unseekable sink and
need nothing fixed up later: Ogg's granule positions carry the exact length (pre-skip at the start,
end trimming on the last page), ADTS has no length. FLAC is the exception: its STREAMINFO header
comes first and holds the length, and a stream with "length unknown" there (0 samples) breaks
libsndfile's ``soundfile.read`` (it sizes its array from that field), so FLAC is muxed into a
seekable buffer, its header is rewritten with the exact length and MD5 at the end, and the whole
file comes out of ``finish`` (FLAC is a file format: ask for wav or pcm to stream lossless audio).
AAC in ADTS starts with the encoder's priming (1024 samples of delay) and ends padded to a frame.

PyAV frames the input itself (each encoder gets whole frames: 20 ms for Opus, 1024 samples for
AAC, the FLAC block size; the last frame may be short or is padded by the encoder).
"""

from __future__ import annotations

import enum
import fractions
import io
from dataclasses import dataclass
from typing import Optional

import av
import numpy as np

from api.audio.containers import ContainerWriter
from api.audio.opus import DEFAULT_OPUS_BIT_RATE_BPS, OPUS_FRAME_MS, open_opus_codec

__all__ = ["AvFormat", "AvWriter"]


@dataclass(frozen=True)
class _Spec:
    codec: str  # FFmpeg encoder name
    muxer: str  # FFmpeg muxer name
    media_type: str
    default_bit_rate_bps: Optional[int]  # None: lossless, no bit rate
    streamed: bool = True  # False: the whole file comes out of finish (see the module docstring)


class AvFormat(enum.Enum):
    """The compressed containers this writer makes."""

    OGG_OPUS = _Spec("libopus", "ogg", "audio/ogg", DEFAULT_OPUS_BIT_RATE_BPS)
    AAC = _Spec("aac", "adts", "audio/aac", 128000)
    FLAC = _Spec("flac", "flac", "audio/flac", None, streamed=False)

    @property
    def media_type(self) -> str:
        return self.value.media_type


class _Sink:
    """The muxer's output: collects what it writes until the writer takes it. No ``seek``: the
    muxers see an unseekable stream and write streaming headers."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def write(self, data: bytes) -> int:
        self._buf += data
        return len(data)

    def take(self, final: bool = False) -> bytes:
        out = bytes(self._buf)
        self._buf.clear()
        return out


class _FileSink(io.BytesIO):
    """A seekable output that hands out nothing until the muxer is closed (FLAC: the header is
    rewritten with the length at the end)."""

    def take(self, final: bool = False) -> bytes:
        return self.getvalue() if final else b""


class AvWriter(ContainerWriter):
    """One encoded, muxed mono stream; not thread-safe."""

    def __init__(self, fmt: AvFormat, sample_rate_hz: int, bit_rate_bps: Optional[int] = None) -> None:
        super().__init__()
        spec = fmt.value
        self.format = fmt
        self.sample_rate_hz = sample_rate_hz
        self._sink = _Sink() if spec.streamed else _FileSink()
        options = {"flush_packets": "1"}
        if spec.muxer == "ogg":
            options["page_duration"] = str(OPUS_FRAME_MS * 1000)  # microseconds: one page per packet
        self._container = av.open(self._sink, mode="w", format=spec.muxer, options=options)
        self._stream = self._container.add_stream(spec.codec, rate=sample_rate_hz, layout="mono")
        codec = self._stream.codec_context
        bits = bit_rate_bps or spec.default_bit_rate_bps
        if spec.codec == "libopus":
            open_opus_codec(codec, sample_rate_hz, bits)
        elif bits is not None:
            codec.bit_rate = bits
        self._stream.time_base = fractions.Fraction(1, sample_rate_hz)
        self._pts = 0

    def _write(self, pcm: np.ndarray) -> bytes:
        if pcm.size:
            clipped = np.clip(np.nan_to_num(pcm, nan=0.0), -1.0, 1.0).astype(np.float32)
            frame = av.AudioFrame.from_ndarray(clipped[None, :], format="flt", layout="mono")
            frame.sample_rate = self.sample_rate_hz
            frame.time_base = fractions.Fraction(1, self.sample_rate_hz)
            frame.pts = self._pts
            self._pts += pcm.size
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        return self._sink.take()

    def _finish(self) -> bytes:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()  # writes the trailer (last Ogg page with end trimming, FLAC header)
        return self._sink.take(final=True)
