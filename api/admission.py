"""Admission control: which new streams the gateway takes on, so that running streams stay real-time.

A *stream* is one WebSocket context or one ``/tts/bytes`` / ``/tts/sse`` request (Cartesia counts
concurrency the same way, protocol 8.2). A new stream is admitted only when all three hold:

1. fewer than ``max_streams`` streams are open in this process (``GEPARD_MAX_STREAMS``);
2. its API key has fewer than ``max_streams_per_key`` open (``GEPARD_MAX_STREAMS_PER_KEY``, 0: no limit);
3. the load-aware check passes (``GEPARD_ADMIT_MAX_SATURATION``, 0: off): the streams that are
   generating now are faster than real time with headroom, and every open stream would still be
   with one more.

Otherwise the caller gets ``StreamRefusedError`` (429 ``concurrency_limited`` with retry advice, in
band on the WebSocket). Once the gateway drains (api/lifecycle.py) admission is ``close``d: every
new stream gets the drain's 503 ``service_unavailable``. Streams already admitted are never refused later: their next segments
always run.

Saturation is measured end to end, where audio leaves the codec (``LoadMeter``): over a sliding
exponential window of ``tau_s`` seconds it compares the stream-seconds spent generating with the
audio seconds produced. Each piece of audio brings the stream-seconds spent producing it (since
the stream's previous piece, or since its consumer asked for more), so a piece still being
generated counts neither its time nor its audio: counted as it ran, the time since each stream's
last piece read as load with no audio for it (a stream 0.2 s past its first chunk, before its
next, read as thousands of times real time, and a just-started one at twice its real rate), and
refused a second stream that would have kept up. ``saturation = busy stream-seconds / audio seconds`` is the average
per-stream real-time factor: 0.1 means each generating stream gets audio 10x faster than real
time, 1.0 means streams are exactly real-time, above 1 they fall behind and listeners hear gaps.
Engine, codec and gateway CPU time all count, since audio is measured after all of them. A
stream's wait for its first audio is not counted as busy time (so a burst of new streams does
not read as overload before any of them produced anything); what that burst does to throughput
is seen as soon as audio flows. Nor is the time a stream waits for its client to take a piece of
audio (api/synthesis.py): a client reading at its own pace is not load on the server.

For the prediction the meter also keeps the *capacity*: the aggregate audio seconds per second
measured while the gateway was saturated (>= ``capacity_saturation``), with the number of busy
streams it was measured at (batching engines deliver more in total with more streams, so a
capacity measured with 2 streams says nothing about 20: it is used only for predictions up to
the concurrency it was measured at, and the highest concurrency measured is kept).

The streams a prediction counts are those generating now plus those admitted that have not
produced audio yet (a burst of new contexts, whose load the meter cannot have seen): ``n`` of
them, with ``b`` streams busy on average while any was (so a pause between requests does not
turn the rate two streams had into one stream's), and the next one is admitted when
``max(s * (n + 1) / b, (n + 1) / capacity)`` stays at or below ``max_saturation`` (the second
term once a capacity at that concurrency is known). An open context that already spoke and waits
for more text is not counted until it generates again. The first term assumes throughput is
shared evenly (no batching gain), which errs on the side of refusing. At least ``min_streams``
open streams are always admitted, so a slow machine still serves someone.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from api.errors import RateLimitedError

logger = logging.getLogger(__name__)

__all__ = ["Admission", "AdmissionLimits", "LoadMeter", "StreamRefusedError", "StreamTicket"]


class StreamRefusedError(RateLimitedError):
    """429 ``concurrency_limited``: a stream limit or the load limit refused a new stream.

    ``reason`` is one of "process", "key", "load" (the metrics label).
    """

    def __init__(self, message: str, reason: str, retry_after_s: float) -> None:
        super().__init__(message, error_code="concurrency_limited", retry_after_s=retry_after_s)
        self.reason = reason


@dataclass(frozen=True)
class AdmissionLimits:
    max_streams: int = 64
    max_streams_per_key: int = 0  # 0: no per-key limit
    max_saturation: float = 0.9  # 0: no load-aware admission
    min_streams: int = 1  # always admitted, whatever the load
    retry_after_s: float = 1.0


class LoadMeter:
    """Busy stream-seconds vs audio seconds over an exponential window (thread-safe, cheap).

    ``stream_busy(+1/-1)`` when a stream starts/stops waiting for audio it has begun receiving
    (the count of busy streams), ``audio(seconds, busy_s)`` when audio comes out, with the
    stream-seconds spent producing it. All times come from ``clock`` (monotonic seconds, ``now()``).
    """

    def __init__(self, tau_s: float = 2.0, capacity_saturation: float = 0.8, capacity_memory_s: float = 120.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.tau_s = tau_s
        self.capacity_saturation = capacity_saturation
        self.capacity_memory_s = capacity_memory_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last = clock()
        self._busy = 0  # streams generating now (after their first audio)
        self._busy_avg = 0.0  # exponential average of _busy
        self._active_avg = 0.0  # exponential average of (_busy > 0): busy_avg / active_avg streams while any was busy
        self._work_rate = 0.0  # exponential average of the stream-seconds that produced the audio counted
        self._audio_rate = 0.0  # exponential average of audio seconds per second
        self._capacity = 0.0  # audio seconds per second when saturated (0: not measured yet)
        self._capacity_streams = 0.0  # busy streams (average) it was measured with
        self._capacity_at = -math.inf

    def _advance(self, now: float) -> None:
        dt = max(now - self._last, 0.0)
        if dt:
            decay = math.exp(-dt / self.tau_s)
            self._busy_avg = self._busy_avg * decay + self._busy * (1.0 - decay)
            self._active_avg = self._active_avg * decay + (1.0 - decay if self._busy else 0.0)
            self._work_rate *= decay
            self._audio_rate *= decay
            self._last = now

    def stream_busy(self, delta: int) -> None:
        with self._lock:
            self._advance(self._clock())
            self._busy = max(self._busy + delta, 0)

    def now(self) -> float:
        return self._clock()

    def audio(self, seconds: float, busy_s: float) -> None:
        """``seconds`` of a stream's audio came out, produced in ``busy_s`` seconds of its busy time."""
        with self._lock:
            now = self._clock()
            self._advance(now)
            self._audio_rate += seconds / self.tau_s
            self._work_rate += max(busy_s, 0.0) / self.tau_s
            saturation = self._saturation_locked()
            if saturation >= self.capacity_saturation and self._busy_avg >= 1.0:
                # audio flows at the rate the machine sustains with this many streams: keep the
                # measurement at the highest concurrency (the best rate there); forget it slowly
                expired = now - self._capacity_at > self.capacity_memory_s
                higher = self._busy_avg > self._capacity_streams + 0.5
                same = abs(self._busy_avg - self._capacity_streams) <= 0.5
                if expired or higher or (same and self._audio_rate > self._capacity):
                    self._capacity, self._capacity_streams = self._audio_rate, self._busy_avg
                if expired or higher or same:
                    self._capacity_at = now

    def _saturation_locked(self) -> float:
        if self._work_rate < 1e-3 or self._audio_rate <= 0.0:
            return 0.0
        return self._work_rate / self._audio_rate

    @property
    def busy_streams(self) -> int:
        return self._busy

    def saturation(self) -> float:
        """Average real-time factor of the generating streams (0 when none generated lately)."""
        with self._lock:
            self._advance(self._clock())
            return self._saturation_locked()

    def capacity(self, streams: int = 0) -> Optional[float]:
        """Audio seconds per second the gateway sustained when saturated, if it was measured with
        at least ``streams`` busy streams; None until then."""
        with self._lock:
            if self._capacity <= 0 or self._clock() - self._capacity_at > self.capacity_memory_s:
                return None
            if self._capacity_streams < streams - 0.5:
                return None
            return self._capacity

    def predicted_saturation(self, streams: int) -> float:
        """Saturation once ``streams`` open streams and one more all generate."""
        with self._lock:
            self._advance(self._clock())
            # the streams that were busy together when ``s`` was measured: their average over the
            # time any was busy (busy_avg alone also averages the idle time in: after a pause it
            # decays while ``s``, a ratio, holds, and two streams' rate read as one's)
            concurrency = self._busy_avg / self._active_avg if self._active_avg > 1e-9 else 1.0
            s, busy = self._saturation_locked(), max(concurrency, 1.0)
        predicted = s * (streams + 1) / busy
        capacity = self.capacity(streams + 1)
        if capacity:
            predicted = max(predicted, (streams + 1) / capacity)
        return predicted


@dataclass
class StreamTicket:
    """One admitted stream; ``release()`` (idempotent) gives its place back."""

    admission: "Admission"
    key: str
    released: bool = False
    spoke: bool = False  # its first audio came out (from then on the load meter sees it)

    def mark_spoke(self) -> None:
        """Call when the stream's first audio is out (idempotent)."""
        if not self.spoke and not self.released:
            self.spoke = True
            self.admission._fresh -= 1

    def release(self) -> None:
        if not self.released:
            if not self.spoke:
                self.admission._fresh -= 1
            self.released = True
            self.admission._release(self)


class Admission:
    """Counts open streams per process and per key and decides on new ones (event-loop thread)."""

    def __init__(self, limits: AdmissionLimits, meter: Optional[LoadMeter] = None,
                 on_refused: Optional[Callable[[str], None]] = None) -> None:
        self.limits = limits
        self.meter = meter or LoadMeter()
        self.on_refused = on_refused  # e.g. a metrics counter, called with the reason
        self._open = 0
        self._fresh = 0  # admitted, no audio yet
        self._per_key: dict[str, int] = {}
        self._closed: Optional[Callable[[], Exception]] = None

    def close(self, refusal: Callable[[], Exception]) -> None:
        """Admit nothing more: every new stream gets ``refusal()`` (the drain's 503); open ones run on."""
        self._closed = refusal

    @property
    def open_streams(self) -> int:
        return self._open

    def streams_of(self, key: str) -> int:
        return self._per_key.get(key, 0)

    def saturation(self) -> float:
        return self.meter.saturation()

    def admit(self, key: str) -> StreamTicket:
        """Take a place for a new stream of ``key`` or raise StreamRefusedError saying which limit
        (or, once ``close``d, the refusal it was given)."""
        lim = self.limits
        retry = lim.retry_after_s
        if self._closed is not None:
            self._refuse("draining")
            raise self._closed()
        if self._open >= lim.max_streams:
            self._refuse("process")
            raise StreamRefusedError(
                f"the server has {self._open} open streams, the most it takes (GEPARD_MAX_STREAMS); "
                f"retry in {retry:g} s", "process", retry)
        if lim.max_streams_per_key and self._per_key.get(key, 0) >= lim.max_streams_per_key:
            self._refuse("key")
            raise StreamRefusedError(
                f"this API key has {self._per_key[key]} open streams, the most allowed per key "
                f"(GEPARD_MAX_STREAMS_PER_KEY); retry in {retry:g} s", "key", retry)
        if lim.max_saturation > 0 and self._open >= lim.min_streams:
            streams = self.meter.busy_streams + self._fresh
            predicted = self.meter.predicted_saturation(streams)
            if predicted > lim.max_saturation:
                self._refuse("load")
                raise StreamRefusedError(
                    f"the server is at capacity: {streams} streams are generating or starting and one more would run at "
                    f"{predicted:.2f}x real time (limit {lim.max_saturation:g}, GEPARD_ADMIT_MAX_SATURATION); "
                    f"retry in {retry:g} s", "load", retry)
        self._open += 1
        self._fresh += 1
        self._per_key[key] = self._per_key.get(key, 0) + 1
        return StreamTicket(self, key)

    @contextlib.contextmanager
    def stream(self, key: str) -> Iterator[StreamTicket]:
        ticket = self.admit(key)
        try:
            yield ticket
        finally:
            ticket.release()

    def _release(self, ticket: StreamTicket) -> None:
        self._open = max(self._open - 1, 0)
        left = self._per_key.get(ticket.key, 0) - 1
        if left > 0:
            self._per_key[ticket.key] = left
        else:
            self._per_key.pop(ticket.key, None)

    def _refuse(self, reason: str) -> None:
        logger.info("stream refused: %s (open %d, saturation %.2f)", "server draining" if reason == "draining"
                    else f"{reason} limit", self._open, self.meter.saturation())
        if self.on_refused is not None:
            self.on_refused(reason)
