"""The operator metrics of issue 8 move after real traffic on a live gateway (tiny checkpoint).

Real synthesis on every route, the OpenAI-compatible one too (a cloned voice and the default one),
voice store calls, then a scrape of /metrics: every histogram counted, the counters traffic implies
went up, and the engine's running/waiting/KV gauges are back at 0 once the streams ended. Figures
are compared with a scrape taken before, because the ``gateway`` server is shared by the session
(a labelled sample that first appears with this traffic counts from 0).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

from tests.api.routes._voices_support import CLIP_22K, clone, encode_clip, speech
from tests.api.routes.ws_helpers import RAW_S16_22K, gen, read_until_terminal, recv, send

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
