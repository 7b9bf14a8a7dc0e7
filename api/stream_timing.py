"""Per-stream real-time figures: real-time factor and underrun, as a listener would feel them.

A *stream* is one WebSocket context or one ``/tts/bytes`` / ``/tts/sse`` request (as admission
counts them). ``StreamTiming`` is fed when the server starts owing audio, when audio comes out of
the codec and when it stops owing audio; it knows nothing of HTTP or Prometheus, takes timestamps
from the caller (so tests feed it exact times) and reports through a ``StreamObserver``.

Underrun. A listener starts playing at the first chunk, in real time, and never skips. The
playhead runs out at ``play_end`` (the end of the audio received so far); a chunk that arrives at
``t > play_end`` leaves the listener waiting ``t - play_end``. The stream's underrun is the sum of
those waits: 0 when every chunk came before the previous audio ran out, the figure a voice agent
actually feels (gaps in the speech) rather than an average. A chunk "arrives" when it leaves the
codec (api.synthesis, where the load meter measures too): encoding and the network come after and
are not in the figure, so a client that reads slowly does not show up as underrun.

Owed audio (the WebSocket rule). A WebSocket context is driven by its client: between segments it
may have no text to speak because the client has not sent the next words yet. Time when the server
owed no audio does not count as underrun: the server owes audio from the moment a segment is
handed to the engine (``owe``) until that segment's last audio (``settle``). When it starts owing
again after the listener's audio ran out, the playhead waits from then, not from when it ran out.
Text the context holds while waiting for more (an unfinished sentence, the buffer delay) is the
client's pace, not owed audio. So the time to first audio of a later segment counts if the listener
had run out of audio by the time its text arrived (they wait for the reply), but silence while
the client thinks does not. An HTTP request owes audio from its first engine submission to its end.

Real-time factor: the owed wall time (from each ``owe`` to the last audio before the matching
``settle``, summed; for an HTTP request: first engine submission to last audio) divided by the
audio seconds produced. Below 1: faster than real time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Protocol


@dataclass(frozen=True)
class StreamReport:
    """What one finished stream felt."""

    route: str
    audio_s: float  # audio produced (seconds)
    busy_s: float  # owed wall time, first engine submission to last audio (idle time left out)
    underrun_s: float  # summed waits of a real-time listener (see the module docstring)

    @property
    def rtf(self) -> Optional[float]:
        """Real-time factor (busy / audio); None for a stream that produced no audio."""
        return self.busy_s / self.audio_s if self.audio_s > 0 else None


class StreamObserver(Protocol):
    def underrun(self, route: str, seconds: float) -> None:
        """A listener of a ``route`` stream waited ``seconds`` (called as it happens)."""

    def audio(self, route: str, seconds: float) -> None:
        """``seconds`` of a ``route`` stream's audio came out of the codec (called as it happens)."""

    def stream_finished(self, report: StreamReport) -> None:
        """A stream ended (called once per stream)."""


class StreamTiming:
    """One stream's playback model. Times are monotonic seconds (``time.perf_counter()``); the
    caller passes them in. Not thread-safe: fed from one event loop."""

    def __init__(self, route: str, observer: Optional[StreamObserver] = None, continuous: bool = False) -> None:
        """``continuous``: the stream owes audio from its first ``owe`` to ``close`` whatever
        ``settle`` says (an HTTP request: its segments follow each other with nothing to wait for)."""
        self.route = route
        self.observer = observer
        self.continuous = continuous
        self.audio_s = 0.0
        self.busy_s = 0.0
        self.underrun_s = 0.0
        self._play_end: Optional[float] = None  # when the audio received so far runs out (None: nothing yet)
        self._owed_since: Optional[float] = None  # start of the current owed interval (None: owes nothing)
        self._last_audio: Optional[float] = None  # last audio of the current owed interval
        self._closed = False

    @property
    def owing(self) -> bool:
        return self._owed_since is not None

    def owe(self, now: float) -> None:
        """The server starts owing audio (a segment is handed to the engine). Idempotent while owing."""
        if self._closed or self._owed_since is not None:
            return
        self._owed_since = now
        self._last_audio = None
        if self._play_end is not None and self._play_end < now:
            self._play_end = now  # the listener ran out while nothing was owed: not an underrun

    def audio(self, now: float, seconds: float) -> None:
        """``seconds`` of audio became available to the listener at ``now``."""
        if self._closed or seconds <= 0:
            return
        if self._owed_since is None:  # audio without a preceding owe(): owed from now
            self.owe(now)
        if self._play_end is None:
            self._play_end = now + seconds  # playback starts with the first chunk
        else:
            gap = now - self._play_end
            if gap > 0:
                self.underrun_s += gap
                if self.observer is not None:
                    self.observer.underrun(self.route, gap)
                self._play_end = now + seconds
            else:
                self._play_end += seconds
        self.audio_s += seconds
        self._last_audio = now
        if self.observer is not None:
            self.observer.audio(self.route, seconds)

    def settle(self, now: float) -> None:
        """The server owes no more audio for now (a segment ended; more may be owed later)."""
        if self._owed_since is None or (self.continuous and not self._closed):
            return
        if self._last_audio is not None:
            self.busy_s += self._last_audio - self._owed_since
        self._owed_since = None
        self._last_audio = None

    def __enter__(self) -> "StreamTiming":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close(time.perf_counter())

    def close(self, now: float) -> Optional[StreamReport]:
        """End the stream and report it once (later calls return None)."""
        if self._closed:
            return None
        self._closed = True
        self.settle(now)
        report = StreamReport(self.route, self.audio_s, self.busy_s, self.underrun_s)
        if self.observer is not None:
            self.observer.stream_finished(report)
        return report


__all__ = ["StreamObserver", "StreamReport", "StreamTiming"]
