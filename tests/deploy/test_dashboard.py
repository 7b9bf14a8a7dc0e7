"""The Grafana dashboard, statically: valid JSON with the panels the issue asks for, every query on a
data source variable, and every gepard_* metric it queries exported by api/metrics.py. (That the
metrics really appear after traffic is test_dashboard_live.py.)"""

from __future__ import annotations

import json

import pytest

from tests.deploy._support import REPO, dashboard_exprs, exported_metric_names, gepard_names, walk

DASHBOARD = REPO / "deploy/grafana/dashboards/gepard.json"

#: issue 8, item 4 (and the extras): a panel must query each of these families
REQUIRED_FAMILIES = {
    "gepard_time_to_first_audio_seconds", "gepard_stream_underrun_seconds", "gepard_underrun_seconds_total",
    "gepard_stream_rtf", "gepard_websocket_connections", "gepard_websocket_contexts", "gepard_engine_batch_size",
    "gepard_engine_step_seconds", "gepard_engine_kv_cache_usage", "gepard_saturation", "gepard_errors_total",
    "gepard_audio_seconds_total", "gepard_queue_wait_seconds", "gepard_codec_decode_seconds",
    "gepard_voice_store_seconds", "gepard_voice_cache_requests_total", "gepard_streams_refused_total",
}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_panels_cover_what_an_operator_needs(dashboard):
    used = set().union(*(gepard_names(expr) for expr in dashboard_exprs(dashboard)))
    assert sorted(REQUIRED_FAMILIES - used) == []
    ttfa = [p for p in dashboard["panels"] if "gepard_time_to_first_audio_seconds" in json.dumps(p.get("targets", []))]
    exprs = [t["expr"] for p in ttfa for t in p["targets"]]
    for quantile in ("0.5", "0.95", "0.99"):  # p50 / p95 / p99 per route
        assert any(e.startswith(f"histogram_quantile({quantile},") and "by (route, le)" in e for e in exprs), quantile


def test_every_metric_queried_is_exported(dashboard):
    used = set().union(*(gepard_names(expr) for expr in dashboard_exprs(dashboard)))
    assert sorted(used - exported_metric_names()) == []


def test_queries_use_the_datasource_variable_and_panels_do_not_overlap(dashboard):
    for key, value in walk(dashboard["panels"]):
        if key == "datasource":
            assert value == {"type": "prometheus", "uid": "${datasource}"}
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {panel['title']!r} overlaps another"
                cells.add((x, y))
    assert all(t["expr"].strip() for p in dashboard["panels"] for t in p.get("targets", []))
