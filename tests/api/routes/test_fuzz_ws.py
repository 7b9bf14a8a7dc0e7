"""Fuzzing /tts/websocket on a live gateway (issue 9, build item 5).

One socket. A well-formed context ("fz-good") is speaking its first segment while generated frames
arrive on the same socket: random JSON, valid messages with fields replaced by wrong types, huge or
non-finite numbers, deep nesting, long strings, unpaired surrogates or unknown fields, truncated
JSON, text that is not JSON, binary frames that are not UTF-8, messages over the size limit, and
cancel variants. Contracts:

- every frame the parser refuses gets exactly one answer, in order: an ``error`` event (done true,
  status_code an int 4xx, the four keys every message carries) whose ``context_id`` is the one the
  frame named, or "" when it named none that can be echoed; a valid cancel gets none, and from
  then on nothing is answered for the id it named (the SDKs stop routing a cancelled id's events);
- the socket stays open, and "fz-good" still gets all of its audio, its flush_done and its done;
- a few valid contexts with generated transcripts, run meanwhile, each end in done (or a 4xx).

Valid generation messages are not sent in bulk (they would synthesise); the expectation of each
frame is what ``parse_ws_message`` (the server's own parser) says about it. Per run: about 825
bulk frames (150 batches of 4-8, valid generations left out) and 6 valid contexts.
"""

from __future__ import annotations

import json
import time
from typing import Optional, Union

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from websockets.sync.client import ClientConnection, connect

from api.protocol.errors import ProtocolError
from api.protocol.requests import MAX_WS_MESSAGE_BYTES, WsCancelRequest, parse_ws_message
from tests.api.routes.audio_checks import expected_bytes
from tests.api.routes.ws_helpers import TERMINAL, audio_of, check_message, gen, short
from tests.api.test_fuzz_requests import JSON_VALUES, VALID_TEXT, batches, bodies, render, tts_body

pytestmark = pytest.mark.timeout(300)

GOOD = "fz-good"
Frame = Union[str, bytes]

# No shrinking: the socket is shared by every example, so a replayed example would read the
# answers of the failing one. The failing batch is reported as generated.
_WS_FUZZ = settings(deadline=None, database=None, phases=[Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_CANCELS = st.tuples(
    # not "fz-ctx", the id the other frames name: cancelled, its errors would all go unanswered
    st.one_of(st.just("fz-cancelled"), st.text(max_size=10).map(lambda s: "fz-" + s), JSON_VALUES),
    st.one_of(st.just(True), JSON_VALUES),
    st.dictionaries(st.sampled_from(["transcript", "continue", "flush", "model_id", "x"]), JSON_VALUES, max_size=2),
).map(lambda t: render({"context_id": t[0], "cancel": t[1], **t[2]}))
_WS_BASE = tts_body(context_id="fz-ctx", **{"continue": True})
FRAMES = st.one_of(
    bodies(_WS_BASE).map(lambda b: b.decode("utf-8", "surrogatepass") if _is_utf8(b) else b),  # text frames
    bodies(_WS_BASE),  # binary frames (read as UTF-8 JSON too)
    _CANCELS,
    st.sampled_from([
        "", " ", "null", "[]", "{}", '{"context_id": null}', '{"context_id": "fz-big", "transcript": "'
        + "a" * MAX_WS_MESSAGE_BYTES + '"}', b"\xff" * 10, b"\x00", '{"context_id": "' + "L" * 5000 + '"}',
    ]),
)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def expected_answer(frame: Frame, cancelled: set[str]) -> Optional[str]:
    """The context_id of the one error this frame gets; None when it gets no answer: a valid cancel
    (its id joins ``cancelled``, the ids cancelled on this socket so far) or a frame naming a
    cancelled id. Raises LookupError for a valid generation (never sent in bulk)."""
    try:
        msg = parse_ws_message(frame)
    except ProtocolError as exc:
        return None if exc.context_id and exc.context_id in cancelled else exc.context_id
    if isinstance(msg, WsCancelRequest):
        cancelled.add(msg.context_id)
        return None
    raise LookupError("valid generation message")


class Socket:
    """The shared socket: reads answers in order and sets the good context's messages aside."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.good: list[dict] = []
        self.others: dict[str, list[dict]] = {}
        self.frames_sent = 0
        self.cancelled: set[str] = set()  # ids cancelled on this socket: nothing more is sent for them

    def _recv(self, deadline: float) -> Optional[dict]:
        """One message: None when it was the good or a tracked context's (set aside)."""
        msg = check_message(self.ws.recv(timeout=max(deadline - time.monotonic(), 0.01)))
        if msg["context_id"] == GOOD:
            self.good.append(msg)
        elif msg["context_id"] in self.others:
            self.others[msg["context_id"]].append(msg)
        else:
            return msg
        return None

    def next_answer(self, timeout: float = 30.0) -> dict:
        """The next message that is not the good or a tracked context's."""
        deadline = time.monotonic() + timeout
        while (msg := self._recv(deadline)) is None:
            pass
        return msg

    def read_until_done(self, context_id: str, timeout: float = 60.0) -> list[dict]:
        """Messages until ``context_id`` (GOOD or a tracked one) ends; nothing else may arrive."""
        deadline = time.monotonic() + timeout
        msgs = self.good if context_id == GOOD else self.others[context_id]
        while not any(m["type"] in TERMINAL for m in msgs):
            stray = self._recv(deadline)
            assert stray is None, f"unexpected message {short(stray)}"
        return msgs


def test_fuzzed_frames_get_in_order_errors_and_leave_other_contexts_alone(gateway, default_voice_id):
    v = default_voice_id
    with connect(gateway.ws_url + "/tts/websocket", max_size=None) as ws:
        sock = Socket(ws)
        ws.send(json.dumps(gen(GOOD, "Hello there.", v, flush=True)))  # speaks while the fuzz runs

        @settings(_WS_FUZZ, max_examples=150)
        @given(batch=batches(FRAMES))
        def fuzz_bulk(batch):
            expected = []
            for frame in batch:
                try:
                    answer = expected_answer(frame, sock.cancelled)
                except LookupError:
                    continue  # valid generations would synthesise: not in the bulk
                ws.send(frame)
                sock.frames_sent += 1
                if answer is not None:
                    expected.append(answer)
            for context_id in expected:
                msg = sock.next_answer()
                assert msg["type"] == "error" and msg["context_id"] == context_id, (short(msg), context_id)
                assert 400 <= msg["status_code"] < 500 and msg["error_code"] and msg["message"], short(msg)
                assert msg["error"] == f"{msg['title']}: {msg['message']}" and msg["request_id"]

        fuzz_bulk()
        assert sock.frames_sent >= 500

        # a few valid contexts with generated transcripts, while "fz-good" is still open
        # (word and phoneme timestamps too: the generated text goes through eSpeak's process)
        @settings(_WS_FUZZ, max_examples=8)
        @given(transcript=VALID_TEXT, language=st.sampled_from(["en", "es", "pt", "nl", "fr", "zh", "ja", None]),
               words=st.booleans(), phonemes=st.booleans())
        def fuzz_valid(transcript, language, words, phonemes):
            cid = f"fz-valid-{len(sock.others)}"
            sock.others[cid] = []
            ws.send(json.dumps(gen(cid, transcript, v, cont=False, language=language, add_timestamps=words,
                                   add_phoneme_timestamps=phonemes)))
            msgs = sock.read_until_done(cid)
            assert msgs[-1]["type"] in TERMINAL and [m["type"] for m in msgs].count(msgs[-1]["type"]) == 1
            assert msgs[-1]["type"] == "done" or 400 <= msgs[-1]["status_code"] < 500, short(msgs[-1])
            allowed = {"chunk", "flush_done", "done", "error"} | ({"timestamps"} if words else set()) \
                | ({"phoneme_timestamps"} if phonemes else set())
            assert {m["type"] for m in msgs} <= allowed, [m["type"] for m in msgs]

        fuzz_valid()

        # the good context was untouched: its first segment, flush_done 1, then the rest and done
        ws.send(json.dumps(gen(GOOD, "Bye now.", v, cont=False)))
        sock.read_until_done(GOOD)
        types = [m["type"] for m in sock.good]
        assert types.count("done") == 1 and types[-1] == "done" and types.count("flush_done") == 1, types
        assert set(types) == {"chunk", "flush_done", "done"}, types
        assert len(audio_of(sock.good)) == 2 * expected_bytes(1, "pcm_s16le", 22050)
        first = [m for m in sock.good if m["type"] == "chunk" and m["flush_id"] == 1]
        assert len(audio_of(first)) == expected_bytes(1, "pcm_s16le", 22050)
