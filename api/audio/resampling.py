"""Streaming resampling of one context's audio from the codec rate (22050 Hz) to the output rate.

``StreamingResampler`` wraps ``soxr.ResampleStream`` (soxr "HQ" quality): one instance per
context, because the filter keeps state across calls so chunk seams are continuous. When the
rates are equal it is the identity (the chunk is returned as float32, no delay).

Contract (checked in tests/api/audio/test_resampling.py for every protocol rate and irregular
chunk sizes, 1 sample to seconds): the concatenation of every ``process(...)`` result and the
final ``flush()`` equals ``soxr.resample(whole_utterance, in_rate, out_rate)`` within a max
absolute difference of 1e-4 after trimming both to the shorter length (in practice they are
bit-identical), and its length is ``round(N * out_rate / in_rate)`` within 1 sample for N input
samples. ``process`` holds back the filter's look-ahead (a few ms of output), which ``flush``
releases; so a chunk's output can be shorter than ``len(chunk) * ratio``.
"""

from __future__ import annotations

import logging

import numpy as np
import soxr

__all__ = ["CODEC_SAMPLE_RATE_HZ", "StreamingResampler"]

logger = logging.getLogger(__name__)

CODEC_SAMPLE_RATE_HZ = 22050  # NanoCodec output rate: what the engine/codec path yields


class StreamingResampler:
    """Stateful mono float32 resampler ``in_rate_hz -> out_rate_hz``; not thread-safe."""

    def __init__(self, out_rate_hz: int, in_rate_hz: int = CODEC_SAMPLE_RATE_HZ) -> None:
        if in_rate_hz <= 0 or out_rate_hz <= 0:
            raise ValueError(
                f"sample rates must be positive, got in_rate_hz={in_rate_hz}, out_rate_hz={out_rate_hz}"
            )
        self.in_rate_hz = in_rate_hz
        self.out_rate_hz = out_rate_hz
        self._stream = (
            None
            if in_rate_hz == out_rate_hz
            else soxr.ResampleStream(in_rate_hz, out_rate_hz, 1, dtype="float32", quality="HQ")
        )
        self._flushed = False
        self.samples_in = 0
        self.samples_out = 0
        logger.debug("resampler %d -> %d Hz", in_rate_hz, out_rate_hz)

    @property
    def is_identity(self) -> bool:
        return self._stream is None

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """``chunk  # [T] float32 @ in_rate_hz`` -> ``[T'] float32 @ out_rate_hz`` (T' may be 0)."""
        if self._flushed:
            raise RuntimeError("resampler already flushed; create a new one per context")
        x = np.asarray(chunk, dtype=np.float32)
        if x.ndim != 1:
            raise ValueError(f"expected mono PCM of shape [T], got shape {x.shape}")
        self.samples_in += len(x)
        if self._stream is None:
            out = x.copy()
        elif len(x) == 0:
            out = np.zeros(0, dtype=np.float32)
        else:
            out = np.ascontiguousarray(self._stream.resample_chunk(x, last=False), dtype=np.float32)
        self.samples_out += len(out)
        return out

    def flush(self) -> np.ndarray:
        """The held-back tail; call once at the end of the context's audio."""
        if self._flushed:
            raise RuntimeError("resampler already flushed")
        self._flushed = True
        if self._stream is None:
            return np.zeros(0, dtype=np.float32)
        out = np.ascontiguousarray(
            self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True), dtype=np.float32
        )
        self.samples_out += len(out)
        return out
