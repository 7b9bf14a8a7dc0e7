"""Issue 9.7/9.8 on a live server: what one client can hold. Text buffered per context and per
socket is bounded (in-band 413), a client that stops reading loses its contexts and engine slots
after the send timeout while other clients are served, and new streams past the stream limits
(process, API key, load) are refused with 429 ``concurrency_limited`` and retry advice."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer
from tests.api.routes.ws_helpers import assert_ws_error, by_context, gen, read_for, read_until_terminal, recv, send

pytestmark = pytest.mark.timeout(180)

FMT_22K = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 22050}
FMT_48K_F32 = {"container": "raw", "encoding": "pcm_f32le", "sample_rate": 48000}
KEY_A = "sk_backpressure_key_a_0123456789"
KEY_B = "sk_backpressure_key_b_0123456789"


def ws_url(server, key: str | None = None) -> str:
    return server.ws_url + "/tts/websocket" + (f"?api_key={key}" if key else "")


async def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


@pytest.fixture(scope="module")
def limited_gateway(tiny_ckpt_dir, tmp_path_factory):
    settings = gateway_settings(
        tiny_ckpt_dir, tmp_path_factory.mktemp("limited-data"), api_keys={KEY_A, KEY_B},
        max_streams=3, max_streams_per_key=2, max_context_text_chars=300, max_socket_text_chars=500,
        ws_send_timeout_s=2.0, http_send_timeout_s=2.0,
    )
    with LiveServer(settings) as server:
        yield server


# --- text limits ---------------------------------------------------------------------------------


async def test_text_past_the_context_limit_fails_that_context_only(limited_gateway, default_voice_id):
    v = default_voice_id
    async with connect(ws_url(limited_gateway, KEY_A)) as ws:
        await send(ws, gen("calm", "", v))  # open, no text yet
        await send(ws, gen("greedy", "word " * 50, v, max_buffer_delay_ms=5000))  # 250 chars, no sentence end
        await send(ws, gen("greedy", "word " * 20, v, max_buffer_delay_ms=5000))  # 350 > 300
        err = await recv(ws)
        assert_ws_error(err, "greedy", 413, "text_buffer_full", "300", "GEPARD_MAX_CONTEXT_TEXT_CHARS")
        await send(ws, gen("calm", "Hello there.", v, cont=False))
        msgs = await read_until_terminal(ws, ["calm"])
        assert msgs[-1]["type"] == "done" and any(m["type"] == "chunk" for m in msgs)
        assert all(m["context_id"] == "calm" for m in msgs)  # nothing more for the failed context


async def test_text_past_the_socket_limit_fails_the_context_that_sent_it(limited_gateway, default_voice_id):
    v = default_voice_id
    async with connect(ws_url(limited_gateway, KEY_A)) as ws:
        await send(ws, gen("one", "word " * 55, v, max_buffer_delay_ms=5000))  # 275
        await send(ws, gen("two", "word " * 55, v, max_buffer_delay_ms=5000))  # 550 > 500 on the socket
        assert_ws_error(await recv(ws), "two", 413, "text_buffer_full", "500", "GEPARD_MAX_SOCKET_TEXT_CHARS")
        await send(ws, {"context_id": "one", "cancel": True})
        assert await read_for(ws, 0.5) == []


async def test_queued_segments_and_flushes_are_bounded_per_context(limited_gateway, default_voice_id, monkeypatch):
    import api.connection

    monkeypatch.setattr(api.connection, "_MAX_QUEUED_JOBS", 3)
    v = default_voice_id
    async with connect(ws_url(limited_gateway, KEY_A)) as ws:
        # five sentences at once: five segment jobs wait behind the first while it is generated
        await send(ws, gen("busy", "One. Two. Three. Four. Five.", v, max_buffer_delay_ms=0))
        await send(ws, gen("busy", "", v, flush=True))
        msgs = await read_until_terminal(ws, ["busy"], timeout=60)
        assert_ws_error(msgs[-1], "busy", 413, "text_buffer_full", "3 segments and flushes")
        assert await read_for(ws, 0.5) == []


# --- stream limits -------------------------------------------------------------------------------


async def test_stream_limits_per_key_and_per_process(limited_gateway, default_voice_id):
    v = default_voice_id
    body = {"model_id": "sonic-3", "transcript": "Hi there.", "voice": v, "output_format": FMT_22K}
    async with connect(ws_url(limited_gateway, KEY_A)) as a, connect(ws_url(limited_gateway, KEY_B)) as b, \
            httpx.AsyncClient(timeout=30) as http:
        # a stream place comes with a context's first text: these speak, then stay open for more
        await send(a, gen("a1", "Hi.", v))
        await send(a, gen("a2", "Hi.", v))
        await send(a, gen("a3", "Hello.", v))  # a third stream for key A: over its limit of 2
        assert_ws_error(await next_of(a, "a3"), "a3", 429, "concurrency_limited", "GEPARD_MAX_STREAMS_PER_KEY", "retry")
        await send(b, gen("b1", "Hi.", v))  # key B's first: the process's third stream
        await asyncio.sleep(0.3)
        assert limited_gateway.runtime.service.admission.open_streams == 3
        await send(b, gen("b0", "", v))  # opened empty: no place needed, so not refused
        await send(b, gen("b2", "Hello.", v))  # the process is full
        assert_ws_error(await next_of(b, "b2"), "b2", 429, "concurrency_limited", "GEPARD_MAX_STREAMS")
        await send(b, gen("b0", "Hello.", v))  # b0's first text needs a place: refused the same way
        assert_ws_error(await next_of(b, "b0"), "b0", 429, "concurrency_limited", "GEPARD_MAX_STREAMS")
        r = await http.post(limited_gateway.url + "/tts/bytes", json=body, headers={"X-API-Key": KEY_B})
        assert r.status_code == 429 and r.json()["error_code"] == "concurrency_limited"
        assert r.headers["retry-after"] == "1" and r.headers["retry-after-ms"] == "1000"
        await send(a, {"context_id": "a1", "cancel": True})  # a place comes back
        await wait_until(lambda: limited_gateway.runtime.service.admission.open_streams == 2, 10, "a1's place")
        await send(b, gen("b2", " More of it.", v, cont=False))  # the rest of the refused utterance
        assert_ws_error(await next_of(b, "b2"), "b2", 400, "context_closed")  # never admitted mid-sentence
        await send(b, gen("b2-retry", "Hello there.", v, cont=False))  # a retry is a new context
        msgs = await read_until_terminal(b, ["b2-retry"])
        assert msgs[-1]["type"] == "done" and any(m["type"] == "chunk" and m["context_id"] == "b2-retry" for m in msgs)
        for ws, cid in ((a, "a2"), (b, "b1")):
            await send(ws, gen(cid, "", v, cont=False))
        await read_until_terminal(a, ["a2"])
        await read_until_terminal(b, ["b1"])
    await wait_until(lambda: limited_gateway.runtime.service.admission.open_streams == 0, 10, "places back")
    r = httpx.post(limited_gateway.url + "/tts/bytes", json=body, headers={"X-API-Key": KEY_B}, timeout=30)
    assert r.status_code == 200 and len(r.content) > 0
    text = httpx.get(limited_gateway.url + "/metrics").text
    assert metric(text, 'gepard_streams_refused_total{reason="key"}') >= 1
    assert metric(text, 'gepard_streams_refused_total{reason="process"}') >= 2
    assert metric(text, "gepard_streams_open") == 0


async def next_of(ws, context_id: str) -> dict:
    """The next message for ``context_id`` (other contexts' audio is passed over)."""
    while (msg := await recv(ws))["context_id"] != context_id:
        pass
    return msg


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


# --- a client that stops reading -------------------------------------------------------------------


def tiny_receive_buffer_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


async def test_a_client_that_stops_reading_loses_its_slots_and_others_are_served(limited_gateway, default_voice_id,
                                                                                 monkeypatch):
    from api.ws_protocol import GatewayWebSocketProtocol

    monkeypatch.setattr(GatewayWebSocketProtocol, "close_wait_s", 1.0)  # the server's close gives up sooner
    v = default_voice_id
    rt = limited_gateway.runtime
    errors_before = rt.metrics.errors.labels("ws", "client_not_reading")._value.get()
    sockets_before = rt.metrics.ws_connections._value.get()
    text = " ".join(f"Sentence number {i} is here." for i in range(9))  # 9 segments of 48 kHz f32 audio
    sock = tiny_receive_buffer_socket(limited_gateway.port)
    stalled = await connect(ws_url(limited_gateway, KEY_A), sock=sock, max_queue=1)
    try:
        for cid in ("s1", "s2"):
            await send(stalled, gen(cid, text[:240], v, cont=False, output_format=FMT_48K_F32))
        # never read: the server's sends stall once the socket buffers are full
        await wait_until(lambda: rt.service.admission.open_streams == 2 or rt.service.in_flight, 10, "contexts open")
        t0 = time.monotonic()
        async with connect(ws_url(limited_gateway, KEY_B)) as other:  # another client is served meanwhile
            await send(other, gen("fine", "Hello there.", v, cont=False))
            msgs = await read_until_terminal(other, ["fine"], timeout=60)
            assert msgs[-1]["type"] == "done"
        await wait_until(lambda: rt.service.admission.open_streams == 0 and rt.service.in_flight == 0, 30,
                         "the stalled client's contexts to be cancelled")
        assert time.monotonic() - t0 < 30
        assert rt.engine.num_running == 0
        assert rt.metrics.errors.labels("ws", "client_not_reading")._value.get() == errors_before + 1
        # the client still holds its end and reads nothing: its close frame can never get past the
        # unread audio, so the server drops the connection rather than wait for it forever
        await wait_until(lambda: rt.metrics.ws_connections._value.get() == sockets_before, 15,
                         "the server to drop the stalled connection")
    finally:
        stalled.transport.abort()
        sock.close()
    # the server is whole: a new client gets a full answer
    async with connect(ws_url(limited_gateway, KEY_A)) as ws:
        await send(ws, gen("after", "Hello there.", v, cont=False))
        assert (await read_until_terminal(ws, ["after"]))[-1]["type"] == "done"


async def test_an_http_client_that_stops_reading_is_dropped_and_its_stream_stopped(limited_gateway, default_voice_id):
    import json

    rt = limited_gateway.runtime
    # ~60 s of 48 kHz f32 audio, base64 in SSE events: far more than the socket buffers hold
    text = " ".join(f"Sentence number {i} is here." for i in range(60))
    body = json.dumps({"model_id": "sonic-3", "transcript": text, "voice": default_voice_id,
                       "output_format": FMT_48K_F32}).encode()
    sock = tiny_receive_buffer_socket(limited_gateway.port)
    try:
        sock.setblocking(True)
        sock.sendall(f"POST /tts/sse HTTP/1.1\r\nHost: x\r\nX-API-Key: {KEY_A}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await wait_until(lambda: rt.service.admission.open_streams == 1, 10, "the stream to open")
        # the client reads nothing and keeps its end open: after the send timeout the server drops
        # it, which stops the stream (engine request, codec stream, stream place) as a hang-up does
        await wait_until(lambda: rt.service.admission.open_streams == 0 and rt.service.in_flight == 0, 30,
                         "the stalled response to be dropped")
        assert rt.engine.num_running == 0
        sock.settimeout(10)  # the server's end is closed: reading now ends (what it buffered, then EOF)
        with contextlib.suppress(ConnectionResetError):
            while sock.recv(65536):
                pass
    finally:
        sock.close()
    # a client that reads gets the whole answer
    async with httpx.AsyncClient(timeout=60) as http:
        r = await http.post(limited_gateway.url + "/tts/bytes", headers={"X-API-Key": KEY_A},
                            json={"model_id": "sonic-3", "transcript": "Hello there.", "voice": default_voice_id,
                                  "output_format": FMT_48K_F32})
        assert r.status_code == 200 and r.content


# --- the load-aware limit on a live server ---------------------------------------------------------------


@pytest.fixture(scope="module")
def load_limited_gateway(tiny_ckpt_dir, tmp_path_factory):
    # a limit so low that any measured load refuses a second stream: the decision path, not the tuning
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("load-data"), admit_max_saturation=1e-6,
                                admit_min_streams=1)
    with LiveServer(settings) as server:
        yield server


async def test_load_limit_refuses_new_streams_and_running_ones_finish(load_limited_gateway, default_voice_id):
    v = default_voice_id
    text = " ".join(f"Sentence number {i} is here." for i in range(6))
    async with connect(ws_url(load_limited_gateway)) as ws:
        await send(ws, gen("running", text, v, cont=False))
        for _ in range(3):  # audio is flowing, so the meter has a measurement
            assert (await recv(ws))["type"] == "chunk"
        await send(ws, gen("new", "Hello there.", v, cont=False))
        msgs = await read_until_terminal(ws, ["running", "new"], timeout=60)
    ctx = by_context(msgs)
    assert_ws_error(ctx["new"][-1], "new", 429, "concurrency_limited", "GEPARD_ADMIT_MAX_SATURATION", "retry")
    assert len(ctx["new"]) == 1
    assert ctx["running"][-1]["type"] == "done"
    assert load_limited_gateway.runtime.service.meter.saturation() > 0
    text = httpx.get(load_limited_gateway.url + "/metrics").text
    assert metric(text, 'gepard_streams_refused_total{reason="load"}') == 1
    assert metric(text, "gepard_saturation") >= 0
