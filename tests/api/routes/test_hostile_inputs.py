"""Hostile inputs against a live gateway (issue 9: defects 3, 4, 10 and the context_id part of 11).

- JSON nested ~1,100 deep: an in-band error on /tts/websocket (the socket stays open and serves the
  next context), a 400 in the error shape on /tts/bytes, /tts/sse, /access-token and PATCH /voices.
- Megabyte context ids: never echoed (the WebSocket error carries ``context_id: ""``, SSE a 400).
- Text normalisation cannot read ("²", "½", "٣"...): spoken anyway, in every language.
- A 90 KB FLAC declaring 16 s of 655,350 Hz x 8 channels: refused before it is decoded.
"""

from __future__ import annotations

import asyncio
import io
import json

import httpx
import numpy as np
import pytest
import soundfile as sf
from websockets.asyncio.client import connect

from api.protocol.json_body import MAX_JSON_DEPTH
from api.protocol.requests import MAX_WS_MESSAGE_BYTES, UNROUTABLE_CONTEXT_ID
from tests.api.routes._voices_support import clone
from tests.api.routes.audio_checks import expected_bytes
from tests.api.routes.ws_helpers import assert_ws_error, audio_of, gen, read_until_terminal, recv, send

pytestmark = pytest.mark.timeout(120)

DEPTH = 1100  # past Python's recursion limit in json.loads
ERROR_BODY_KEYS = {"error_code", "title", "message", "request_id"}


def deep(depth: int = DEPTH) -> str:
    return "[" * depth + "]" * depth


def with_deep_field(fields: dict, depth: int = DEPTH) -> str:
    """``fields`` as a JSON object with one more field nested ``depth`` levels deep."""
    return json.dumps(fields)[:-1] + ', "nest": ' + deep(depth) + "}"


def tts_fields(voice: str, **extra) -> dict:
    return {"model_id": "sonic-3", "transcript": "Hello there.", "voice": voice,
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 22050}, **extra}


def assert_error_body(r: httpx.Response, status: int, code: str, *needles: str) -> dict:
    assert r.status_code == status, r.text[:500]
    body = r.json()
    assert set(body) == ERROR_BODY_KEYS and body["error_code"] == code, body
    for needle in needles:
        assert needle in body["message"], (needle, body["message"])
    return body


async def speak_one(ws, voice: str, context_id: str) -> None:
    """A normal context on the same socket still gets all of its audio and its done."""
    await send(ws, gen(context_id, "Fine.", voice, cont=False))
    msgs = await read_until_terminal(ws, [context_id])
    assert msgs[-1]["type"] == "done" and msgs[-1]["context_id"] == context_id
    assert len(audio_of(msgs)) == expected_bytes(1, "pcm_s16le", 22050)


# --- deep JSON (defect 3) -------------------------------------------------------------------------


async def test_deep_json_over_websocket_is_an_in_band_error_and_the_socket_lives_on(gateway, default_voice_id):
    v = default_voice_id
    async with connect(gateway.ws_url + "/tts/websocket") as ws:
        await ws.send(with_deep_field(gen("deep-1", "Hi.", v)))  # was: socket dropped without a close frame
        assert_ws_error(await recv(ws), "deep-1", 400, "invalid_json", f"more than {MAX_JSON_DEPTH} levels deep")
        await ws.send(deep())  # no context id at all: routed to none, but still carries the key
        assert_ws_error(await recv(ws), UNROUTABLE_CONTEXT_ID, 400, "invalid_json")
        await ws.send(deep(100_000).encode())  # a binary frame is read as JSON too
        assert_ws_error(await recv(ws), UNROUTABLE_CONTEXT_ID, 400, "invalid_json")
        await speak_one(ws, v, "after-deep")


@pytest.mark.parametrize("path", ["/tts/bytes", "/tts/sse", "/access-token"])
def test_deep_json_to_http_routes_is_a_400(gateway, default_voice_id, path):
    for content in (with_deep_field(tts_fields(default_voice_id)), deep()):
        r = httpx.post(gateway.url + path, content=content, headers={"content-type": "application/json"},
                       timeout=30)
        assert_error_body(r, 400, "invalid_json", f"more than {MAX_JSON_DEPTH} levels deep")


def test_deep_json_to_voice_patch_is_a_400(gateway, default_voice_id):
    r = httpx.patch(f"{gateway.url}/voices/{default_voice_id}", content=with_deep_field({"name": "x"}), timeout=30)
    assert_error_body(r, 400, "invalid_json", "PATCH body", f"more than {MAX_JSON_DEPTH} levels deep")


async def test_websocket_message_over_the_size_limit_is_an_in_band_413(gateway, default_voice_id):
    v = default_voice_id
    async with connect(gateway.ws_url + "/tts/websocket") as ws:
        await send(ws, gen("big-1", "a" * MAX_WS_MESSAGE_BYTES, v))
        assert_ws_error(await recv(ws), "big-1", 413, "request_too_large", str(MAX_WS_MESSAGE_BYTES))
        await speak_one(ws, v, "after-big")


async def test_websocket_frames_past_the_read_limit_close_the_socket_with_1009(gateway, default_voice_id):
    """Frames over api.server.WS_MAX_FRAME_BYTES are not read into memory (uvicorn's default would
    buffer 16 MiB per socket): the socket closes with 1009, message too big; the server serves on."""
    from websockets.exceptions import ConnectionClosed

    from api.server import WS_MAX_FRAME_BYTES

    async with connect(gateway.ws_url + "/tts/websocket", max_size=None) as ws:
        with pytest.raises(ConnectionClosed):
            # uncompressed (the gateway refuses permessage-deflate), the 4 MiB may still be going out
            # when the server's close arrives: then the send itself fails, else the next read does
            await send(ws, gen("huge", "a" * (WS_MAX_FRAME_BYTES + 1024), default_voice_id))
            await asyncio.wait_for(ws.recv(), 30)
        assert ws.close_code == 1009
    async with connect(gateway.ws_url + "/tts/websocket") as ws:
        await speak_one(ws, default_voice_id, "after-huge")


# --- ids are never echoed past the limit (defect 11, context_id part) -----------------------------


async def test_megabyte_context_ids_are_never_echoed_on_the_websocket(gateway, default_voice_id):
    v = default_voice_id
    huge = "x" * (1 << 19)
    async with connect(gateway.ws_url + "/tts/websocket") as ws:
        for raw in (json.dumps(gen(huge, "Hi.", v)),  # was: a 1 MB id echoed twice in a 2 MB error
                    json.dumps({"context_id": huge, "cancel": True}),
                    '{"context_id": "' + huge + '", "transcript": oops',  # recovered from malformed JSON
                    json.dumps(gen("y" * 513, "Hi.", v))):
            await ws.send(raw)
            text = await asyncio.wait_for(ws.recv(), 10)
            assert len(text) < 4096 and "x" * 100 not in text and "y" * 100 not in text
            msg = json.loads(text)
            assert msg["type"] == "error" and msg["context_id"] == UNROUTABLE_CONTEXT_ID and msg["status_code"] == 400
        await ws.send(json.dumps(gen("\ud800", "Hi.", v)))  # an id that cannot be sent back as UTF-8
        assert_ws_error(await recv(ws), UNROUTABLE_CONTEXT_ID, 400, "invalid_json", "surrogate")
        await speak_one(ws, v, "z" * 512)  # the longest allowed id still works


def test_over_long_sse_context_id_is_a_400_without_it(gateway, default_voice_id):
    r = httpx.post(gateway.url + "/tts/sse", json=tts_fields(default_voice_id, context_id="c" * (1 << 19)), timeout=30)
    body = assert_error_body(r, 400, "invalid_request", "context_id", "at most 512 characters")
    assert len(r.content) < 4096 and "c" * 100 not in body["message"]


# --- text normalisation never fails a request (defect 4) ------------------------------------------


@pytest.mark.parametrize("language", ["en", "es", "pt", "nl"])
def test_transcripts_normalisation_cannot_read_are_spoken(gateway, default_voice_id, language):
    transcript = "E = mc² and x³, ½ of 10² € is ٣ or ①. 99999999999999999999999th 1e400 ²²²"
    r = httpx.post(gateway.url + "/tts/bytes", json=tts_fields(default_voice_id, transcript=transcript,
                                                                language=language), timeout=60)
    assert r.status_code == 200, r.text[:500]  # was: 500 "invalid literal for int() with base 10: '²'"
    assert len(r.content) > 0 and len(r.content) % expected_bytes(1, "pcm_s16le", 22050) == 0


# --- clone decoding bombs (defect 10) -------------------------------------------------------------


def flac_bomb() -> bytes:
    """16 s of 655,350 Hz x 8-channel silence: about 90 KB of FLAC, 335 MB once decoded."""
    buf = io.BytesIO()
    rate = 655_350
    with sf.SoundFile(buf, "w", samplerate=rate, channels=8, format="FLAC", subtype="PCM_16") as f:
        block = np.zeros((rate, 8), dtype=np.int16)
        for _ in range(16):
            f.write(block)
    return buf.getvalue()


def test_clone_decoding_bomb_is_refused_with_a_400_naming_the_limit(gateway):
    bomb = flac_bomb()
    assert len(bomb) < 200_000
    r = clone(gateway.url, bomb, filename="bomb.flac", content_type="audio/flac")
    assert_error_body(r, 400, "unsupported_audio_format", "655350 Hz", "8 channels", "at most 192000 Hz")
