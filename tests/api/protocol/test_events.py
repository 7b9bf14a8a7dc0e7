"""api/protocol/events.py: exact JSON shapes (checked against the cartesia 4.2.0 SDK's own types),
SSE framing through the SDK's SSE decoder, and chunk splitting under the 1 MiB client limit."""

from __future__ import annotations

import base64
import json
import math

import pytest
from cartesia._streaming import SSEDecoder
from cartesia.types import tts_sse_event as sse_types
from cartesia.types import websocket_response as ws_types

from api.protocol.events import (
    CHUNK_MESSAGE_BUDGET_BYTES,
    CLIENT_MAX_MESSAGE_BYTES,
    SSE_KEEPALIVE,
    ChunkEvent,
    DoneEvent,
    ErrorEvent,
    FlushDoneEvent,
    PhonemeTimestampsEvent,
    TimestampsEvent,
    max_chunk_audio_bytes,
    split_audio,
    sse_frame,
)

CTX = "0b4c5a64-2f0e-4a0b-9d7e-3f1c2b5a6d7e"


def as_dict(event) -> dict:
    text = event.to_json()
    data = json.loads(text)
    assert text == json.dumps(data, separators=(",", ":"), ensure_ascii=False)  # compact, one line
    return data


# --- exact shapes ---------------------------------------------------------------------------------


def test_chunk_shape():
    d = as_dict(ChunkEvent(b"\x01\x02\x03\x04", step_time_ms=12.34567, context_id=CTX, flush_id=2))
    assert d == {"type": "chunk", "data": "AQIDBA==", "done": False, "status_code": 206, "step_time": 12.346,
                 "context_id": CTX, "flush_id": 2}
    assert list(d)[:2] == ["type", "data"]


def test_chunk_without_ids_omits_them():
    d = as_dict(ChunkEvent(b"", step_time_ms=0))
    assert d == {"type": "chunk", "data": "", "done": False, "status_code": 206, "step_time": 0.0}


def test_timestamps_shape():
    d = as_dict(TimestampsEvent(["Hello,", "wörld."], [0.0, 0.42], [0.4, 0.9], context_id=CTX, flush_id=1))
    assert d == {"type": "timestamps", "done": False, "status_code": 206,
                 "word_timestamps": {"words": ["Hello,", "wörld."], "start": [0.0, 0.42], "end": [0.4, 0.9]},
                 "context_id": CTX, "flush_id": 1}
    assert "wörld." in TimestampsEvent(["wörld."], [0], [1]).to_json()  # UTF-8, not \\u escapes


def test_phoneme_timestamps_shape():
    d = as_dict(PhonemeTimestampsEvent(["h", "ə"], [0, 0.1], [0.1, 0.2], context_id=CTX))
    assert d == {"type": "phoneme_timestamps", "done": False, "status_code": 206,
                 "phoneme_timestamps": {"phonemes": ["h", "ə"], "start": [0.0, 0.1], "end": [0.1, 0.2]},
                 "context_id": CTX}


def test_flush_done_shape():
    assert as_dict(FlushDoneEvent(3, context_id=CTX)) == {
        "type": "flush_done", "done": False, "flush_done": True, "flush_id": 3, "status_code": 206, "context_id": CTX}


def test_done_shape_has_no_data():
    d = as_dict(DoneEvent(context_id=CTX))
    assert d == {"type": "done", "done": True, "status_code": 206, "context_id": CTX}
    assert "data" not in d
    assert as_dict(DoneEvent()) == {"type": "done", "done": True, "status_code": 206}


def test_error_shape_with_legacy_error_string():
    d = as_dict(ErrorEvent(404, "voice_not_found", "Voice not found", "voice 'x' not found", "req-1", context_id=CTX))
    assert d == {"type": "error", "done": True, "status_code": 404, "error_code": "voice_not_found",
                 "title": "Voice not found", "message": "voice 'x' not found",
                 "error": "Voice not found: voice 'x' not found", "request_id": "req-1", "context_id": CTX}
    with_doc = as_dict(ErrorEvent(400, None, "T", "M", "r", doc_url="https://docs.example/x"))
    assert with_doc["doc_url"] == "https://docs.example/x" and with_doc["error_code"] is None
    assert "context_id" not in with_doc


@pytest.mark.parametrize(
    "event, sdk_type",
    [
        (ChunkEvent(b"\x00\x01", 1.5, CTX, 1), ws_types.Chunk),
        (TimestampsEvent(["a"], [0.0], [0.5], CTX, 1), ws_types.Timestamps),
        (PhonemeTimestampsEvent(["a"], [0.0], [0.5], CTX), ws_types.PhonemeTimestamps),
        (FlushDoneEvent(1, CTX), ws_types.FlushDone),
        (DoneEvent(CTX), ws_types.Done),
        (ErrorEvent(500, "internal_error", "Internal server error", "oops", "r", CTX), ws_types.Error),
    ],
)
def test_websocket_events_validate_as_the_sdk_types(event, sdk_type):
    data = as_dict(event)
    model = sdk_type.model_validate(data, strict=True)
    fields = set(sdk_type.model_fields)
    assert set(data) - fields <= {"error"}  # only the documented legacy key is extra
    required = {name for name, f in sdk_type.model_fields.items() if f.is_required()}
    assert required <= set(data)
    if isinstance(event, ChunkEvent):
        assert model.audio == b"\x00\x01"
    if isinstance(event, ErrorEvent):
        assert model.error == data["error"]


@pytest.mark.parametrize(
    "event, sdk_type",
    [
        (ChunkEvent(b"\x00\x01", 1.5), sse_types.TTSSSEChunkEvent),
        (TimestampsEvent(["a"], [0.0], [0.5]), sse_types.TTSSSETimestampsEvent),
        (PhonemeTimestampsEvent(["a"], [0.0], [0.5]), sse_types.TTSSSEPhonemeTimestampsEvent),
        (DoneEvent(), sse_types.TTSSSEDoneEvent),
        (ErrorEvent(400, "invalid_request", "Invalid request", "bad", "r"), sse_types.TTSSSEErrorEvent),
    ],
)
def test_sse_events_validate_as_the_sdk_types(event, sdk_type):
    data = as_dict(event)
    sdk_type.model_validate(data, strict=True)
    required = {name for name, f in sdk_type.model_fields.items() if f.is_required()}
    assert required <= set(data)


def test_events_reject_non_finite_numbers_and_ragged_timestamps():
    with pytest.raises(ValueError, match="step_time_ms must be finite"):
        ChunkEvent(b"", float("nan"))
    with pytest.raises(ValueError, match="same length, got 2, 1, 2"):
        TimestampsEvent(["a", "b"], [0.0], [0.1, 0.2])
    with pytest.raises(ValueError, match="must be finite"):
        TimestampsEvent(["a"], [math.inf], [0.1])


# --- SSE framing ----------------------------------------------------------------------------------


def test_sse_frame_bytes():
    assert sse_frame(DoneEvent("c")) == b'event: done\ndata: {"type":"done","done":true,"status_code":206,"context_id":"c"}\n\n'
    for event in (ChunkEvent(b"\n\n", 1.0), TimestampsEvent(["a\nb"], [0], [1]), ErrorEvent(400, "x", "T", "line\nbreak", "r")):
        frame = sse_frame(event)
        assert frame.startswith(f"event: {event.type}\ndata: ".encode()) and frame.endswith(b"\n\n")
        assert frame.count(b"\n") == 3  # event line, data line, blank line: the JSON has no raw newline
        assert b"\nid:" not in frame and b"\nretry:" not in frame


def test_sse_stream_decodes_with_the_sdk_decoder():
    events = [ChunkEvent(b"\x00\x01" * 10, 2.0, "c"), TimestampsEvent(["Hi."], [0.0], [0.3], "c"), DoneEvent("c")]
    stream = b"".join([sse_frame(events[0]), SSE_KEEPALIVE, sse_frame(events[1]), sse_frame(events[2])])
    # deliver in awkward pieces, as a network would
    pieces = [stream[i:i + 7] for i in range(0, len(stream), 7)]
    decoded = list(SSEDecoder().iter_bytes(iter(pieces)))
    assert [e.event for e in decoded] == ["chunk", "timestamps", "done"]
    assert [e.json() for e in decoded] == [e.to_dict() for e in events]
    assert all(e.id is None and e.retry is None for e in decoded)


# --- message size ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sample_width", [1, 2, 4])
@pytest.mark.parametrize("context_id", [None, CTX, "é" * 512])
def test_max_chunk_fits_the_budget(sample_width, context_id):
    n = max_chunk_audio_bytes(sample_width, context_id)
    assert n % sample_width == 0 and n % 3 == 0
    biggest = ChunkEvent(b"\xff" * n, step_time_ms=1e12, context_id=context_id, flush_id=2**63)
    size = len(biggest.to_json().encode("utf-8"))
    assert size <= CHUNK_MESSAGE_BUDGET_BYTES < CLIENT_MAX_MESSAGE_BYTES
    # and it is tight: one more sample-and-quad step would not fit
    step = math.lcm(3, sample_width)
    over = ChunkEvent(b"\xff" * (n + step), step_time_ms=1e12, context_id=context_id, flush_id=2**63)
    assert len(over.to_json().encode("utf-8")) > CHUNK_MESSAGE_BUDGET_BYTES


def test_max_chunk_rejects_impossible_budgets():
    with pytest.raises(ValueError, match="sample_width"):
        max_chunk_audio_bytes(0)
    with pytest.raises(ValueError, match="no room for audio"):
        max_chunk_audio_bytes(4, "x" * 200, budget_bytes=200)


def test_split_audio_round_trips_on_sample_boundaries():
    audio = bytes(range(256)) * 5000  # 1.28 MB, more than two messages' worth
    pieces = list(split_audio(audio, 4, CTX))
    assert b"".join(pieces) == audio and len(pieces) == 4
    assert all(len(p) % 4 == 0 for p in pieces[:-1])
    assert all(len(ChunkEvent(p, 1.0, CTX, 1).to_json()) <= CHUNK_MESSAGE_BUDGET_BYTES for p in pieces)
    assert list(split_audio(b"", 2)) == []
    assert list(split_audio(b"\x00\x01", 2)) == [b"\x00\x01"]
    assert base64.b64decode(json.loads(ChunkEvent(pieces[0], 1.0).to_json())["data"]) == pieces[0]


def test_unroutable_websocket_error_still_carries_the_context_id_key():
    """pipecat indexes msg["context_id"]: an error about a message with no usable id carries ""."""
    d = as_dict(ErrorEvent(400, "invalid_json", "Invalid JSON", "message is not valid JSON", "c:", context_id=""))
    assert d["context_id"] == "" and d["done"] is True
