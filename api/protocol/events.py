"""Server events of /tts/sse and /tts/websocket, with exactly the fields of protocol sections 4.2 and 5.4.

    chunk               type, data (base64), done=false, status_code=206, step_time (ms), context_id?, flush_id?
    timestamps          type, done=false, status_code=206, word_timestamps {words, start, end}, context_id?, flush_id?
    phoneme_timestamps  type, done=false, status_code=206, phoneme_timestamps {phonemes, start, end}, context_id?, flush_id?
    flush_done          type, done=false, flush_done=true, flush_id, status_code=206, context_id?
    done                type, done=true, status_code=206, context_id?
    error               type, done=true, status_code, error_code, title, message, error, request_id, doc_url?, context_id?

``context_id`` is omitted only when None, which only SSE requests without one produce: on the
WebSocket every event must carry it (SDKs drop events without one, protocol 5.6). An error about a
WebSocket message whose own id cannot be echoed (absent, over 512 characters, not a string) carries
``""`` (``api.protocol.requests.UNROUTABLE_CONTEXT_ID``): the key is there, and it names no context. ``done`` never
carries ``data`` (LiveKit reads any non-empty ``data`` as audio). The error event also carries the
legacy ``"error": "<title>: <message>"`` string that Python 2.x requires.

``to_json()`` is compact one-line JSON (UTF-8 text, no NaN); ``sse_frame(event)`` frames it as
``event: <type>\\ndata: <json>\\n\\n`` and never writes ``id:`` or ``retry:`` lines (the Python SDK's
SSE decoder breaks on them, protocol 4.1).

Message size: Python's ``websockets`` client rejects messages over 1 MiB. ``max_chunk_audio_bytes``
says how many audio bytes one chunk event may carry under ``CHUNK_MESSAGE_BUDGET_BYTES`` (half of
that), and ``split_audio`` cuts a longer buffer on sample boundaries.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from typing import ClassVar, Iterator, Optional, Sequence, Union

__all__ = [
    "CHUNK_MESSAGE_BUDGET_BYTES",
    "CLIENT_MAX_MESSAGE_BYTES",
    "SSE_KEEPALIVE",
    "STATUS_PARTIAL_CONTENT",
    "ChunkEvent",
    "DoneEvent",
    "ErrorEvent",
    "FlushDoneEvent",
    "PhonemeTimestampsEvent",
    "ServerEvent",
    "TimestampsEvent",
    "max_chunk_audio_bytes",
    "split_audio",
    "sse_frame",
]

#: status_code of every non-error event (Cartesia's examples use 206 even for done).
STATUS_PARTIAL_CONTENT = 206
#: Largest message the Python SDK's websockets client accepts (its ``max_size`` default).
CLIENT_MAX_MESSAGE_BYTES = 1 << 20
#: Target upper bound for one chunk message: half the client limit, to stay "well under" it.
CHUNK_MESSAGE_BUDGET_BYTES = CLIENT_MAX_MESSAGE_BYTES // 2
#: An SSE comment line; safe with both SDKs as long as no ``id:`` was ever sent (protocol 4.1).
SSE_KEEPALIVE = b": keepalive\n\n"


def _dumps(payload: dict) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _finite(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


def _with_ids(payload: dict, context_id: Optional[str], flush_id: Optional[int] = None) -> dict:
    if context_id is not None:
        payload["context_id"] = context_id
    if flush_id is not None:
        payload["flush_id"] = flush_id
    return payload


class ServerEvent:
    """Base of every server event: ``type`` names it on the wire and in the SSE ``event:`` line."""

    __slots__ = ()
    type: ClassVar[str]

    def to_dict(self) -> dict:
        raise NotImplementedError

    def to_json(self) -> str:
        """Compact one-line JSON (the WebSocket text frame, the SSE ``data:`` line)."""
        return _dumps(self.to_dict())


@dataclass(frozen=True, slots=True)
class ChunkEvent(ServerEvent):
    """Audio: ``audio`` is raw samples in the requested encoding (no container header).

    step_time_ms: server processing time for this chunk, in milliseconds.
    flush_id: the flush segment this audio belongs to (WebSocket; starts at 1), None to omit.
    """

    type: ClassVar[str] = "chunk"
    audio: bytes
    step_time_ms: float
    context_id: Optional[str] = None
    flush_id: Optional[int] = None

    def __post_init__(self) -> None:
        _finite("step_time_ms", self.step_time_ms)

    def to_dict(self) -> dict:
        payload = {
            "type": self.type,
            "data": base64.b64encode(self.audio).decode("ascii"),
            "done": False,
            "status_code": STATUS_PARTIAL_CONTENT,
            "step_time": round(float(self.step_time_ms), 3),
        }
        return _with_ids(payload, self.context_id, self.flush_id)


def _parallel(name: str, labels: Sequence[str], start_s: Sequence[float], end_s: Sequence[float]) -> None:
    if not (len(labels) == len(start_s) == len(end_s)):
        raise ValueError(
            f"{name}: labels, start and end must have the same length, got {len(labels)}, {len(start_s)}, {len(end_s)}"
        )
    for t in (*start_s, *end_s):
        _finite(f"{name} time", t)


@dataclass(frozen=True, slots=True)
class TimestampsEvent(ServerEvent):
    """Word timestamps: parallel lists; times are seconds from the start of the context's audio."""

    type: ClassVar[str] = "timestamps"
    words: Sequence[str]
    start_s: Sequence[float]
    end_s: Sequence[float]
    context_id: Optional[str] = None
    flush_id: Optional[int] = None

    def __post_init__(self) -> None:
        _parallel("word_timestamps", self.words, self.start_s, self.end_s)

    def to_dict(self) -> dict:
        payload = {
            "type": self.type,
            "done": False,
            "status_code": STATUS_PARTIAL_CONTENT,
            "word_timestamps": {
                "words": list(self.words),
                "start": [float(t) for t in self.start_s],
                "end": [float(t) for t in self.end_s],
            },
        }
        return _with_ids(payload, self.context_id, self.flush_id)


@dataclass(frozen=True, slots=True)
class PhonemeTimestampsEvent(ServerEvent):
    """Phoneme timestamps: parallel lists; times in seconds from the start of the context's audio."""

    type: ClassVar[str] = "phoneme_timestamps"
    phonemes: Sequence[str]
    start_s: Sequence[float]
    end_s: Sequence[float]
    context_id: Optional[str] = None
    flush_id: Optional[int] = None

    def __post_init__(self) -> None:
        _parallel("phoneme_timestamps", self.phonemes, self.start_s, self.end_s)

    def to_dict(self) -> dict:
        payload = {
            "type": self.type,
            "done": False,
            "status_code": STATUS_PARTIAL_CONTENT,
            "phoneme_timestamps": {
                "phonemes": list(self.phonemes),
                "start": [float(t) for t in self.start_s],
                "end": [float(t) for t in self.end_s],
            },
        }
        return _with_ids(payload, self.context_id, self.flush_id)


@dataclass(frozen=True, slots=True)
class FlushDoneEvent(ServerEvent):
    """Everything buffered before flush ``flush_id`` (1, 2, ...) has been sent."""

    type: ClassVar[str] = "flush_done"
    flush_id: int
    context_id: Optional[str] = None

    def to_dict(self) -> dict:
        payload = {
            "type": self.type,
            "done": False,
            "flush_done": True,
            "flush_id": self.flush_id,
            "status_code": STATUS_PARTIAL_CONTENT,
        }
        return _with_ids(payload, self.context_id)


@dataclass(frozen=True, slots=True)
class DoneEvent(ServerEvent):
    """The context (or SSE request) is complete; exactly one per context, always last."""

    type: ClassVar[str] = "done"
    context_id: Optional[str] = None

    def to_dict(self) -> dict:
        return _with_ids({"type": self.type, "done": True, "status_code": STATUS_PARTIAL_CONTENT}, self.context_id)


@dataclass(frozen=True, slots=True)
class ErrorEvent(ServerEvent):
    """A terminal error (``done: true``); build it with ``api.errors.error_event(exc, ...)``.

    status_code: the HTTP status the same error would have on a plain request (400, 404, 503...).
    """

    type: ClassVar[str] = "error"
    status_code: int
    error_code: Optional[str]
    title: str
    message: str
    request_id: str
    context_id: Optional[str] = None
    doc_url: Optional[str] = None

    def to_dict(self) -> dict:
        payload = {
            "type": self.type,
            "done": True,
            "status_code": self.status_code,
            "error_code": self.error_code,
            "title": self.title,
            "message": self.message,
            "error": f"{self.title}: {self.message}",
            "request_id": self.request_id,
        }
        if self.doc_url is not None:
            payload["doc_url"] = self.doc_url
        return _with_ids(payload, self.context_id)


AnyEvent = Union[ChunkEvent, TimestampsEvent, PhonemeTimestampsEvent, FlushDoneEvent, DoneEvent, ErrorEvent]


def sse_frame(event: ServerEvent) -> bytes:
    """``event: <type>\\ndata: <json>\\n\\n`` as UTF-8 (the JSON never contains a raw newline)."""
    return f"event: {event.type}\ndata: {event.to_json()}\n\n".encode("utf-8")


def _chunk_overhead_bytes(context_id: Optional[str]) -> int:
    """Bytes of a chunk message around its base64 payload, for the largest ids and step times."""
    probe = ChunkEvent(b"", step_time_ms=1e12, context_id=context_id, flush_id=2**63)
    return len(probe.to_json().encode("utf-8"))


def max_chunk_audio_bytes(
    sample_width: int,
    context_id: Optional[str] = None,
    budget_bytes: int = CHUNK_MESSAGE_BUDGET_BYTES,
) -> int:
    """Most audio bytes one chunk message may carry and stay within ``budget_bytes``.

    A whole number of samples (``sample_width`` bytes each: 4 for pcm_f32le, 2 for s16, 1 for
    G.711). base64 turns 3 bytes into 4 characters. Example: f32 with a 36-char UUID context_id
    under the 512 KiB default gives 393,084 bytes, about 2 s at 48 kHz.
    """
    if sample_width < 1:
        raise ValueError(f"sample_width must be >= 1, got {sample_width}")
    room = budget_bytes - _chunk_overhead_bytes(context_id)
    audio = (room // 4) * 3
    audio -= audio % math.lcm(3, sample_width)  # whole samples and whole base64 quads
    if audio < sample_width:
        raise ValueError(f"budget_bytes={budget_bytes} leaves no room for audio (context_id too long?)")
    return audio


def split_audio(
    audio: bytes,
    sample_width: int,
    context_id: Optional[str] = None,
    budget_bytes: int = CHUNK_MESSAGE_BUDGET_BYTES,
) -> Iterator[bytes]:
    """Cut ``audio`` into pieces that each fit one chunk message (see max_chunk_audio_bytes).

    Yields nothing for empty audio and ``audio`` itself when it already fits.
    """
    step = max_chunk_audio_bytes(sample_width, context_id, budget_bytes)
    view = memoryview(audio)
    for start in range(0, len(audio), step):
        yield bytes(view[start:start + step])
