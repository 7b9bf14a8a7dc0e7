"""The two big raw WebSocket clients, replayed in their exact wire shapes against the TLS gateway:

- pipecat 1.14.0 (CartesiaTTSService): handshake with only ``X-API-Key`` and
  ``Cartesia-Version: 2026-03-01``; every message carries ``max_buffer_delay_ms: 0``,
  ``add_timestamps: true``, ``use_normalized_timestamps: false``, ``language: "en"`` and a
  ``{"mode": "id"}`` voice; a turn ends with ``transcript: ""``, ``continue: false``; an
  interruption sends ``cancel``. It indexes ``msg["context_id"]`` and ``msg["type"]`` directly and
  drops a context after 3 s without its next audio.
- LiveKit plugin 1.8.9: ``X-API-Key`` with ``?cartesia_version=2025-04-16``, no compression
  offer, ``language: null``, ``add_timestamps: true`` (it aligns words to its text), sentences with ``continue: true`` then ``" "`` with
  ``continue: false``; it reuses the socket after ``done`` and closes it to interrupt (no cancel).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid

import pytest
from websockets.asyncio.client import connect

from tests.api.routes.audio_checks import expected_bytes
from tests.api.routes.conftest import API_KEY
from tests.api.routes.ws_helpers import engine_idle, read_for, recv

pytestmark = pytest.mark.timeout(120)

PIPECAT_TYPES = {"done", "timestamps", "chunk", "error", "flush_done"}


def pipecat_msg(context_id: str, text: str, voice_id: str, cont: bool = True) -> str:
    return json.dumps({
        "transcript": text, "continue": cont, "context_id": context_id, "model_id": "sonic-3.6",
        "voice": {"mode": "id", "id": voice_id},
        "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
        "add_timestamps": True, "use_normalized_timestamps": False, "language": "en", "max_buffer_delay_ms": 0,
    })


async def pipecat_turn(ws, context_id: str, sentences: list[str], voice_id: str) -> dict:
    """Send one turn the way pipecat does and read it the way its receive loop does."""
    t0 = time.monotonic()
    for sentence in sentences:
        await ws.send(pipecat_msg(context_id, sentence, voice_id))
    await ws.send(pipecat_msg(context_id, "", voice_id, cont=False))  # flush_audio()
    audio, words, starts, last_audio, gaps = b"", [], [], None, []
    while True:
        msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert msg["context_id"] == context_id and msg["type"] in PIPECAT_TYPES, msg  # KeyError in pipecat
        if msg["type"] == "chunk":
            now = time.monotonic()
            gaps.append(now - (last_audio or t0))
            last_audio = now
            audio += base64.b64decode(msg["data"])
        elif msg["type"] == "timestamps":
            words += msg["word_timestamps"]["words"]
            starts += msg["word_timestamps"]["start"]
        elif msg["type"] == "done":
            return {"audio": audio, "words": words, "starts": starts, "gaps": gaps}
        else:
            pytest.fail(f"unexpected {msg}")


async def test_pipecat_shape(secure_gateway, tls_files, default_voice_id):
    headers = {"X-API-Key": API_KEY, "Cartesia-Version": "2026-03-01"}
    async with connect(secure_gateway.ws_url + "/tts/websocket", ssl=tls_files.client_context(),
                       additional_headers=headers) as ws:
        sentences = ["Hello there! ", "I am your assistant. ", "How can I help?"]
        turn = await pipecat_turn(ws, str(uuid.uuid4()), sentences, default_voice_id)
        assert len(turn["audio"]) == 3 * expected_bytes(1, "pcm_s16le", 16000)
        assert turn["words"] == "".join(sentences).split()
        assert turn["starts"] == sorted(turn["starts"])
        assert max(turn["gaps"]) < 3.0  # pipecat drops a context after 3 s without audio
        # an interrupted turn: cancel after the first audio, then the next turn on the same socket
        cid = str(uuid.uuid4())
        await ws.send(pipecat_msg(cid, "This answer will be interrupted. It has many sentences. ", default_voice_id))
        await ws.send(pipecat_msg(cid, "Another one. And another one. ", default_voice_id))
        while (msg := json.loads(await ws.recv()))["type"] != "chunk":
            assert msg["context_id"] == cid
        await ws.send(json.dumps({"context_id": cid, "cancel": True}))
        turn = await pipecat_turn_after_cancel(ws, cid, default_voice_id)
        assert len(turn["audio"]) == expected_bytes(1, "pcm_s16le", 16000)


async def pipecat_turn_after_cancel(ws, cancelled: str, voice_id: str) -> dict:
    """The next turn; audio of the cancelled context still on the wire is skipped (pipecat drops
    it), but no done/timestamps/flush_done for it may arrive after its cancel was read."""
    cid = str(uuid.uuid4())
    await ws.send(pipecat_msg(cid, "Sure, go ahead.", voice_id))
    await ws.send(pipecat_msg(cid, "", voice_id, cont=False))
    audio = b""
    while True:
        msg = await recv(ws)
        if msg["context_id"] == cancelled:
            assert msg["type"] == "chunk", msg  # sent before the server read the cancel
            continue
        assert msg["context_id"] == cid
        if msg["type"] == "chunk":
            audio += base64.b64decode(msg["data"])
        if msg["type"] == "done":
            assert all(m["context_id"] != cancelled for m in await read_for(ws, 0.3))
            return {"audio": audio}


def livekit_msg(context_id: str, text: str, voice_id: str, cont: bool) -> str:
    return json.dumps({
        "model_id": "sonic-2", "voice": {"mode": "id", "id": voice_id},
        "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
        "language": None, "context_id": context_id, "transcript": text, "continue": cont, "add_timestamps": True,
    })


async def livekit_stream(ws, sentences: list[str], voice_id: str) -> tuple[bytes, list[str]]:
    cid = uuid.uuid4().hex[:22]  # shortuuid-like
    for sentence in sentences:
        await ws.send(livekit_msg(cid, sentence + " ", voice_id, True))
    await ws.send(livekit_msg(cid, " ", voice_id, False))
    audio, words = b"", []
    while True:
        data = json.loads(await asyncio.wait_for(ws.recv(), 10))  # LiveKit's 10 s silence timeout
        if data.get("context_id") != cid:
            continue
        if data.get("data"):
            audio += base64.b64decode(data["data"])
        elif data.get("done"):
            assert data["type"] == "done"
            return audio, words
        elif data.get("word_timestamps"):
            words += data["word_timestamps"]["words"]
        elif data.get("type") == "error":
            pytest.fail(f"error: {data}")


async def test_livekit_shape(secure_gateway, tls_files, default_voice_id):
    base_url = secure_gateway.url  # https://... -> wss://..., as base_url.replace("http", "ws", 1)
    url = base_url.replace("http", "ws", 1) + "/tts/websocket?cartesia_version=2025-04-16"
    async with connect(url, ssl=tls_files.client_context(), additional_headers={"X-API-Key": API_KEY},
                       compression=None) as ws:
        sentences = ["Hi, I'm Kelly.", "It's 9:30 now - let's go!"]
        audio, words = await livekit_stream(ws, sentences, default_voice_id)
        assert len(audio) == 2 * expected_bytes(1, "pcm_s16le", 24000)
        assert words == " ".join(sentences).split()  # original tokens, punctuation attached, in order
        # the socket stays open after done and serves the next stream
        await asyncio.sleep(1.0)
        audio, words = await livekit_stream(ws, ["Second stream."], default_voice_id)
        assert len(audio) == expected_bytes(1, "pcm_s16le", 24000) and words == ["Second", "stream."]
    # LiveKit interrupts by closing the socket: every context of it must stop
    async with connect(url, ssl=tls_files.client_context(), additional_headers={"X-API-Key": API_KEY},
                       compression=None) as ws:
        cid = "lk-interrupted"
        for n in range(6):
            await ws.send(livekit_msg(cid, f"Sentence number {n}. ", default_voice_id, True))
        while not json.loads(await ws.recv()).get("data"):
            pass
    assert engine_idle(secure_gateway, timeout_s=3.0, hold_s=1.0)
