"""What an open WebSocket context holds while it waits for more text, on a live server.

A context that said everything it was given gives its stream place back after
``GEPARD_WS_CONTEXT_HOLD_S`` and takes one again with its next text, so contexts an agent leaves
open on a socket it keeps using do not refuse other clients' streams. A cancelled context leaves
nothing behind that only the garbage collector would free (its raw Opus encoder holds two FFmpeg
threads)."""

from __future__ import annotations

import asyncio
import gc
import time

import httpx
import pytest
from websockets.asyncio.client import connect

from api.ws_context import WsContext
from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer
from tests.api.routes.ws_helpers import assert_ws_error, gen, read_until_terminal, recv, send

pytestmark = pytest.mark.timeout(180)

HOLD_S = 0.5
OPUS = {"container": "raw", "encoding": "opus", "sample_rate": 48000}


@pytest.fixture(scope="module")
def one_place_gateway(tiny_ckpt_dir, tmp_path_factory):
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("hold-data"), max_streams=1,
                                ws_context_hold_s=HOLD_S)
    with LiveServer(settings) as server:
        yield server


def open_streams(server) -> int:
    return server.runtime.service.admission.open_streams


async def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def speak_turn(ws, cid: str, text: str, voice, **extra) -> list[dict]:
    """Send ``text`` with a flush and read up to its flush_done (the context stays open)."""
    await send(ws, gen(cid, text, voice, flush=True, **extra))
    msgs = []
    while True:
        msg = await recv(ws, timeout=30)
        assert msg["type"] != "error", msg
        msgs.append(msg)
        if msg["type"] == "flush_done":
            return msgs


async def test_an_idle_open_context_gives_its_place_back_and_takes_one_with_its_next_text(one_place_gateway,
                                                                                           default_voice_id):
    server, v = one_place_gateway, default_voice_id
    body = {"model_id": "sonic-3", "transcript": "Hi there.", "voice": v,
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 22050}}
    async with connect(server.ws_url + "/tts/websocket") as ws, httpx.AsyncClient(timeout=30) as http:
        msgs = await speak_turn(ws, "agent", "Sure, I can help you with that.", v)
        assert any(m["type"] == "chunk" for m in msgs)
        # said everything, left open: it keeps its place for the hold, then gives it back
        assert open_streams(server) == 1
        await wait_until(lambda: open_streams(server) == 0, 10, "the idle context's place")
        # the server's only place now serves another client
        r = await http.post(server.url + "/tts/bytes", json=body)
        assert r.status_code == 200 and r.content
        # the open context speaks again: its next text takes a place
        msgs = await speak_turn(ws, "agent", "Here is the rest.", v)
        assert any(m["type"] == "chunk" for m in msgs)
        await send(ws, gen("agent", "", v, cont=False))
        assert (await read_until_terminal(ws, ["agent"]))[-1]["type"] == "done"
    await wait_until(lambda: open_streams(server) == 0, 10, "places back")


async def test_its_next_text_is_refused_like_a_first_one_when_no_place_is_free(one_place_gateway, default_voice_id):
    server, v = one_place_gateway, default_voice_id
    async with connect(server.ws_url + "/tts/websocket") as a, connect(server.ws_url + "/tts/websocket") as b:
        await speak_turn(a, "idle", "Hello.", v)
        await wait_until(lambda: open_streams(server) == 0, 10, "the idle context's place")
        await send(b, gen("busy", "word " * 30, v, max_buffer_delay_ms=5000))  # buffered: owes audio, holds
        await wait_until(lambda: open_streams(server) == 1, 10, "b's place")
        await send(a, gen("idle", "More words.", v))
        assert_ws_error(await recv(a), "idle", 429, "concurrency_limited", "GEPARD_MAX_STREAMS")
        await send(a, gen("idle", "Even more.", v, cont=False))
        assert_ws_error(await recv(a), "idle", 400, "context_closed")
        # a context that owes audio keeps its place past the hold
        await asyncio.sleep(HOLD_S * 3)
        assert open_streams(server) == 1
        await send(b, {"context_id": "busy", "cancel": True})
    await wait_until(lambda: open_streams(server) == 0, 10, "places back")


def live_contexts() -> int:
    # type(), not isinstance(): isinstance reads __class__, which on torch's deprecated module
    # attributes (torch.distributed.reduce_op) warns; WsContext has no subclasses
    return sum(type(o) is WsContext for o in gc.get_objects())


async def test_cancelled_opus_contexts_are_freed_without_the_garbage_collector(one_place_gateway, default_voice_id):
    server, v = one_place_gateway, default_voice_id
    gc.collect()
    before = live_contexts()
    gc.disable()  # what reference counting alone frees (the server runs in this process)
    try:
        async with connect(server.ws_url + "/tts/websocket") as ws:
            for i in range(3):
                cid = f"opus-{i}"
                await send(ws, gen(cid, "This sentence is long enough to be cancelled while it speaks.", v,
                                   output_format=OPUS, max_buffer_delay_ms=0))
                msg = await recv(ws, timeout=30)
                assert msg["type"] == "chunk", msg
                await send(ws, {"context_id": cid, "cancel": True})
                await wait_until(lambda: open_streams(server) == 0, 10, "the cancelled context's place")
            await asyncio.sleep(0.2)
            left = live_contexts() - before
        assert left == 0, f"{left} cancelled context(s) still alive, waiting for the garbage collector"
    finally:
        gc.enable()


async def test_a_context_taking_a_place_again_keeps_its_deleted_dictionary(one_place_gateway, default_voice_id):
    """The dictionary a context spoke with is deleted while it waits: its next text still takes a
    place and is spoken with the dictionary's last copy, as before its idle spell."""
    server, v = one_place_gateway, default_voice_id
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        r = await http.post("/pronunciation-dicts/", json={"name": "db", "items": [{"text": "SQL", "alias": "sequel"}]})
        assert r.status_code == 200, r.text
        dict_id = r.json()["id"]
        async with connect(server.ws_url + "/tts/websocket") as ws:
            extra = {"pronunciation_dict_id": dict_id, "add_timestamps": True, "use_normalized_timestamps": True}
            await speak_turn(ws, "agent", "I like SQL.", v, **extra)
            await wait_until(lambda: open_streams(server) == 0, 10, "the idle context's place")
            assert (await http.delete(f"/pronunciation-dicts/{dict_id}")).status_code == 204
            msgs = await speak_turn(ws, "agent", "SQL again.", v, **extra)
            words = [w for m in msgs if m["type"] == "timestamps" for w in m["word_timestamps"]["words"]]
            assert "sequel" in [w.lower().strip(".") for w in words], words


@pytest.mark.parametrize("pending", ["<break ti", "<spell>AB"])
async def test_a_context_holding_only_a_tag_still_arriving_gives_its_place_back(one_place_gateway, default_voice_id,
                                                                                pending):
    """A tag still arriving makes no work (it waits for its rest), so the context is idle: its place
    goes back after the hold, as after a last job. It used to be kept for as long as the socket
    lived, and one socket could hold every place with a message every few minutes."""
    server, v = one_place_gateway, default_voice_id
    async with connect(server.ws_url + "/tts/websocket") as ws:
        await send(ws, gen("mid-tag", pending, v, add_timestamps=True))
        await wait_until(lambda: open_streams(server) == 1, 10, "the context's place")
        await wait_until(lambda: open_streams(server) == 0, 10, "the place of a context holding only a tag")
        # the rest of the tag and words: admitted again, and the tag is read, not spoken
        rest = 'me="0.2s"/>Hello.' if pending.startswith("<break") else "</spell> please."
        await send(ws, gen("mid-tag", rest, v, cont=False, add_timestamps=True))
        msgs = await read_until_terminal(ws, ["mid-tag"])
        assert msgs[-1]["type"] == "done", msgs[-1]
        words = [w for m in msgs if m["type"] == "timestamps" for w in m["word_timestamps"]["words"]]
        assert words == (["Hello."] if pending.startswith("<break") else ["AB", "please."])
    await wait_until(lambda: open_streams(server) == 0, 10, "places back")
