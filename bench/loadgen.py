"""Load generator: N WebSocket contexts at a time, driven the way voice agents drive a TTS server.

    python bench/loadgen.py --url ws://127.0.0.1:8000 [--api-key K] [--voice ID] \\
        --concurrency 1,8,32,64 --duration 30 --ramp 5 --cancel-rate 0.05 --disconnect-rate 0.02 \\
        --seed 1 --out results/loadgen.json --plot results/loadgen.png

Works against any Cartesia-compatible ``/tts/websocket`` (only the URL given is ever contacted).
For each concurrency level N, N *agents* start over ``--ramp`` seconds and run for ``--duration``
seconds more; then no new utterance starts, and whatever is still running is cancelled at the hard
stop (``--grace`` seconds later), so a level never runs longer than ramp + duration + grace.

An agent keeps one socket (``--agents-per-socket`` > 1 multiplexes several agents on one) and speaks
utterances back to back, each on a fresh context id, as an LLM-fed agent does:

    1-3 sentences, each pushed in pieces of 2-6 words 20-60 ms apart, ``continue: true``, the full
    config on every message (as the SDK context helpers send it); sometimes a ``flush`` after a
    sentence; the end is ``{"transcript": "", "continue": false}`` (sometimes after a flush).

With probability ``--cancel-rate`` an utterance is cancelled at a random moment (0.05-1.5 s after
its first text), with ``--disconnect-rate`` the agent closes the whole socket then instead (and
reconnects for its next utterance). Every context on a closed socket ends as ``disconnected``.

Per stream (one utterance = one context), times from the client's monotonic clock:

    ttfa_s       first text message sent -> first audio chunk received
    ttfa_sentence_s  the first sentence's last piece sent -> first audio chunk: the server's part
                 of TTFA, without the agent's own text pacing (negative when the server starts
                 speaking a clause before the sentence ends)
    audio_s      audio received: bytes / sample width / sample rate
    wall_s       first text message sent -> terminal event (done / error)
    rtf          (terminal event - first audio) / audio_s; below 1 is faster than real time. Not
                 the RTF of bench/engine.py and bench/pipeline.py (submit -> last audio, / audio
                 seconds): this one leaves out TTFA and so the agent's own text pacing before it
    underrun_s   how long a listener who starts playing at the first chunk waits for audio
                 (``underrun()``): buffer_end starts at t_first + dur(first chunk); a chunk at t
                 after buffer_end adds a wait and restarts the buffer at t. A wait only counts
                 from the moment the text the chunk speaks was complete (its flush or the end of
                 input was sent, by the chunk's flush_id), since before that the server may be
                 waiting for the agent's own text.
    max_gap_s    the longest time between consecutive audio chunks; gaps_over_3s counts those
                 over 3 s (pipecat's receive limit)
    outcome      done | error | cancelled | disconnected (by this client) | connection_lost |
                 timeout (no message for --stream-timeout s: a failure) | cut (still running at
                 the hard stop)

A stream is *refused* when its error is a concurrency refusal (status 429: ``concurrency_limited``,
``too_many_contexts``); refusals are reported apart from other errors, and a refused agent backs
off (``backoff_s``) before its next utterance, as the SDKs do. *Failures* are timeouts, lost
connections, more than one terminal event, any message after a terminal event, malformed
messages, errors other than refusals, connection attempts that fail (``connect_errors``, by kind in
``sockets``) and agents that end by an exception (``agent_errors``: a bug in this client, each
printed to stderr). A ``context_closed`` error (or a repeated refusal, for a
refused context) answering text the agent sent while the context's terminal event was on its way
is counted (``late_input_errors``), not failed; audio after a terminal event always fails.

Per level: p50/p90/p99 of TTFA (every stream with audio), RTF and underrun (completed streams),
gaps over 3 s, aggregate xRT = audio seconds received / level wall seconds (level start to the last
stream's end), errors by code, the refusal rate (refused / streams), and the client's own CPU
seconds (it shares the machine with a local server). ``--out`` writes JSON with every per-stream
record and the summaries; ``--plot`` a PNG of latency and underrun against concurrency. The exit
status is 1 when a level has a failure (connection failures included) or ran no stream at all.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import math
import random
import sys
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench._common when run as a script
from bench._common import percentile  # noqa: E402  (one percentile for every bench script)

GAP_LIMIT_S = 3.0  # pipecat gives up on a context after 3 s without a message
REFUSAL_CODES = frozenset({"concurrency_limited", "too_many_contexts"})
SAMPLE_WIDTH = {"pcm_s16le": 2, "pcm_f32le": 4, "pcm_mulaw": 1, "pcm_alaw": 1}
OUTCOMES = ("done", "error", "cancelled", "disconnected", "connection_lost", "timeout", "cut")
FAILED_OUTCOMES = frozenset({"connection_lost", "timeout"})
# The answer to input for a context that already ended (protocol 5.5). Text the agent sent while
# the context's terminal event was on its way gets it; that is not a second terminal event.
LATE_INPUT_CODE = "context_closed"

# Agent-like replies: short, conversational, some numbers and punctuation for the normaliser.
SENTENCES = (
    "Sure, I can help you with that.",
    "Let me check the details of your booking for a moment.",
    "Your order was shipped on Monday and should arrive by Thursday.",
    "The total comes to forty two dollars and fifty cents, including tax.",
    "I have found three flights that match your dates.",
    "Would you like me to send the confirmation to your email address?",
    "Unfortunately, that time slot is no longer available.",
    "The next available appointment is on the 14th at 3:30 in the afternoon.",
    "I understand, and I am sorry for the trouble this has caused.",
    "Can you please confirm the last four digits of your card?",
    "Great, everything is set up and ready to go.",
    "Is there anything else I can do for you today?",
    "The weather tomorrow looks sunny, with a high of 24 degrees.",
    "Your account balance is 1,250 dollars as of this morning.",
    "I will transfer you to a specialist who can answer that question.",
    "Thanks for waiting, I appreciate your patience.",
    "Please hold on while I pull up your file.",
    "That option includes free cancellation up to 24 hours before check-in.",
    "Okay, I have updated your delivery address.",
    "Here is a quick summary of what we discussed.",
)


# --------------------------------------------------------------------------------------------------
# Metrics maths (pure; unit-tested in tests/test_loadgen.py)
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Chunk:
    """One audio message as the listener sees it."""

    t: float  # arrival time, s
    dur: float  # audio seconds it carries
    ready: float = -math.inf  # time from which waiting for it is the server's fault


def percentiles(values: Iterable[float], qs: Sequence[float] = (50, 90, 99)) -> dict[str, Optional[float]]:
    xs = list(values)
    return {f"p{q:g}": percentile(xs, q) for q in qs}


def b64_decoded_len(data: str) -> int:
    """Bytes a base64 string decodes to, without decoding it."""
    n = len(data)
    if n == 0:
        return 0
    pad = 2 if data.endswith("==") else 1 if data.endswith("=") else 0
    return n * 3 // 4 - pad


def audio_seconds(nbytes: int, sample_rate: int, sample_width: int) -> float:
    return nbytes / sample_width / sample_rate


def underrun(chunks: Sequence[Chunk]) -> float:
    """Seconds a real-time listener waits for audio after playback starts at the first chunk.

    Playhead model: the buffer runs out at ``buffer_end`` (first chunk's arrival + its duration).
    A later chunk arriving at t > buffer_end means the listener waited; only the part of the wait
    after ``chunk.ready`` counts, and playback restarts at t. Otherwise the chunk extends the
    buffer. Chunks must be in arrival order.
    """
    if not chunks:
        return 0.0
    buffer_end = chunks[0].t + chunks[0].dur
    waited = 0.0
    for c in chunks[1:]:
        if c.t > buffer_end:
            waited += max(0.0, c.t - max(buffer_end, c.ready))
            buffer_end = c.t + c.dur
        else:
            buffer_end += c.dur
    return waited


def gaps(times: Sequence[float], limit_s: float = GAP_LIMIT_S) -> tuple[float, int]:
    """(largest interval between consecutive times, how many intervals exceed ``limit_s``)."""
    deltas = [b - a for a, b in zip(times, times[1:])]
    return (max(deltas, default=0.0), sum(d > limit_s for d in deltas))


def real_time_factor(t_first_audio: Optional[float], t_end: Optional[float], audio_s: float) -> Optional[float]:
    """(end - first audio) / audio seconds; None when there is no audio or no end."""
    if t_first_audio is None or t_end is None or audio_s <= 0:
        return None
    return (t_end - t_first_audio) / audio_s


def xrt(total_audio_s: float, wall_s: float) -> float:
    """Aggregate speed: audio seconds produced per wall second (above 1: faster than real time)."""
    return total_audio_s / wall_s if wall_s > 0 else 0.0


def is_refusal(error_code: Optional[str], status_code: Optional[int]) -> bool:
    return status_code == 429 or (error_code or "") in REFUSAL_CODES


def backoff_s(attempt: int, retry_after_s: Optional[float], rng: random.Random) -> float:
    """Wait before the next utterance after ``attempt`` refusals in a row: the server's advice when
    it gives one, else the SDKs' 0.5 s x 2^n (capped at 8 s) with jitter, so refused agents do not
    hammer the server with instant retries."""
    if retry_after_s is not None and retry_after_s >= 0:
        return retry_after_s
    return min(8.0, 0.5 * 2 ** max(0, attempt - 1) * rng.uniform(0.75, 1.25))


def _retry_after(msg: dict) -> Optional[float]:
    for key, scale in (("retry_after_ms", 0.001), ("retry_after", 1.0), ("retry_after_s", 1.0)):
        value = msg.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value) * scale
    return None


# --------------------------------------------------------------------------------------------------
# Per-stream record and per-level summary
# --------------------------------------------------------------------------------------------------
@dataclass
class StreamRecord:
    """One utterance = one context. Times are seconds from the level's start."""

    level: int
    agent: int
    socket: int
    context_id: str
    start_s: float = 0.0  # first text message sent
    ttfa_s: Optional[float] = None
    ttfa_sentence_s: Optional[float] = None
    audio_s: float = 0.0
    wall_s: Optional[float] = None
    rtf: Optional[float] = None
    underrun_s: Optional[float] = None
    max_gap_s: float = 0.0
    gaps_over_3s: int = 0
    chunks: int = 0
    outcome: str = "cut"
    error_code: Optional[str] = None
    status_code: Optional[int] = None
    retry_after_s: Optional[float] = None  # retry advice on an error event, when the server gives one
    terminal_events: int = 0  # done/error events received (more than one is a violation)
    after_terminal: int = 0  # messages received after the terminal event (violation)
    late_input_errors: int = 0  # context_closed errors for text sent before the terminal event arrived
    after_client_end: int = 0  # messages after our cancel/close (allowed: they were in flight)
    after_client_end_s: float = 0.0  # how long after our cancel the last of them arrived
    malformed: int = 0  # messages missing type/done/status_code, or with an unknown type
    flushes: int = 0
    text_chars: int = 0
    timestamps: bool = False
    phonemes: bool = False  # asked for phoneme timestamps
    phoneme_events: int = 0

    @property
    def refused(self) -> bool:
        return self.outcome == "error" and is_refusal(self.error_code, self.status_code)

    @property
    def violations(self) -> list[str]:
        """What this stream did that a correct server never does (empty when fine)."""
        out = []
        if self.terminal_events > 1:
            out.append(f"{self.terminal_events} terminal events")
        if self.after_terminal:
            out.append(f"{self.after_terminal} message(s) after the terminal event")
        if self.malformed:
            out.append(f"{self.malformed} malformed message(s)")
        if self.outcome in FAILED_OUTCOMES:
            out.append(self.outcome)
        return out


def summarize(records: Sequence[StreamRecord], concurrency: int, wall_s: float, connect_errors: int = 0,
              agent_errors: int = 0) -> dict[str, Any]:
    """One level's figures (see the module docstring for the definitions). ``connect_errors``:
    connection attempts that failed; ``agent_errors``: agents that ended by an exception. Both are
    failures: a level whose agents never reached the server has no stream to fail, and must not
    read as a clean run."""
    done = [r for r in records if r.outcome == "done"]
    errors: dict[str, int] = {}
    for r in records:
        if r.outcome == "error":
            code = r.error_code or f"status_{r.status_code}"
            errors[code] = errors.get(code, 0) + 1
    refused = sum(r.refused for r in records)
    outcomes = {o: sum(r.outcome == o for r in records) for o in OUTCOMES}
    total_audio = sum(r.audio_s for r in records)
    return {
        "concurrency": concurrency,
        "wall_s": wall_s,
        "streams": len(records),
        "completed": len(done),
        "outcomes": outcomes,
        "errors_by_code": dict(sorted(errors.items())),
        "refused": refused,
        "refusal_rate": refused / len(records) if records else 0.0,
        "other_errors": outcomes["error"] - refused,
        "connect_errors": connect_errors,
        "agent_errors": agent_errors,
        "failures": (sum(bool(r.violations) for r in records) + outcomes["error"] - refused + connect_errors
                     + agent_errors),
        "ttfa_s": percentiles(r.ttfa_s for r in records if r.ttfa_s is not None),
        "ttfa_sentence_s": percentiles(r.ttfa_sentence_s for r in records if r.ttfa_sentence_s is not None),
        "rtf": percentiles(r.rtf for r in done if r.rtf is not None),
        "underrun_s": percentiles(r.underrun_s for r in done if r.underrun_s is not None),
        "streams_with_underrun": sum((r.underrun_s or 0.0) > 0 for r in done),
        "max_gap_s": max((r.max_gap_s for r in records), default=0.0),
        "gaps_over_3s": sum(r.gaps_over_3s for r in records),
        "max_after_cancel_s": max((r.after_client_end_s for r in records), default=0.0),
        "audio_s": total_audio,
        "xrt": xrt(total_audio, wall_s),
    }


# --------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------
@dataclass
class LoadConfig:
    url: str  # ws(s):// or http(s):// base URL, or the full /tts/websocket URL
    concurrency: list[int] = field(default_factory=lambda: [1, 8, 32, 64])
    duration_s: float = 30.0
    ramp_s: float = 5.0
    grace_s: float = 30.0  # after ramp + duration: running utterances may finish, then are cut
    pause_between_levels_s: float = 2.0
    api_key: Optional[str] = None
    cartesia_version: str = "2025-04-16"
    voice: Optional[str] = None  # None: the first voice GET /voices lists
    model_id: str = "sonic-3"
    language: str = "en"
    encoding: str = "pcm_s16le"
    sample_rate: int = 22050
    cancel_rate: float = 0.05
    disconnect_rate: float = 0.02
    flush_rate: float = 0.3  # probability of a flush after a sentence (and before the end of input)
    timestamps_rate: float = 0.25
    phonemes_rate: float = 0.0  # probability of add_phoneme_timestamps on a stream (lip-sync clients)
    max_buffer_delay_ms: Optional[int] = None  # None: not sent (the server's default)
    agents_per_socket: int = 1
    stream_timeout_s: float = 30.0  # an open stream with no message for this long fails
    seed: int = 1

    @property
    def ws_url(self) -> str:
        return websocket_url(self.url)

    @property
    def http_url(self) -> str:
        base = self.ws_url[: -len("/tts/websocket")]
        return "http" + base[2:] if base.startswith("ws") else base

    @property
    def sample_width(self) -> int:
        return SAMPLE_WIDTH[self.encoding]

    @property
    def output_format(self) -> dict[str, Any]:
        return {"container": "raw", "encoding": self.encoding, "sample_rate": self.sample_rate}

    def headers(self) -> dict[str, str]:
        h = {"Cartesia-Version": self.cartesia_version}
        if self.api_key:
            h["X-API-Key"] = self.api_key
        return h


def websocket_url(url: str) -> str:
    """ws(s)://host:port[/prefix]/tts/websocket from a ws(s) or http(s) base URL."""
    url = url.rstrip("/")
    if url.startswith("http://") or url.startswith("https://"):
        url = "ws" + url[4:]
    if not (url.startswith("ws://") or url.startswith("wss://")):
        raise ValueError(f"--url must start with ws://, wss://, http:// or https://, got {url!r}")
    return url if url.endswith("/tts/websocket") else url + "/tts/websocket"


def pick_voice(cfg: LoadConfig) -> str:
    """The first voice ``GET /voices`` lists (when --voice is not given)."""
    resp = httpx.get(cfg.http_url + "/voices", params={"limit": 1}, headers=cfg.headers(), timeout=10.0)
    resp.raise_for_status()
    data = resp.json().get("data") or []
    if not data:
        raise RuntimeError(f"{cfg.http_url}/voices lists no voice; pass --voice")
    return data[0]["id"]


# --------------------------------------------------------------------------------------------------
# The client: one socket, its reader, the streams routed by context id
# --------------------------------------------------------------------------------------------------
class Clock:
    """Seconds since the level started."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0


class LiveStream:
    """A stream being received: its record plus what the maths needs at the end."""

    def __init__(self, record: StreamRecord, cfg: LoadConfig, clock: Clock) -> None:
        self.record = record
        self.cfg = cfg
        self.clock = clock
        self.ended = asyncio.Event()  # terminal event, client end, or socket gone
        self.client_ended = False
        self.t_first_text: Optional[float] = None
        self.t_first_sentence: Optional[float] = None  # its last piece sent
        self.t_end: Optional[float] = None
        self.last_activity = clock.now()
        self.chunk_times: list[tuple[float, float, Optional[int]]] = []  # (t, dur, flush_id)
        self.complete_at: dict[int, float] = {}  # flush_id -> time its text was complete
        self.t_input_end: Optional[float] = None  # end-of-input message sent

    def on_message(self, msg: dict, t: float) -> None:
        rec = self.record
        self.last_activity = t
        kind = msg.get("type")
        if rec.terminal_events:
            code, status = msg.get("error_code"), msg.get("status_code")
            if kind == "error" and (code == LATE_INPUT_CODE or (rec.refused and is_refusal(code, status))):
                # answers text we sent before the terminal event arrived (a refused id is not
                # remembered by every server: each later message is refused again)
                rec.late_input_errors += 1
            else:
                rec.after_terminal += 1
                rec.terminal_events += kind in ("done", "error")
            return
        if self.client_ended:
            rec.after_client_end += 1
            if self.t_end is not None:
                rec.after_client_end_s = max(rec.after_client_end_s, t - self.t_end)
            return
        if not all(k in msg for k in ("type", "done", "status_code")) or kind not in (
                "chunk", "timestamps", "phoneme_timestamps", "flush_done", "done", "error"):
            rec.malformed += 1
        if kind == "chunk":
            data = msg.get("data") or ""
            dur = audio_seconds(b64_decoded_len(data), self.cfg.sample_rate, self.cfg.sample_width)
            if rec.ttfa_s is None and self.t_first_text is not None:
                rec.ttfa_s = t - self.t_first_text
            self.chunk_times.append((t, dur, msg.get("flush_id")))
            rec.audio_s += dur
            rec.chunks += 1
        elif kind == "phoneme_timestamps":
            rec.phoneme_events += 1
        elif kind in ("done", "error"):
            rec.terminal_events += 1
            rec.outcome = kind
            if kind == "error":
                rec.error_code = msg.get("error_code")
                rec.status_code = msg.get("status_code")
                rec.retry_after_s = _retry_after(msg)
            self._end(t)

    def socket_gone(self, by_client: bool) -> None:
        if not self.ended.is_set():
            self.client_ended = by_client
            self.record.outcome = "disconnected" if by_client else "connection_lost"
            self._end(self.clock.now())

    def end_by_client(self, outcome: str) -> None:
        if self.ended.is_set():
            return
        self.client_ended = True
        self.record.outcome = outcome
        self._end(self.clock.now())

    def _end(self, t: float) -> None:
        self.t_end = t
        self.ended.set()

    def finish(self) -> StreamRecord:
        """Fill in the derived figures (call once the stream ended)."""
        rec = self.record
        times = [c[0] for c in self.chunk_times]
        rec.max_gap_s, rec.gaps_over_3s = gaps(times)
        final = self.t_input_end if self.t_input_end is not None else math.inf
        chunks = [Chunk(t, d, self.complete_at.get(fid, final) if fid is not None else final)
                  for t, d, fid in self.chunk_times]
        rec.underrun_s = underrun(chunks) if chunks else None
        if times and self.t_first_sentence is not None:
            rec.ttfa_sentence_s = times[0] - self.t_first_sentence
        if self.t_first_text is not None and self.t_end is not None:
            rec.wall_s = self.t_end - self.t_first_text
        t_first_audio = times[0] if times else None
        if rec.outcome == "done":
            rec.rtf = real_time_factor(t_first_audio, self.t_end, rec.audio_s)
        return rec


class Socket:
    """One WebSocket connection and the streams sent on it; its reader routes by context id."""

    def __init__(self, ws: ClientConnection, clock: Clock, stats: "LevelStats") -> None:
        self.ws = ws
        self.clock = clock
        self.stats = stats
        self.streams: dict[str, LiveStream] = {}
        self.closing = False  # closed by this client on purpose
        self.finished = False  # the reader has ended every stream
        self.reader = asyncio.create_task(self._read(), name="loadgen-reader")

    def register(self, stream: LiveStream) -> bool:
        """Route ``stream``'s messages here; False once the socket is gone (open another)."""
        if self.finished or self.closing:
            return False
        self.streams[stream.record.context_id] = stream
        return True

    async def send(self, msg: dict) -> None:
        await self.ws.send(json.dumps(msg))

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                t = self.clock.now()
                if not isinstance(raw, str):
                    self.stats.count("binary_frames")
                    continue
                try:
                    msg = json.loads(raw)
                except ValueError:
                    self.stats.count("unparsable")
                    continue
                stream = self.streams.get(msg.get("context_id")) if isinstance(msg, dict) else None
                if stream is None:
                    kind = msg.get("type") if isinstance(msg, dict) else None
                    self.stats.count("unrouted", str(kind))
                    continue
                stream.on_message(msg, t)
        except ConnectionClosed as exc:
            if not self.closing:
                self.stats.count("server_closes", str(exc.rcvd.code if exc.rcvd else 1006))
        finally:
            self.finished = True
            for stream in self.streams.values():
                stream.socket_gone(by_client=self.closing)

    async def close(self) -> None:
        """Close on purpose: every open context on it ends as ``disconnected``."""
        if self.closing:
            return
        self.closing = True
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await self.ws.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await asyncio.shield(self.reader)
        if not self.reader.done():
            self.reader.cancel()
            with contextlib.suppress(BaseException):
                await self.reader


class Session:
    """What ``agents_per_socket`` agents share: a socket, reopened on demand after a close."""

    def __init__(self, index: int, cfg: LoadConfig, clock: Clock, stats: "LevelStats") -> None:
        self.index = index
        self.cfg = cfg
        self.clock = clock
        self.stats = stats
        self.socket: Optional[Socket] = None
        self._lock = asyncio.Lock()

    async def open(self) -> Socket:
        async with self._lock:
            if self.socket is None or self.socket.finished or self.socket.closing:
                ws = await connect(self.cfg.ws_url, additional_headers=self.cfg.headers(), open_timeout=10)
                self.socket = Socket(ws, self.clock, self.stats)
                self.stats.count("connections")
            return self.socket

    async def disconnect(self, sock: Socket) -> None:
        self.stats.count("disconnects")
        await sock.close()

    async def aclose(self) -> None:
        if self.socket is not None:
            await self.socket.close()


@dataclass
class LevelStats:
    """Socket-level counts (not per stream)."""

    connections: int = 0
    disconnects: int = 0  # closed by this client on purpose
    binary_frames: int = 0
    unparsable: int = 0
    connect_errors: dict[str, int] = field(default_factory=dict)  # "http_429", "OSError", ...
    server_closes: dict[str, int] = field(default_factory=dict)  # closed by the server / network, by code
    unrouted: dict[str, int] = field(default_factory=dict)  # messages for no known context, by type

    def count(self, name: str, key: Optional[str] = None) -> None:
        if key is None:
            setattr(self, name, getattr(self, name) + 1)
        else:
            d = getattr(self, name)
            d[key] = d.get(key, 0) + 1


# --------------------------------------------------------------------------------------------------
# Agents
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Utterance:
    sentences: list[list[str]]  # per sentence, its pieces (each keeps its trailing space)
    flush_after: list[bool]  # per sentence: flush after it (the last: flush before end of input)
    action: Optional[str]  # None | "cancel" | "disconnect"
    action_after_s: float  # from the start of the utterance (its first text is sent at once)
    timestamps: bool
    phonemes: bool = False


def plan_utterance(rng: random.Random, cfg: LoadConfig) -> Utterance:
    sentences = []
    for _ in range(rng.randint(1, 3)):
        words = rng.choice(SENTENCES).split()
        pieces, i = [], 0
        while i < len(words):
            n = rng.randint(2, 6)
            pieces.append(" ".join(words[i:i + n]) + " ")
            i += n
        sentences.append(pieces)
    flush_after = [rng.random() < cfg.flush_rate for _ in sentences]
    roll = rng.random()
    action = "cancel" if roll < cfg.cancel_rate else "disconnect" if roll < cfg.cancel_rate + cfg.disconnect_rate else None
    action_after_s = rng.uniform(0.05, 1.5)
    timestamps = rng.random() < cfg.timestamps_rate
    # drawn only when asked for, so a seed's plans without phonemes stay what they were
    phonemes = cfg.phonemes_rate > 0 and rng.random() < cfg.phonemes_rate
    return Utterance(sentences, flush_after, action, action_after_s, timestamps, phonemes)


class Agent:
    def __init__(self, index: int, level: int, session: Session, cfg: LoadConfig, voice: str, clock: Clock,
                 stop_new_at: float, hard_stop_at: float, records: list[StreamRecord]) -> None:
        self.index = index
        self.level = level
        self.session = session
        self.cfg = cfg
        self.voice = voice
        self.clock = clock
        self.stop_new_at = stop_new_at
        self.hard_stop_at = hard_stop_at
        self.records = records
        self.rng = random.Random(f"{cfg.seed}-{level}-{index}")

    async def run(self, start_at: float) -> None:
        await asyncio.sleep(max(0.0, start_at - self.clock.now()))
        refusals = 0  # in a row
        while self.clock.now() < self.stop_new_at:
            try:
                sock = await self.session.open()
            except (OSError, WebSocketException, asyncio.TimeoutError) as exc:
                key = f"http_{exc.response.status_code}" if isinstance(exc, InvalidStatus) else type(exc).__name__
                self.session.stats.count("connect_errors", key)
                await asyncio.sleep(min(1.0, max(0.0, self.stop_new_at - self.clock.now())))
                continue
            rec = await self.utterance(sock, plan_utterance(self.rng, self.cfg))
            refusals = refusals + 1 if rec is not None and rec.refused else 0
            if refusals:
                wait = backoff_s(refusals, rec.retry_after_s if rec else None, self.rng)
                await asyncio.sleep(min(wait, max(0.0, self.stop_new_at - self.clock.now())))

    def _message(self, cid: str, transcript: str, utt: Utterance, **extra: Any) -> dict:
        msg = {"context_id": cid, "model_id": self.cfg.model_id, "transcript": transcript,
               "voice": {"mode": "id", "id": self.voice}, "output_format": self.cfg.output_format,
               "language": self.cfg.language, "continue": True}
        if utt.timestamps:
            msg["add_timestamps"] = True
        if utt.phonemes:
            msg["add_phoneme_timestamps"] = True
        if self.cfg.max_buffer_delay_ms is not None:
            msg["max_buffer_delay_ms"] = self.cfg.max_buffer_delay_ms
        msg.update(extra)
        return msg

    async def _send_text(self, sock: Socket, stream: LiveStream, utt: Utterance) -> None:
        cid = stream.record.context_id
        flush_id = 1
        sent_at: Optional[float] = None  # when this sender's last piece went out
        for s, pieces in enumerate(utt.sentences):
            for piece in pieces:
                if stream.ended.is_set():
                    return  # refused, failed or cancelled: a client stops sending
                if stream.t_first_text is None:
                    stream.t_first_text = self.clock.now()
                    stream.record.start_s = stream.t_first_text
                await sock.send(self._message(cid, piece, utt))
                stream.record.text_chars += len(piece)
                stream.last_activity = sent_at = self.clock.now()
                await asyncio.sleep(self.rng.uniform(0.02, 0.06))  # LLM token pacing
            if stream.t_first_sentence is None:
                # not last_activity: the reader sets that on every message received (during the
                # pacing sleep above, too), which would move the sentence's end to a chunk's arrival
                stream.t_first_sentence = sent_at
            if utt.flush_after[s] and not stream.ended.is_set():
                await sock.send(self._message(cid, "", utt, flush=True))
                stream.complete_at[flush_id] = self.clock.now()
                stream.record.flushes += 1
                flush_id += 1
        if stream.ended.is_set():
            return
        await sock.send(self._message(cid, "", utt, **{"continue": False}))
        stream.t_input_end = stream.complete_at[flush_id] = stream.last_activity = self.clock.now()

    async def utterance(self, sock: Socket, utt: Utterance) -> Optional[StreamRecord]:
        cid = str(uuid.uuid4())
        rec = StreamRecord(self.level, self.index, self.session.index, cid, timestamps=utt.timestamps,
                           phonemes=utt.phonemes)
        stream = LiveStream(rec, self.cfg, self.clock)
        if not sock.register(stream):
            return None  # closed meanwhile (another agent on it disconnected): the caller reopens
        sender = asyncio.create_task(self._send_text(sock, stream, utt), name=f"loadgen-send-{cid}")
        # the first text goes out at once, so the action is timed from now
        action_at = self.clock.now() + utt.action_after_s if utt.action else None
        try:
            while not stream.ended.is_set():
                if sender.done() and not sender.cancelled() and sender.exception() is not None:
                    if not isinstance(sender.exception(), ConnectionClosed):
                        raise sender.exception()  # a bug here, not the server's
                    # the socket is gone: its reader ends this stream
                now = self.clock.now()
                deadlines = [stream.last_activity + self.cfg.stream_timeout_s, self.hard_stop_at]
                if action_at is not None:
                    deadlines.append(action_at)
                wait = min(deadlines) - now
                if wait > 0:
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel
                    # that arrives as the inner wait completes (the gateway's sends had that bug)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await stream.ended.wait()
                elif action_at is not None and now >= action_at:
                    if utt.action == "disconnect":
                        stream.end_by_client("disconnected")
                        await self.session.disconnect(sock)
                    else:
                        await self._cancel(sock, stream, "cancelled")
                elif now >= self.hard_stop_at:
                    await self._cancel(sock, stream, "cut")
                else:
                    await self._cancel(sock, stream, "timeout")
        finally:
            if not sender.done():
                sender.cancel()
            with contextlib.suppress(BaseException):
                await sender
            self.records.append(stream.finish())
        return rec

    @staticmethod
    async def _cancel(sock: Socket, stream: LiveStream, outcome: str) -> None:
        # we stop listening and tell the server, as a client would
        stream.end_by_client(outcome)
        with contextlib.suppress(Exception):  # bounded: a server that stops reading must not hang us
            async with asyncio.timeout(5.0):
                await sock.send({"context_id": stream.record.context_id, "cancel": True})


# --------------------------------------------------------------------------------------------------
# Levels and the whole run
# --------------------------------------------------------------------------------------------------
@dataclass
class LevelResult:
    concurrency: int
    summary: dict[str, Any]
    stats: LevelStats
    records: list[StreamRecord]

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary, "streams": [dataclasses.asdict(r) for r in self.records]}


async def run_level(cfg: LoadConfig, concurrency: int, voice: str) -> LevelResult:
    clock = Clock()
    cpu0 = time.process_time()
    stats = LevelStats()
    stop_new_at = cfg.ramp_s + cfg.duration_s
    hard_stop_at = stop_new_at + cfg.grace_s
    per = max(1, cfg.agents_per_socket)
    sessions = [Session(i, cfg, clock, stats) for i in range(math.ceil(concurrency / per))]
    records: list[StreamRecord] = []
    agents = [Agent(i, concurrency, sessions[i // per], cfg, voice, clock, stop_new_at, hard_stop_at, records)
              for i in range(concurrency)]
    tasks = [asyncio.create_task(a.run(cfg.ramp_s * i / concurrency), name=f"loadgen-agent-{i}")
             for i, a in enumerate(agents)]
    # the agents obey the hard stop themselves; this bound only guards against a stuck send
    _, pending = await asyncio.wait(tasks, timeout=hard_stop_at + 10.0)
    for task in pending:
        task.cancel()
    agent_errors = report_agent_errors(concurrency, await asyncio.gather(*tasks, return_exceptions=True))
    for session in sessions:
        await session.aclose()
    ends = [r.start_s + r.wall_s for r in records if r.wall_s is not None]
    wall = max(ends, default=clock.now())
    summary = summarize(records, concurrency, wall, sum(stats.connect_errors.values()), agent_errors)
    summary["client_cpu_s"] = time.process_time() - cpu0
    summary["sockets"] = dataclasses.asdict(stats)
    return LevelResult(concurrency, summary, stats, records)


def report_agent_errors(concurrency: int, outcomes: Sequence[Any]) -> int:
    """Print every agent that ended by an exception (``outcomes``: what gathering the agents with
    ``return_exceptions`` gave) to stderr and return how many. An agent raises only on a bug in this
    client (``utterance`` re-raises its sender's errors on purpose) or when it was cancelled, still
    running 10 s past the hard stop: either way its level's figures are not the server's alone."""
    errors = 0
    for i, outcome in enumerate(outcomes):
        if isinstance(outcome, asyncio.CancelledError):
            print(f"loadgen: C={concurrency} agent {i} was still running 10 s after the hard stop; cancelled",
                  file=sys.stderr, flush=True)
        elif isinstance(outcome, BaseException):
            print(f"loadgen: C={concurrency} agent {i} failed:", file=sys.stderr)
            traceback.print_exception(outcome, file=sys.stderr)
            sys.stderr.flush()
        else:
            continue
        errors += 1
    return errors


async def run(cfg: LoadConfig, progress: bool = False) -> list[LevelResult]:
    voice = cfg.voice or await asyncio.to_thread(pick_voice, cfg)
    cfg.voice = voice
    results = []
    for i, n in enumerate(cfg.concurrency):
        if i:
            await asyncio.sleep(cfg.pause_between_levels_s)
        result = await run_level(cfg, n, voice)
        results.append(result)
        if progress:
            print(format_row(result.summary), flush=True)
    return results


# --------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------
def _ms(x: Optional[float]) -> str:
    return f"{x * 1000:.0f}" if x is not None else "-"


TABLE_HEADER = (f"{'C':>4} {'streams':>7} {'done':>5} {'refused':>7} {'other err':>9} {'conn err':>8} {'fail':>4} "
                f"{'TTFA p50':>8} {'p90':>6} {'p99':>6} {'sent p50':>8} {'RTF p50':>7} {'underrun p99':>12} {'gaps>3s':>7} {'xRT':>6}")


def format_row(s: dict[str, Any]) -> str:
    rtf = s["rtf"]["p50"]
    return (f"{s['concurrency']:>4} {s['streams']:>7} {s['completed']:>5} {s['refused']:>7} {s['other_errors']:>9} "
            f"{s.get('connect_errors', 0):>8} {s['failures']:>4} {_ms(s['ttfa_s']['p50']):>8} {_ms(s['ttfa_s']['p90']):>6} {_ms(s['ttfa_s']['p99']):>6} "
            f"{_ms(s['ttfa_sentence_s']['p50']):>8} "
            f"{(f'{rtf:.2f}' if rtf is not None else '-'):>7} {_ms(s['underrun_s']['p99']):>12} "
            f"{s['gaps_over_3s']:>7} {s['xrt']:>6.2f}")


def level_problems(summary: dict[str, Any]) -> list[str]:
    """Why a level's figures are not a clean run (empty when they are): failures, connection
    attempts that failed (by kind), agents that crashed, or no stream at all."""
    problems = []
    connect = summary.get("sockets", {}).get("connect_errors") or {}
    if connect:
        kinds = ", ".join(f"{kind} x{n}" for kind, n in sorted(connect.items()))
        problems.append(f"{sum(connect.values())} connection attempt(s) failed ({kinds})")
    if summary.get("agent_errors"):
        problems.append(f"{summary['agent_errors']} agent(s) ended by an exception (printed above)")
    others = summary["failures"] - summary.get("connect_errors", 0) - summary.get("agent_errors", 0)
    if others:
        problems.append(f"{others} stream failure(s)")
    if not summary["streams"]:
        problems.append("no stream ran")
    return problems


def write_json(path: Path, cfg: LoadConfig, results: list[LevelResult]) -> None:
    from bench._common import machine

    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"tool": "bench/loadgen.py", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "client_machine": machine(),
           "config": dataclasses.asdict(cfg), "levels": [r.to_json() for r in results]}
    path.write_text(json.dumps(doc, indent=1))


def write_plot(path: Path, results: list[LevelResult], title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = [r.concurrency for r in results]

    def series(key: str, q: str) -> list[float]:
        return [(r.summary[key][q] or 0.0) * 1000 if r.summary[key][q] is not None else float("nan") for r in results]

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
    top.plot(c, series("ttfa_s", "p50"), "o-", label="TTFA p50")
    top.plot(c, series("ttfa_s", "p99"), "o--", label="TTFA p99")
    top.plot(c, series("underrun_s", "p99"), "s-", label="underrun p99")
    top.set_ylabel("ms")
    top.set_xscale("log")
    top.grid(True, which="both", alpha=0.3)
    top.legend()
    top.set_title(title or "latency and underrun against concurrency")
    bottom.plot(c, [r.summary["xrt"] for r in results], "o-", color="tab:green", label="aggregate xRT")
    bottom.set_ylabel("xRT (audio s / wall s)")
    bottom.set_xlabel("concurrent contexts")
    bottom.grid(True, which="both", alpha=0.3)
    right = bottom.twinx()
    right.plot(c, [r.summary["refusal_rate"] * 100 for r in results], "x:", color="tab:red", label="refused %")
    right.set_ylabel("refused %")
    right.set_ylim(0, max([5.0] + [r.summary["refusal_rate"] * 110 for r in results]))
    lines = bottom.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    bottom.legend(lines, [ln.get_label() for ln in lines], loc="upper left")
    bottom.set_xticks(c, [str(x) for x in c])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: Optional[Sequence[str]] = None) -> tuple[LoadConfig, Optional[Path], Optional[Path]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="ws(s):// or http(s):// base URL of the server")
    p.add_argument("--api-key")
    p.add_argument("--voice", help="voice id (default: the first one GET /voices lists)")
    p.add_argument("--model-id", default="sonic-3")
    p.add_argument("--language", default="en")
    p.add_argument("--concurrency", default="1,8,32,64", help="comma-separated levels")
    p.add_argument("--duration", type=float, default=30.0, help="seconds per level after the ramp")
    p.add_argument("--ramp", type=float, default=5.0, help="seconds over which the agents start")
    p.add_argument("--grace", type=float, default=30.0, help="seconds after the duration before running streams are cut")
    p.add_argument("--cancel-rate", type=float, default=0.05)
    p.add_argument("--disconnect-rate", type=float, default=0.02)
    p.add_argument("--flush-rate", type=float, default=0.3)
    p.add_argument("--timestamps-rate", type=float, default=0.25)
    p.add_argument("--phonemes-rate", type=float, default=0.0, help="share of streams asking for phoneme timestamps")
    p.add_argument("--max-buffer-delay-ms", type=int)
    p.add_argument("--agents-per-socket", type=int, default=1)
    p.add_argument("--stream-timeout", type=float, default=30.0)
    p.add_argument("--encoding", default="pcm_s16le", choices=sorted(SAMPLE_WIDTH))
    p.add_argument("--sample-rate", type=int, default=22050)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, help="JSON file with every stream and the summaries")
    p.add_argument("--plot", type=Path, help="PNG of latency, underrun and xRT against concurrency")
    a = p.parse_args(argv)
    levels = [int(x) for x in a.concurrency.split(",") if x.strip()]
    if not levels or min(levels) < 1:
        p.error("--concurrency needs positive integers, e.g. 1,8,32")
    for name in ("cancel_rate", "disconnect_rate", "flush_rate", "timestamps_rate", "phonemes_rate"):
        if not 0.0 <= getattr(a, name) <= 1.0:
            p.error(f"--{name.replace('_', '-')} must be within [0, 1]")
    if a.cancel_rate + a.disconnect_rate > 1.0:
        p.error("--cancel-rate + --disconnect-rate must not exceed 1")
    try:
        websocket_url(a.url)
    except ValueError as exc:
        p.error(str(exc))
    return LoadConfig(url=a.url, concurrency=levels, duration_s=a.duration, ramp_s=a.ramp, grace_s=a.grace,
                      api_key=a.api_key, voice=a.voice, model_id=a.model_id, language=a.language,
                      encoding=a.encoding, sample_rate=a.sample_rate, cancel_rate=a.cancel_rate,
                      disconnect_rate=a.disconnect_rate, flush_rate=a.flush_rate, timestamps_rate=a.timestamps_rate,
                      phonemes_rate=a.phonemes_rate,
                      max_buffer_delay_ms=a.max_buffer_delay_ms, agents_per_socket=a.agents_per_socket,
                      stream_timeout_s=a.stream_timeout, seed=a.seed), a.out, a.plot


def main(argv: Optional[Sequence[str]] = None) -> int:
    cfg, out, plot = parse_args(argv)
    print(f"target {cfg.ws_url}; levels {cfg.concurrency}; {cfg.ramp_s:g} s ramp + {cfg.duration_s:g} s each", flush=True)
    print("TTFA from the first text sent; 'sent' from the first sentence fully sent; times in ms", flush=True)
    print(TABLE_HEADER, flush=True)
    results = asyncio.run(run(cfg, progress=True))
    if out:
        write_json(out, cfg, results)
        print(f"wrote {out}")
    if plot:
        write_plot(plot, results, title=f"{cfg.ws_url}")
        print(f"wrote {plot}")
    failed = False
    for r in results:
        for problem in level_problems(r.summary):
            print(f"FAILED C={r.concurrency}: {problem}", flush=True)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
