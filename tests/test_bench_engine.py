"""bench/engine.py's figures for one burst: interpolated percentiles over the streams that got a
frame; a stream that got none fails, instead of scoring the best time to first frame (0 ms)."""

from __future__ import annotations

import math

import pytest

SPF = 1024 / 22050  # audio seconds per frame


def test_a_stream_without_a_frame_fails_and_is_left_out_of_rtf_and_ttff():
    from bench.engine import summarize

    streams = [(0.010, 1.0, 100), (0.030, 2.0, 100), (None, 0.5, 0)]
    r = summarize("torch", "tiny", 3, 100, 2.0, streams, SPF)
    assert r.failed == 1
    assert r.ttff_p50_ms == pytest.approx(20.0) and r.ttff_p90_ms == pytest.approx(28.0)  # interpolated: p90 >= p50
    assert r.rtf_p50 == pytest.approx(1.5 / (100 * SPF))
    assert r.frames_per_s == 100.0 and r.xrt == pytest.approx(200 * SPF / 2.0)


def test_a_burst_with_no_frame_at_all_measures_nothing():
    from bench.engine import summarize

    r = summarize("torch", "tiny", 1, 100, 1.0, [(None, 0.2, 0)], SPF)
    assert r.failed == 1 and math.isnan(r.ttff_p50_ms) and math.isnan(r.rtf_p50)
