"""bench/gateway.py runs end to end on the production server configuration (a smoke run: one
round at two streams; the figures themselves are the README's, not a test's), and its summary of a
path's streams."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ports import free_port

REPO = Path(__file__).resolve().parents[1]


def test_the_gateway_bench_reports_both_paths_and_the_overhead(tmp_path):
    env = {**os.environ, "GEPARD_BENCH_DIR": str(tmp_path / "models")}
    done = subprocess.run([sys.executable, "bench/gateway.py", "--concurrency", "2", "--rounds", "1",
                           "--port", str(free_port())], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    rows = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\s+2\s+(direct|gateway)\s+([\d.]+)", done.stdout, re.M)}
    assert set(rows) == {"direct", "gateway"} and all(ttfa > 0 for ttfa in rows.values()), done.stdout
    assert re.search(r"^\s+2\s+ratio TTFA gateway/direct = [\d.]+, overhead per chunk = -?[\d.]+ ms$", done.stdout, re.M)


def test_a_paths_ttfa_is_interpolated_and_a_stream_without_audio_fails():
    from bench.gateway import summarize_path

    # (first audio s or None, stream s, chunks): the third stream never got audio
    s = summarize_path([(0.1, 1.0, 5), (0.3, 1.2, 5), (None, 0.4, 0)])
    assert (s.n, s.failed) == (2, 1)  # not scored as a 0 ms first audio
    assert s.ttfa_p50_ms == pytest.approx(200.0) and s.ttfa_p90_ms == pytest.approx(280.0)
    assert s.ttfa_p90_ms >= s.ttfa_p50_ms  # sorted[int(0.9 * (n - 1))] gave 100 ms here: below the p50
    assert s.wall_s == 1.0 and s.chunks == 5
    none = summarize_path([(None, 0.4, 0)])
    assert none.failed == 1 and math.isnan(none.ttfa_p50_ms)
