"""The operator metrics of issue 8 move after real traffic on a live gateway (tiny checkpoint).

Real synthesis on every route, the OpenAI-compatible one too (a cloned voice and the default one),
voice store calls, then a scrape of /metrics: every histogram counted, the counters traffic implies
went up, and the engine's running/waiting/KV gauges are back at 0 once the streams ended. Figures
are compared with a scrape taken before, because the ``gateway`` server is shared by the session
(a labelled sample that first appears with this traffic counts from 0).

Then, on a gateway of their own (auth on, an engine that can fail partway): every kind of error
response counted once under a server-chosen route; audio of streams cut short (failure, hang-up)
counted as it was made; a failure after a body started is one WARNING line and an incomplete body;
time to first audio from the request's start (HTTP) or from the first words owed (WebSocket).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import socket
import time
import uuid
from typing import AsyncIterator, Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from api.metrics import ERROR_ROUTES
from engine.errors import GenerationError
from engine.requests import FrameChunk, SynthesisRequest
from tests.api.routes._voices_support import CLIP_22K, clone, encode_clip, speech
from tests.api.routes.ws_helpers import RAW_S16_22K, audio_of, gen, read_until_terminal, recv, send

pytestmark = pytest.mark.timeout(120)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

HISTOGRAMS = ["gepard_engine_step_seconds", "gepard_engine_batch_size", "gepard_codec_decode_seconds",
              "gepard_codec_batch_size", "gepard_queue_wait_seconds"]
ROUTES = ("bytes", "sse", "ws", "openai")  # openai: POST /v1/audio/speech


def scrape(url: str) -> Samples:
    text = httpx.get(url + "/metrics", timeout=10).text
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def key(name: str, labels: dict[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[key(name, labels)]


def wait_for(url: str, check: Callable[[Samples], bool], timeout_s: float = 10.0) -> Samples:
    """Scrape until ``check`` holds (a WebSocket context reports right after its ``done`` went out)."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = scrape(url)
        if check(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.05)


def tts_http(url: str, route: str, voice: str, transcript: str) -> httpx.Response:
    body = {"model_id": "sonic-3", "transcript": transcript, "voice": {"mode": "id", "id": voice},
            "output_format": RAW_S16_22K}
    if route == "sse":
        body["context_id"] = "metrics-sse"
    return httpx.post(f"{url}/tts/{route}", json=body, timeout=60)


async def ws_context_with_a_pause(ws_url: str, voice: str) -> None:
    """One context, two segments: the client pauses between them (longer than the first segment's
    ~1.1 s of audio), so the listener runs out while the server owes nothing (not underrun), then
    waits for the second segment's first audio (underrun, > 0 by construction)."""
    cid = f"metrics-{uuid.uuid4()}"
    async with connect(ws_url + "/tts/websocket") as ws:
        await send(ws, gen(cid, "Hello there.", voice, flush=True))
        while (await recv(ws, 30.0))["type"] != "flush_done":
            pass
        await asyncio.sleep(1.5)
        await send(ws, gen(cid, "See you soon.", voice, cont=False))
        done = await read_until_terminal(ws, [cid])
        assert done[-1]["type"] == "done", done[-1]


def test_every_operator_metric_moves_after_real_traffic(gateway, default_voice_id):
    url = gateway.url
    before = scrape(url)

    # voice store: create (clone), get, list, get_prompt (cache hit: a new voice is cached), miss, delete
    r = clone(url, encode_clip(speech(22050, seconds=3.0), 22050, "wav"), filename=CLIP_22K.name)
    assert r.status_code == 200, r.text
    voice_id = r.json()["id"]
    assert httpx.get(f"{url}/voices/{voice_id}", timeout=10).status_code == 200
    assert httpx.get(f"{url}/voices", timeout=10).status_code == 200

    for route in ("bytes", "sse"):
        resp = tts_http(url, route, voice_id, "Good morning. How are you today?")
        assert resp.status_code == 200 and resp.content, resp.text
    missing = tts_http(url, "bytes", str(uuid.uuid4()), "Hi.")
    assert missing.status_code == 404  # looked up in the prompt cache first: a miss
    asyncio.run(ws_context_with_a_pause(gateway.ws_url, default_voice_id))
    openai = httpx.post(f"{url}/v1/audio/speech", timeout=60,
                        json={"model": "tts-1", "input": "Good evening.", "voice": "alloy", "response_format": "pcm"})
    assert openai.status_code == 200 and openai.content, openai.text
    assert httpx.delete(f"{url}/voices/{voice_id}", timeout=10).status_code in (200, 204)

    def settled(s: Samples) -> bool:
        return all(value(s, "gepard_stream_rtf_count", route=r) > value(before, "gepard_stream_rtf_count", route=r)
                   for r in ROUTES) and value(s, "gepard_engine_requests_running") == 0

    after = wait_for(url, settled)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - before.get(key(name, labels), 0.0)

    for name in HISTOGRAMS:
        assert moved(name + "_count") > 0, name
    # one engine request per segment: bytes and sse have two segments each, ws two
    assert moved("gepard_queue_wait_seconds_count") >= 6
    assert moved("gepard_engine_batch_size_sum") >= moved("gepard_engine_batch_size_count")  # >= 1 request a step
    for route in ROUTES:
        assert moved("gepard_requests_total", route=route) >= 1, route
        assert moved("gepard_time_to_first_audio_seconds_count", route=route) >= 1, route
        assert moved("gepard_audio_seconds_total", route=route) > 0, route
        assert moved("gepard_stream_rtf_count", route=route) >= 1, route
        assert moved("gepard_stream_rtf_sum", route=route) > 0, route
        assert moved("gepard_stream_underrun_seconds_count", route=route) >= 1, route
    # the WebSocket listener waited for the second segment's first audio; the pause itself is not counted
    ws_underrun = moved("gepard_underrun_seconds_total", route="ws")
    assert ws_underrun > 0
    assert ws_underrun < 1.5, "the client's pause was counted as underrun"
    assert moved("gepard_stream_underrun_seconds_sum", route="ws") == pytest.approx(ws_underrun)
    for op in ("create", "get", "list", "get_prompt", "delete"):
        assert moved("gepard_voice_store_seconds_count", op=op) >= 1, op
    assert moved("gepard_voice_cache_requests_total", result="hit") >= 2  # bytes and sse with the cloned voice
    assert moved("gepard_voice_cache_requests_total", result="miss") >= 1  # the unknown voice
    assert moved("gepard_voices_cloned_total") == 1
    # the streams ended: the scheduler gauges are back at 0; torch never preempts
    for gauge in ("gepard_engine_requests_running", "gepard_engine_requests_waiting", "gepard_engine_kv_cache_usage"):
        assert value(after, gauge) == 0, gauge
    assert value(after, "gepard_engine_preemptions_total") == 0
    assert 0 <= value(after, "gepard_saturation")
    # on CPU the codec carries each stream's conv state: every slot is free again, none ran short
    slots = gateway.settings.max_concurrent_generations
    freed = wait_for(url, lambda s: value(s, "gepard_codec_state_slots_free") == slots)
    assert value(freed, "gepard_codec_state_slots_free") == slots
    assert value(freed, "gepard_codec_windowed_streams_total") == 0


# -- GEPARD_METRICS_TOKEN ------------------------------------------------------------------------------

METRICS_TOKEN = "scrape-0123456789abcdef"
API_KEY = "sk_test_metrics_0123456789"


def test_a_metrics_token_closes_metrics_to_everyone_but_the_scrape(tiny_ckpt_dir, tmp_path, default_voice_id):
    from tests.api.conftest import gateway_settings
    from tests.api.live import LiveServer

    settings = gateway_settings(tiny_ckpt_dir, tmp_path, metrics_token=METRICS_TOKEN, api_keys={API_KEY})
    assert METRICS_TOKEN not in repr(settings)
    with LiveServer(settings) as server:
        url = f"{server.url}/metrics"
        refused = {
            "no credential": {},
            "another scheme": {"Authorization": f"Basic {METRICS_TOKEN}"},
            "a wrong token": {"Authorization": f"Bearer {METRICS_TOKEN}x"},
            "an API key": {"Authorization": f"Bearer {API_KEY}"},
            "the token as an API key header": {"X-API-Key": METRICS_TOKEN},
        }
        for why, headers in refused.items():
            r = httpx.get(url, headers=headers)
            assert r.status_code == 401, why
            body = r.json()
            assert body["error_code"] == "invalid_credentials" and body["request_id"] == r.headers["x-request-id"], why
            assert "gepard_" not in r.text and METRICS_TOKEN not in r.text, why
        r = httpx.get(url, headers={"Authorization": f"bearer  {METRICS_TOKEN}"})
        assert r.status_code == 200 and "gepard_requests_total" in r.text
        # the token opens nothing else: a synthesis with it is refused like any unknown credential
        tts = httpx.post(f"{server.url}/tts/bytes", headers={"Authorization": f"Bearer {METRICS_TOKEN}"},
                         json={"model_id": "sonic-3", "transcript": "Hi.", "voice": {"mode": "id", "id": default_voice_id},
                               "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}})
        assert tts.status_code == 401
        # health and readiness stay open for probes
        assert httpx.get(f"{server.url}/health").status_code == 200
        assert httpx.get(f"{server.url}/ready").status_code == 200


def test_metrics_stay_open_without_a_token(gateway):
    assert gateway.settings.metrics_token is None
    r = httpx.get(f"{gateway.url}/metrics")
    assert r.status_code == 200 and "gepard_requests_total" in r.text


def test_the_engine_and_codec_that_serve_are_named_in_their_info_gauges(gateway):
    """One series, value 1: the backend that started (with GEPARD_BACKEND=auto it may not be the
    first one tried), its loop, device and dtype. This gateway runs the torch backend on CPU, whose
    auto loop there is the reference loop."""
    samples = scrape(gateway.url)
    info = {labels: v for (name, labels), v in samples.items() if name == "gepard_engine_info"}
    assert info == {(("backend", "torch"), ("cuda_graphs", "false"), ("device", "cpu"), ("dtype", "float32"),
                     ("fused_kernels", "false"), ("loop", "reference"), ("prefill_graphs", "false")): 1.0}
    # and the codec: NeMo's codec loaded, the torch decoder of the same checkpoint decoding, since
    # streams carry its conv state (on by default on CPU); nothing else applies on CPU
    codec = {dict(labels)["impl"]: dict(labels) for (name, labels), v in samples.items() if name == "gepard_codec_info" and v == 1}
    assert codec == {"torch": {"impl": "torch", "device": "cpu", "dtype": "float32", "carry_state": "true",
                               "fused_activations": "false", "compiled": "false", "cuda_graphs": "false"}}


# -- streams that fail, end early or start late; errors of every kind -----------------------------------
# A gateway of their own, with auth on (a refused WebSocket upgrade is one of the errors) and an engine
# that can fail partway through a stream, which nothing a client sends can cause.

KEY = "sk_test_observability_0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
FAIL_WORD = "kaboom"  # a segment with this word fails partway (FailsPartway)
PAUSE_S = 1.0
CODEC_RATE_HZ = 22050  # the tiny codec's, and RAW_S16_22K's: 2 bytes a sample
OPENAI_PCM_RATE_HZ = 24000  # response_format "pcm": 16-bit at 24 kHz


class FailsPartway:
    """The server's real engine, except that a segment whose text holds FAIL_WORD fails with
    GenerationError (500 ``generation_failed``) right after its first chunk of frames."""

    def __init__(self, engine) -> None:
        self._engine = engine

    def __getattr__(self, name: str):
        return getattr(self._engine, name)

    async def generate(self, request: SynthesisRequest) -> AsyncIterator[FrameChunk]:
        async with contextlib.aclosing(self._engine.generate(request)) as chunks:
            async for chunk in chunks:
                yield chunk
                if FAIL_WORD in request.text.lower():
                    raise GenerationError(f"request {request.request_id} failed partway (injected by the test)")


@pytest.fixture(scope="module")
def faulty(tiny_ckpt_dir, tmp_path_factory):
    from tests.api.conftest import gateway_settings
    from tests.api.live import LiveServer

    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("faulty-data"), api_keys={KEY})
    with LiveServer(settings) as server:
        service = server.runtime.service
        service.engine = FailsPartway(service.engine)  # once warm-up went through the real one
        yield server


def moved_by(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return after.get(key(name, labels), 0.0) - before.get(key(name, labels), 0.0)


def errors_moved(before: Samples, after: Samples) -> dict[tuple[str, str], float]:
    """(route, error_code) -> how much gepard_errors_total moved, for every pair that did."""
    out = {}
    for (name, labels), v in after.items():
        if name == "gepard_errors_total" and v != before.get((name, labels), 0.0):
            d = dict(labels)
            out[(d["route"], d["error_code"])] = v - before.get((name, labels), 0.0)
    return out


def tts_body(voice: str, transcript: str, **extra) -> dict:
    return {"model_id": "sonic-3", "transcript": transcript, "voice": {"mode": "id", "id": voice},
            "output_format": RAW_S16_22K, **extra}


def sse_events(response: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]


async def refused_upgrade(ws_url: str) -> InvalidStatus:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(ws_url + "/tts/websocket", additional_headers={"Authorization": "Bearer sk_wrong_key_0000"}):
            pass
    return refused.value


def oversized_head(port: int, header_bytes: int) -> None:
    """One request whose head is over the server's bound (it answers 431 and closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        with contextlib.suppress(OSError):  # the server may close while we still send
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * header_bytes + b"\r\n\r\n")
        with contextlib.suppress(OSError):
            while sock.recv(65536):
                pass


def test_every_error_response_is_counted_once_under_a_route_the_server_names(faulty):
    url = faulty.url
    before = scrape(url)
    # a route's error (api/app.py on_error)
    r = httpx.post(f"{url}/tts/bytes", headers=AUTH, json=tts_body(str(uuid.uuid4()), "Hi."), timeout=30)
    assert r.status_code == 404 and r.json()["error_code"] == "voice_not_found"
    # no route (the client's path is no label value), and a route without that method (api/app.py on_no_route)
    assert httpx.get(f"{url}/no/such/{uuid.uuid4()}", timeout=10).status_code == 404
    assert httpx.put(f"{url}/tts/bytes", headers=AUTH, timeout=10).status_code == 405
    # the OpenAI routes answer in their own shape
    r = httpx.post(f"{url}/v1/audio/speech", headers=AUTH, timeout=30,
                   json={"model": "no-such-model", "input": "Hi.", "voice": "alloy"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    # a WebSocket upgrade refused, and a request head too large to read
    refused = asyncio.run(refused_upgrade(faulty.ws_url))
    assert refused.response.status_code == 401
    oversized_head(faulty.port, faulty.settings.max_header_bytes + 1000)

    after = scrape(url)
    assert errors_moved(before, after) == {
        ("bytes", "voice_not_found"): 1,
        ("other", "not_found"): 1,
        ("bytes", "method_not_allowed"): 1,
        ("openai", "model_not_found"): 1,
        ("ws", json.loads(refused.response.body)["error_code"]): 1,
        ("other", "headers_too_large"): 1,
    }
    routes = {dict(labels)["route"] for name, labels in after if name == "gepard_errors_total"}
    assert routes <= set(ERROR_ROUTES)


@pytest.mark.parametrize("route", ["bytes", "openai"])
def test_a_failure_after_the_body_started_is_one_warning_counted_and_an_incomplete_body(
        faulty, default_voice_id, route, caplog):
    if route == "bytes":
        path, payload, rate = "/tts/bytes", tts_body(default_voice_id, f"Hello there. {FAIL_WORD} now."), CODEC_RATE_HZ
    else:
        path, rate = "/v1/audio/speech", OPENAI_PCM_RATE_HZ
        payload = {"model": "tts-1", "input": f"Hello there. {FAIL_WORD} now.", "voice": "alloy", "response_format": "pcm"}
    caplog.set_level(logging.WARNING)
    before = scrape(faulty.url)
    received = 0
    with httpx.Client(timeout=60) as client, client.stream("POST", faulty.url + path, headers=AUTH, json=payload) as r:
        assert r.status_code == 200
        request_id = r.headers["x-request-id"]
        with pytest.raises(httpx.RemoteProtocolError):  # an incomplete body, never a short one that looks whole
            for piece in r.iter_bytes():
                received += len(piece)
    after = scrape(faulty.url)

    assert received > 0
    assert errors_moved(before, after) == {(route, "generation_failed"): 1}
    assert moved_by(before, after, "gepard_audio_seconds_total", route=route) >= received / 2 / rate
    # logged once, as a warning naming the failure: not the route's line and the lookup's line both
    loud = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(loud) == 1 and loud[0].exc_info is None, [rec.getMessage() for rec in loud]
    assert "GenerationError" in loud[0].getMessage(), loud[0].getMessage()
    # logged once, as a warning naming the request and the code: no ERROR, no traceback
    loud = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(loud) == 1, [rec.getMessage() for rec in loud]
    line = loud[0].getMessage()
    assert loud[0].levelno == logging.WARNING and loud[0].exc_info is None
    assert request_id in line and "generation_failed" in line, line


@pytest.mark.parametrize("route", ["sse", "openai"])
def test_sse_counts_a_failure_under_the_code_it_sends_and_the_audio_before_it(faulty, default_voice_id, route, caplog):
    caplog.set_level(logging.INFO)
    text = f"Hello there. {FAIL_WORD} now."
    if route == "sse":
        path, payload, rate = "/tts/sse", tts_body(default_voice_id, text, context_id="fails"), CODEC_RATE_HZ
    else:
        path, rate = "/v1/audio/speech", OPENAI_PCM_RATE_HZ
        payload = {"model": "tts-1", "input": text, "voice": "alloy", "response_format": "pcm", "stream_format": "sse"}
    before = scrape(faulty.url)
    events = sse_events(httpx.post(faulty.url + path, headers=AUTH, timeout=60, json=payload))
    after = scrape(faulty.url)
    code = events[-1]["error_code"] if route == "sse" else events[-1]["error"]["code"]
    assert events[-1]["type"] == "error" and code == "generation_failed", events[-1]
    received = sum(len(base64.b64decode(e["data"] if route == "sse" else e["audio"]))
                   for e in events if e["type"] in ("chunk", "speech.audio.delta"))
    assert received > 0
    assert errors_moved(before, after) == {(route, "generation_failed"): 1}
    assert moved_by(before, after, "gepard_audio_seconds_total", route=route) >= received / 2 / rate
    # logged once, as a warning naming the failure: not the route's line and the lookup's line both
    loud = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(loud) == 1 and loud[0].exc_info is None, [rec.getMessage() for rec in loud]
    assert "GenerationError" in loud[0].getMessage(), loud[0].getMessage()


async def ws_context_that_fails(ws_url: str, voice: str) -> list[dict]:
    async with connect(ws_url + "/tts/websocket", additional_headers=AUTH) as ws:
        await send(ws, gen("fails", f"{FAIL_WORD} now.", voice, cont=False))
        return await read_until_terminal(ws, ["fails"])


def test_a_websocket_context_cut_short_counts_the_audio_it_made(faulty, default_voice_id, caplog):
    caplog.set_level(logging.WARNING)
    before = scrape(faulty.url)
    messages = asyncio.run(ws_context_that_fails(faulty.ws_url, default_voice_id))
    after = scrape(faulty.url)
    assert messages[-1]["type"] == "error" and messages[-1]["error_code"] == "generation_failed", messages[-1]
    # logged once, as a warning naming the code: no traceback
    loud = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(loud) == 1 and loud[0].levelno == logging.WARNING and loud[0].exc_info is None, \
        [rec.getMessage() for rec in loud]
    assert "GenerationError" in loud[0].getMessage(), loud[0].getMessage()
    received = len(audio_of(messages))
    assert received > 0  # the segment failed partway: its first audio went out
    assert moved_by(before, after, "gepard_audio_seconds_total", route="ws") >= received / 2 / CODEC_RATE_HZ


def test_a_client_that_hangs_up_has_the_audio_made_for_it_counted(faulty, default_voice_id):
    long_text = " ".join(f"Sentence number {i} is here." for i in range(60))
    before = scrape(faulty.url)
    with httpx.Client(timeout=60) as client, \
            client.stream("POST", f"{faulty.url}/tts/bytes", headers=AUTH, json=tts_body(default_voice_id, long_text)) as r:
        assert r.status_code == 200
        received = len(next(r.iter_bytes()))
    # leaving the block closed the connection mid-body; the stream then ends (and reports) on the server
    after = wait_for(faulty.url, lambda s: moved_by(before, s, "gepard_stream_rtf_count", route="bytes") >= 1)
    assert moved_by(before, after, "gepard_stream_rtf_count", route="bytes") == 1
    assert moved_by(before, after, "gepard_audio_seconds_total", route="bytes") >= received / 2 / CODEC_RATE_HZ > 0


def post_after_a_pause(port: int, path: str, payload: dict, pause_s: float) -> tuple[float, bytes]:
    """POST ``payload`` as curl sends a large body (``Expect: 100-continue``), sending it ``pause_s``
    after the server asked for it (which the route does once the request started there: after its
    authentication). Returns the seconds from the request's first byte to the response head, and
    the head."""
    body = json.dumps(payload).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        t0 = time.perf_counter()
        sock.sendall(head)
        assert sock.recv(1024).startswith(b"HTTP/1.1 100 ")
        time.sleep(pause_s)
        sock.sendall(body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
        return time.perf_counter() - t0, answer  # then hang up: the rest of the stream is not needed


@pytest.mark.parametrize("route, path", [("bytes", "/tts/bytes"), ("sse", "/tts/sse"), ("openai", "/v1/audio/speech")])
def test_http_time_to_first_audio_counts_from_the_request_start(faulty, default_voice_id, route, path):
    if route == "openai":
        payload = {"model": "tts-1", "input": "Hello there.", "voice": "alloy", "response_format": "pcm"}
    else:
        payload = tts_body(default_voice_id, "Hello there.", **({"context_id": "ttfa"} if route == "sse" else {}))
    before = scrape(faulty.url)
    waited, head = post_after_a_pause(faulty.port, path, payload, PAUSE_S)
    assert head.startswith(b"HTTP/1.1 200 "), head
    after = scrape(faulty.url)
    assert moved_by(before, after, "gepard_time_to_first_audio_seconds_count", route=route) == 1
    observed = moved_by(before, after, "gepard_time_to_first_audio_seconds_sum", route=route)
    # the request started before the route asked for its body, and its response after the first
    # audio: the figure holds the client's pause and lies inside the client's own wait
    assert PAUSE_S <= observed <= waited


async def ws_context_with_a_late_first_text(ws_url: str, voice: str, pause_s: float) -> float:
    """A context opened with no text (as agent frameworks open one per turn), its first words sent
    ``pause_s`` later; returns the seconds from sending them to their first chunk."""
    async with connect(ws_url + "/tts/websocket", additional_headers=AUTH) as ws:
        await send(ws, gen("late", "", voice))
        await asyncio.sleep(pause_s)
        t0 = time.perf_counter()
        await send(ws, gen("late", "Hello there.", voice, cont=False))
        while (msg := await recv(ws, 30.0))["type"] != "chunk":
            assert msg["type"] not in ("error", "done"), msg
        waited = time.perf_counter() - t0
        messages = await read_until_terminal(ws, ["late"])
        assert messages[-1]["type"] == "done", messages[-1]
        return waited


def test_websocket_time_to_first_audio_leaves_out_the_clients_pause(faulty, default_voice_id):
    before = scrape(faulty.url)
    waited = asyncio.run(ws_context_with_a_late_first_text(faulty.ws_url, default_voice_id, PAUSE_S))
    after = scrape(faulty.url)
    assert moved_by(before, after, "gepard_time_to_first_audio_seconds_count", route="ws") == 1
    observed = moved_by(before, after, "gepard_time_to_first_audio_seconds_sum", route="ws")
    # counted from when the server had the words: inside the client's own wait for the first chunk
    assert 0 < observed <= waited
