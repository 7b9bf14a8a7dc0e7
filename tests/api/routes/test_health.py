"""GET / (the SDKs' get_status), /health (readiness with per-part checks) and /metrics on a live server."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer
from tests.api.routes.ws_helpers import gen, read_until_terminal, send
from tests.voices.redis_server import RedisServer


def metric(text: str, name: str) -> float:
    """The value of one sample line ``name value`` (labels included in ``name``)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in the metrics")


def test_status_health_and_metrics(gateway, default_voice_id):
    status = httpx.get(gateway.url + "/", timeout=10)
    assert status.status_code == 200 and status.json()["ok"] is True and status.json()["version"]
    health = httpx.get(gateway.url + "/health", timeout=10)
    assert health.status_code == 200
    assert health.json() == {"ok": True, "checks": {"engine": "ok", "voices": "ok"}, "generations_in_flight": 0}
    r = httpx.post(gateway.url + "/tts/bytes", timeout=60, json={
        "model_id": "sonic-3", "transcript": "Hi.", "voice": default_voice_id,
        "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 8000}})
    assert r.status_code == 200
    metrics = httpx.get(gateway.url + "/metrics", timeout=10)
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    assert 'gepard_requests_total{route="bytes"}' in text
    assert "gepard_time_to_first_audio_seconds_bucket" in text and "gepard_generations_in_flight 0.0" in text


async def test_websocket_contexts_are_counted(gateway, default_voice_id):
    before = httpx.get(gateway.url + "/metrics", timeout=10).text
    async with connect(gateway.ws_url + "/tts/websocket") as ws:
        await send(ws, gen("m-ok", "Hello there.", default_voice_id, cont=False))
        await send(ws, gen("m-bad", "Hi.", default_voice_id) | {"model_id": "unknown-model"})
        await read_until_terminal(ws, ["m-ok", "m-bad"])
    after = httpx.get(gateway.url + "/metrics", timeout=10).text
    name = 'gepard_requests_total{route="ws"}'
    assert metric(after, name) == (metric(before, name) if name in before else 0.0) + 1
    assert metric(after, 'gepard_errors_total{error_code="model_not_found",route="ws"}') >= 1
    assert metric(after, "gepard_websocket_contexts") == 0.0
    assert metric(after, 'gepard_audio_seconds_total{route="ws"}') > 0


@pytest.mark.redis
def test_probes_answer_within_their_timeout_while_redis_hangs(tiny_ckpt_dir, tmp_path):
    """A stopped (not dead) Redis answers nothing: the store's client waits 2 s per read and retries
    twice. The probes must still answer well inside Kubernetes' 3 s readiness timeout, saying the
    store check timed out, or every replica would turn unready, then be restarted, for it."""
    redis = RedisServer.start()
    try:
        with LiveServer(gateway_settings(tiny_ckpt_dir, tmp_path, redis_url=redis.url)) as server:
            os.kill(redis.process.pid, signal.SIGSTOP)
            try:
                for probe in ("/health", "/ready"):
                    r = httpx.get(server.url + probe, timeout=3.0)
                    assert r.status_code == 200, (probe, r.text)
                    assert r.json()["checks"] == {"engine": "ok", "voices": "TimeoutError: no answer within 1 s"}, probe
            finally:
                os.kill(redis.process.pid, signal.SIGCONT)
            deadline = time.monotonic() + 10
            while httpx.get(server.url + "/ready").json()["checks"]["voices"] != "ok":  # back once Redis answers
                assert time.monotonic() < deadline, "the voice store check did not recover after Redis resumed"
                time.sleep(0.1)
    finally:
        redis.stop()
