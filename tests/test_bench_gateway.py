"""bench/gateway.py runs end to end on the production server configuration (a smoke run: one
round at two streams; the figures themselves are the README's, not a test's)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.api.live import free_port

REPO = Path(__file__).resolve().parents[1]


def test_the_gateway_bench_reports_both_paths_and_the_overhead(tmp_path):
    env = {**os.environ, "GEPARD_BENCH_DIR": str(tmp_path / "models")}
    done = subprocess.run([sys.executable, "bench/gateway.py", "--concurrency", "2", "--rounds", "1",
                           "--port", str(free_port())], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    rows = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\s+2\s+(direct|gateway)\s+([\d.]+)", done.stdout, re.M)}
    assert set(rows) == {"direct", "gateway"} and all(ttfa > 0 for ttfa in rows.values()), done.stdout
    assert re.search(r"^\s+2\s+ratio TTFA gateway/direct = [\d.]+, overhead per chunk = -?[\d.]+ ms$", done.stdout, re.M)
