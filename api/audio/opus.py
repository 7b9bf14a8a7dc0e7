"""``OpusPacketEncoder``: mono float32 PCM -> raw Opus packets, one per 20 ms, with a continuous
encoder state across the pieces of one stream (libopus through PyAV; its wheels bundle libopus).

    enc = OpusPacketEncoder(48000, bit_rate_bps=64000)
    for pcm in pieces:                  # pcm  # [T] float32 @ 48000 Hz, any T
        packets = enc.encode(pcm)       # whole 20 ms packets now complete (maybe [])
    packets = enc.finish()              # the last partial frame (zero-padded) + the encoder's delay

Stream contract (what a client decoding the packets sees):

- every packet holds exactly one 20 ms Opus frame (``frame_samples`` = rate / 50 input samples);
  a stream of N input samples has ``ceil(N / frame_samples) + 1`` packets: the last one carries the
  encoder's look-ahead tail, without which the final 6.5 ms would be lost;
- the decoded stream (any Opus decoder, at 48 kHz or the input rate) starts with ``pre_skip_48k``
  samples at 48 kHz (312 = 6.5 ms, libopus's look-ahead) of encoder delay, which an Ogg Opus
  player drops using the OpusHead and a raw-packet client may drop the same way;
- the decoder state must not be reset between packets of one stream: they are one signal.

Only Opus's own rates are accepted (8, 16, 24 and 48 kHz among the protocol's rates), so the
input is never resampled again here.
"""

from __future__ import annotations

import fractions
import struct

import av
import numpy as np

from api.audio.frames import FrameCutter

__all__ = [
    "DEFAULT_OPUS_BIT_RATE_BPS",
    "OPUS_BIT_RATE_RANGE_BPS",
    "OPUS_FRAME_MS",
    "OPUS_SAMPLE_RATES_HZ",
    "OpusPacketEncoder",
    "open_opus_codec",
]

OPUS_SAMPLE_RATES_HZ: tuple[int, ...] = (8000, 16000, 24000, 48000)
OPUS_BIT_RATE_RANGE_BPS: tuple[int, int] = (6000, 256000)  # FFmpeg's libopus: at most 256 kbit/s per channel
DEFAULT_OPUS_BIT_RATE_BPS = 64000  # transparent for speech at 48 kHz, ~8 kB/s
OPUS_FRAME_MS = 20


def open_opus_codec(codec: av.CodecContext, sample_rate_hz: int, bit_rate_bps: int) -> None:
    """Configure an unopened libopus encoder context the way every Opus output here uses it:
    mono float input, 20 ms frames, the ``audio`` application (full-band music/speech tuning)."""
    codec.sample_rate = sample_rate_hz
    codec.layout = "mono"
    codec.format = "flt"
    codec.bit_rate = bit_rate_bps
    codec.time_base = fractions.Fraction(1, sample_rate_hz)
    codec.options = {"application": "audio", "frame_duration": str(OPUS_FRAME_MS)}


class OpusPacketEncoder:
    """A stateful Opus encoder for one stream; not thread-safe, not reusable after ``finish``."""

    def __init__(self, sample_rate_hz: int, bit_rate_bps: int = DEFAULT_OPUS_BIT_RATE_BPS) -> None:
        if sample_rate_hz not in OPUS_SAMPLE_RATES_HZ:
            raise ValueError(f"Opus encodes at {OPUS_SAMPLE_RATES_HZ} Hz, not {sample_rate_hz}")
        lo, hi = OPUS_BIT_RATE_RANGE_BPS
        if not lo <= bit_rate_bps <= hi:
            raise ValueError(f"Opus bit rate must be in [{lo}, {hi}], got {bit_rate_bps}")
        self.sample_rate_hz = sample_rate_hz
        self.bit_rate_bps = bit_rate_bps
        self.frame_samples = sample_rate_hz * OPUS_FRAME_MS // 1000
        self._codec = av.CodecContext.create("libopus", "w")
        open_opus_codec(self._codec, sample_rate_hz, bit_rate_bps)
        self._codec.open()
        self._frames = FrameCutter(self.frame_samples)
        self._pts = 0
        self._finished = False

    @property
    def pre_skip_48k(self) -> int:
        """Encoder delay at the start of the decoded stream, in 48 kHz samples (OpusHead pre-skip)."""
        head = bytes(self._codec.extradata or b"")
        return struct.unpack_from("<H", head, 10)[0] if len(head) >= 12 else 312

    def encode(self, pcm: np.ndarray) -> list[bytes]:
        """``pcm  # [T] float32 @ sample_rate_hz`` -> the packets now complete (maybe [])."""
        if self._finished:
            raise RuntimeError("Opus encoder is finished; create a new one per stream")
        packets: list[bytes] = []
        for frame in self._frames.cut(pcm):
            packets += self._encode_frame(frame)
        return packets

    def finish(self) -> list[bytes]:
        """The last packets: the partial frame padded with silence, then the encoder's delay."""
        if self._finished:
            raise RuntimeError("Opus encoder is already finished")
        self._finished = True
        rest = self._frames.rest()
        packets: list[bytes] = []
        if rest.size:
            padded = np.zeros(self.frame_samples, dtype=np.float32)
            padded[: rest.size] = rest
            packets += self._encode_frame(padded)
        if self._pts:  # an encoder that never saw a frame has nothing to drain
            packets += [bytes(p) for p in self._codec.encode(None)]
        return packets

    def _encode_frame(self, frame: np.ndarray) -> list[bytes]:
        clipped = np.clip(np.nan_to_num(frame, nan=0.0), -1.0, 1.0).astype(np.float32)
        av_frame = av.AudioFrame.from_ndarray(clipped[None, :], format="flt", layout="mono")
        av_frame.sample_rate = self.sample_rate_hz
        av_frame.time_base = fractions.Fraction(1, self.sample_rate_hz)
        av_frame.pts = self._pts
        self._pts += len(frame)
        return [bytes(p) for p in self._codec.encode(av_frame)]
