"""StreamingResampler: streamed output == one-shot soxr output, for every protocol rate."""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from api.audio.formats import SUPPORTED_SAMPLE_RATES_HZ
from api.audio.resampling import StreamingResampler

IN_RATE = 22050
# Irregular chunk sizes, from single samples to more than a second.
CHUNK_SIZES = [1, 2, 7, 100, 511, 1024, 3, 2205, 30000, 13, 4096]


def _utterance(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / IN_RATE
    tone = 0.4 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 1.3 * t)
    return (tone + 0.05 * rng.standard_normal(n)).astype(np.float32)


def _stream(resampler: StreamingResampler, x: np.ndarray) -> np.ndarray:
    parts, i, k = [], 0, 0
    while i < len(x):
        n = CHUNK_SIZES[k % len(CHUNK_SIZES)]
        parts.append(resampler.process(x[i : i + n]))
        i, k = i + n, k + 1
    parts.append(resampler.flush())
    assert all(p.dtype == np.float32 and p.ndim == 1 for p in parts)
    return np.concatenate(parts)


@pytest.mark.parametrize("out_rate", SUPPORTED_SAMPLE_RATES_HZ)
@pytest.mark.parametrize("n", [1, 999, 22050 * 2 + 17])
def test_streamed_equals_whole_within_tolerance(out_rate, n):
    x = _utterance(n)
    streamed = _stream(StreamingResampler(out_rate), x)
    whole = x if out_rate == IN_RATE else soxr.resample(x, IN_RATE, out_rate, quality="HQ")
    assert abs(len(streamed) - round(n * out_rate / IN_RATE)) <= 1
    m = min(len(streamed), len(whole))
    assert np.max(np.abs(streamed[:m] - whole[:m]), initial=0.0) <= 1e-4


def test_identity_when_rates_match():
    r = StreamingResampler(22050)
    x = _utterance(500)
    assert r.is_identity
    out = r.process(x)
    np.testing.assert_array_equal(out, x)
    assert out is not x  # a copy: the caller may reuse its buffer
    assert r.flush().shape == (0,)


def test_counters_and_tone_frequency_survive():
    r = StreamingResampler(16000)
    t = np.arange(22050) / 22050
    y = _stream(r, (0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32))
    assert (r.samples_in, r.samples_out) == (22050, len(y)) and len(y) == 16000
    spectrum = np.abs(np.fft.rfft(y * np.hanning(len(y))))
    assert abs(np.argmax(spectrum) * 16000 / len(y) - 1000) <= 2


def test_flush_without_input_and_use_after_flush():
    r = StreamingResampler(48000)
    assert r.flush().shape == (0,)
    with pytest.raises(RuntimeError, match="already flushed"):
        r.process(np.zeros(10, np.float32))
    with pytest.raises(RuntimeError, match="already flushed"):
        r.flush()


def test_rejects_bad_rates_and_shapes():
    with pytest.raises(ValueError, match="out_rate_hz=0"):
        StreamingResampler(0)
    with pytest.raises(ValueError, match=r"shape \(2, 5\)"):
        StreamingResampler(16000).process(np.zeros((2, 5), np.float32))
