"""Every metric the Grafana dashboard queries exists on a live gateway's /metrics after real
synthesis on the tiny checkpoint through /tts/bytes, /tts/sse and /tts/websocket. A panel whose
metric the gateway does not export stays empty forever; this catches a renamed or missing metric."""

from __future__ import annotations

import json

import httpx
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

from tests.api.routes.ws_helpers import gen, read_until_terminal, send
from tests.deploy._support import REPO, dashboard_exprs, gepard_names

DASHBOARD = REPO / "deploy/grafana/dashboards/gepard.json"
ROUTES = ("bytes", "sse", "ws")  # the route label of each TTS route
#: per-route panels: each route must have observations after its synthesis
PER_ROUTE_HISTOGRAMS = ("gepard_time_to_first_audio_seconds", "gepard_stream_rtf", "gepard_stream_underrun_seconds")


def body(voice_id: str, transcript: str) -> dict:
    return {"model_id": "sonic-3", "transcript": transcript, "voice": voice_id,
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}}


def declared_families(text: str) -> dict[str, object]:
    """Families on /metrics by every name PromQL can use for them (counters with and without _total)."""
    families = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family
        if family.type == "counter":
            families[family.name + "_total"] = family
    return families


async def test_every_dashboard_metric_is_on_metrics_after_real_synthesis(gateway, default_voice_id):
    dashboard = json.loads(DASHBOARD.read_text())
    wanted = set().union(*(gepard_names(expr) for expr in dashboard_exprs(dashboard)))
    assert len(wanted) >= 20, wanted

    # 1) real synthesis on each route (a voice lookup and the engine and codec run for each)
    r = httpx.post(gateway.url + "/tts/bytes", json=body(default_voice_id, "Hello there."), timeout=60)
    assert r.status_code == 200 and r.content, r.text
    r = httpx.post(gateway.url + "/tts/sse", json=body(default_voice_id, "How are you today?"), timeout=60)
    assert r.status_code == 200 and "event: done" in r.text, r.text
    async with connect(gateway.ws_url + "/tts/websocket") as ws:
        await send(ws, gen("dash-1", "Nice to meet you.", default_voice_id, cont=False))
        messages = await read_until_terminal(ws, ["dash-1"])
    assert messages[-1]["type"] == "done", messages[-1]

    # 2) every family the dashboard queries is declared on /metrics
    scrape = httpx.get(gateway.url + "/metrics", timeout=10)
    assert scrape.status_code == 200
    families = declared_families(scrape.text)
    assert sorted(wanted - set(families)) == [], "the dashboard queries metrics the gateway does not export"

    # 3) and the per-route panels have data for every route
    for name in PER_ROUTE_HISTOGRAMS:
        counts = {s.labels.get("route"): s.value for s in families[name].samples if s.name == name + "_count"}
        for route in ROUTES:
            assert counts.get(route, 0) >= 1, f"{name} has no observation for route {route}: {counts}"
