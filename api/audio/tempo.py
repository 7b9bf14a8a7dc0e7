"""``TimeStretch``: a streaming, pitch-preserving change of speech rate (FFmpeg's ``atempo``
through PyAV), for ``generation_config.speed``: Gepard cannot change its own rate, so the codec's
audio is stretched instead.

    stretch = TimeStretch(1.25)          # one per segment; speed 1.0 is a pass-through (no filter graph)
    out = stretch.push(pcm)              # pcm  # [N] float32 @ 22050 Hz; whatever is ready (may be empty)
    tail = stretch.flush()               # the rest: the segment is exactly round(total / speed) samples

``speed`` is a rate factor: 1.25 speaks in 1 / 1.25 of the time, at the same pitch (WSOLA: atempo
overlaps and adds windows of the input at shifted positions). One atempo instance is kept within
[0.5, 2.0], where it blends every sample (above 2.0 it skips input, FFmpeg's documentation says);
factors beyond are a chain of equal instances (4.0 = 2.0 x 2.0, 0.25 = 0.5 x 0.5).

Latency. atempo hands out an output frame only once it is full, and sizes each output frame from
the input frame that started it, so a codec chunk pushed whole (3,528 samples for the first,
7,056 for the second at the default chunk schedule) would come out only when the next chunk arrives. Input is therefore fed
in ``FEED_SAMPLES`` pieces: what atempo holds is then its window plus a piece, about 1,100-1,650
input samples (50-75 ms of the codec's audio) for factors 0.6-2.0, and a segment's first chunk
yields audio at once (its first output comes after 1,024-1,536 input samples). A chain holds more:
about 2,000 samples at 0.25, and about 4,700 at 4.0, whose first output then waits for a segment's
second chunk. CPU: about 4-6 ms per second of input audio (2-core Xeon; 11 ms at 0.25).

Length. atempo's own output ends up to about 60 ms of input away from ``N / speed`` (its window at
the end), so ``flush`` cuts its tail or pads it with silence to exactly ``round(N / speed)``: sample
offsets and sizes stay predictable.

CPU work: this is synchronous; callers run it in a thread (api/synthesis.py), as the encoders run.
"""

from __future__ import annotations

import fractions
import math
from typing import Iterator, Optional

import av
import av.filter
import numpy as np

from api.audio.resampling import CODEC_SAMPLE_RATE_HZ

__all__ = ["FEED_SAMPLES", "MAX_ATEMPO_FACTOR", "MIN_ATEMPO_FACTOR", "TimeStretch", "atempo_factors"]

#: One atempo instance's factors, where it blends every input sample (module docstring).
MIN_ATEMPO_FACTOR = 0.5
MAX_ATEMPO_FACTOR = 2.0
#: Input piece fed to atempo at a time (~12 ms at 22.05 kHz): small pieces keep its output flowing
#: (module docstring). 512 halves the CPU cost and holds ~300 samples more.
FEED_SAMPLES = 256
#: Closer to 1.0 than this is 1.0: no filter graph.
_IDENTITY_TOLERANCE = 1e-6


def atempo_factors(speed: float) -> list[float]:
    """The chain of atempo factors whose product is ``speed``, each in [0.5, 2.0]: as few as
    possible, all equal (``atempo_factors(4.0) == [2.0, 2.0]``; ``[]`` for 1.0)."""
    if not (math.isfinite(speed) and speed > 0):
        raise ValueError(f"speed must be a positive number, got {speed!r}")
    if abs(speed - 1.0) <= _IDENTITY_TOLERANCE:
        return []
    # the range is symmetric (MIN = 1 / MAX): n instances reach MAX**n either way; 2.0 itself is one
    count = max(1, math.ceil(abs(math.log(speed)) / math.log(MAX_ATEMPO_FACTOR) - 1e-9))
    return [speed ** (1.0 / count)] * count


class TimeStretch:
    """One segment's stretch (module docstring). Not thread-safe: one caller at a time, which may
    be a different thread for each call (``asyncio.to_thread``)."""

    def __init__(self, speed: float, sample_rate_hz: int = CODEC_SAMPLE_RATE_HZ) -> None:
        self.speed = float(speed)
        self.sample_rate_hz = sample_rate_hz
        self.factors = atempo_factors(self.speed)
        self.samples_in = 0
        self.samples_out = 0
        self._flushed = False
        # built at the first push (about 1 ms): in the caller's thread, not where the stretch is made
        self._graph: Optional[av.filter.Graph] = None

    @property
    def identity(self) -> bool:
        """Speed 1.0: ``push`` returns its input itself and ``flush`` nothing."""
        return not self.factors

    def _build_graph(self) -> av.filter.Graph:
        # abuffer -> atempo (-> atempo ...) -> abuffersink, mono float32 end to end
        graph = av.filter.Graph()
        node = graph.add_abuffer(format="flt", sample_rate=self.sample_rate_hz, layout="mono",
                                 time_base=fractions.Fraction(1, self.sample_rate_hz))
        for factor in self.factors:
            stage = graph.add("atempo", repr(factor))
            node.link_to(stage)
            node = stage
        node.link_to(graph.add("abuffersink"))
        graph.configure()
        return graph

    def push(self, pcm: np.ndarray, *, last: bool = False) -> np.ndarray:
        """Stretch ``pcm`` [N] float32: the audio ready so far [M] float32 (often shorter than
        N / speed at first: atempo holds its window). ``last``: this is the segment's last piece,
        so the tail (``flush``) comes with it."""
        if self._flushed:
            raise RuntimeError("this stretch is flushed; make a new TimeStretch for the next segment")
        if self.identity:
            self.samples_in += pcm.size
            self.samples_out += pcm.size
            if last:
                self._flushed = True
            return pcm
        pcm = np.ascontiguousarray(pcm, dtype=np.float32).reshape(-1)
        out: list[np.ndarray] = []
        for start in range(0, pcm.size, FEED_SAMPLES):
            self._feed(pcm[start:start + FEED_SAMPLES])
            out.extend(self._drain())
        ready = _joined(out)
        self.samples_out += ready.size
        return np.concatenate([ready, self.flush()]) if last else ready

    def flush(self) -> np.ndarray:
        """The segment's tail: after it, the output is exactly ``round(samples_in / speed)``
        samples in all (atempo's tail cut, or padded with silence). Once only."""
        if self._flushed:
            raise RuntimeError("this stretch is already flushed")
        self._flushed = True
        if self.identity or self._graph is None:  # nothing was pushed: nothing to release
            return np.zeros(0, np.float32)
        self._graph.push(None)  # end of stream: atempo releases what it holds
        tail = _joined(list(self._drain()))
        self._graph = None
        owed = max(0, round(self.samples_in / self.speed) - self.samples_out)
        tail = tail[:owed] if tail.size >= owed else np.concatenate([tail, np.zeros(owed - tail.size, np.float32)])
        self.samples_out += tail.size
        return tail

    def _feed(self, piece: np.ndarray) -> None:
        if self._graph is None:
            self._graph = self._build_graph()
        frame = av.AudioFrame.from_ndarray(piece.reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = self.sample_rate_hz
        frame.time_base = fractions.Fraction(1, self.sample_rate_hz)
        frame.pts = self.samples_in
        self.samples_in += piece.size
        self._graph.push(frame)

    def _drain(self) -> Iterator[np.ndarray]:
        """Every frame the graph has ready, as [M] float32 arrays."""
        assert self._graph is not None
        while True:
            try:
                frame = self._graph.pull()
            except (av.BlockingIOError, av.EOFError):  # nothing more now / ever
                return
            yield frame.to_ndarray().reshape(-1)


def _joined(pieces: list[np.ndarray]) -> np.ndarray:
    if not pieces:
        return np.zeros(0, np.float32)
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
