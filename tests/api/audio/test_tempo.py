"""TimeStretch (api/audio/tempo.py): the length is round(N / speed) however the input is cut, the
pitch stays, the audio is moved in time (not cut or padded into shape), and 1.0 is the input itself."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal

from api.audio.tempo import FEED_SAMPLES, TimeStretch, atempo_factors

SR = 22050
SPEEDS = (0.25, 0.6, 0.8, 1.25, 1.5, 4.0)  # Cartesia's 0.6-1.5 and OpenAI's extremes


def speech_like(n: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(n) * 0.2
    return scipy.signal.sosfilt(scipy.signal.butter(4, [0.01, 0.3], "bandpass", output="sos"), x).astype(np.float32)


def tone(hz: float, n: int) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * hz * np.arange(n) / SR)).astype(np.float32)


def stretched(speed: float, x: np.ndarray, cuts: list[int] | None = None) -> np.ndarray:
    stretch = TimeStretch(speed, SR)
    pieces = [stretch.push(p) for p in (np.split(x, cuts) if cuts else [x])]
    return np.concatenate(pieces + [stretch.flush()])


def dominant_hz(x: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return float(np.fft.rfftfreq(x.size, 1 / SR)[np.argmax(spectrum)])


@pytest.mark.parametrize("speed", SPEEDS)
@pytest.mark.parametrize("n", [SR * 2, 24 * 1024, 3528, 1000, 1])
def test_the_length_is_n_over_speed(speed, n):
    out = stretched(speed, speech_like(n))
    assert out.dtype == np.float32 and out.ndim == 1
    assert out.size == round(n / speed)


@pytest.mark.parametrize("speed", SPEEDS)
def test_atempo_alone_is_near_n_over_speed_so_the_length_fix_is_small(speed):
    """flush makes the length exact by cutting or padding atempo's own tail: that fix is worth less
    than 70 ms of the input (about atempo's window), so the stretched audio is atempo's, not padding."""
    x = speech_like(SR * 2)
    stretch = TimeStretch(speed, SR)
    body = stretch.push(x)
    stretch._graph.push(None)  # atempo's own end, before the length is fixed
    raw = body.size + sum(p.size for p in stretch._drain())
    assert abs(raw - round(x.size / speed)) * speed <= 0.07 * SR


@pytest.mark.parametrize("speed", SPEEDS)
def test_the_pitch_stays(speed):
    out = stretched(speed, tone(440.0, SR * 2))
    body = out[SR // 10: -SR // 10]  # away from the stretch's ramps at either end
    assert dominant_hz(body) == pytest.approx(440.0, abs=3.0)
    assert np.sqrt(np.mean(body ** 2)) == pytest.approx(0.5 / np.sqrt(2), rel=0.1)  # a tone, not silence


@pytest.mark.parametrize("speed", [0.6, 1.5, 4.0])
def test_the_audio_moves_in_time(speed):
    """440 Hz for one second, then 660 Hz: the change comes at SR / speed in the output, not at SR
    (cut to length) and not at the end (padded), so the whole input is stretched."""
    x = np.concatenate([tone(440.0, SR), tone(660.0, SR)])
    out = stretched(speed, x)
    win = 1024
    change = round(SR / speed)
    for at, hz in ((change - 3 * win, 440.0), (change + 2 * win, 660.0)):
        assert dominant_hz(out[at: at + win]) == pytest.approx(hz, abs=SR / win)


@pytest.mark.parametrize("speed", SPEEDS)
def test_small_pieces_give_what_one_push_gives(speed):
    x = speech_like(SR)
    whole = stretched(speed, x)
    cuts = list(range(1, 200, 7)) + list(range(200, x.size, 613))  # 1-sample pieces, then codec-ish ones
    small = stretched(speed, x, cuts)
    assert small.size == whole.size == round(x.size / speed)
    # atempo's output depends on where its pieces end only through FEED_SAMPLES' cuts: close, not equal
    assert np.corrcoef(small, whole)[0, 1] > 0.9


@pytest.mark.parametrize("speed", [0.6, 0.8, 1.25, 1.5, 2.0])
def test_a_first_codec_chunk_yields_audio_at_once(speed):
    """atempo holds its window, not the chunk: a segment's first chunk (3528 samples at the default
    schedule) comes out mostly at once, so its first audio is not delayed to the next chunk."""
    stretch = TimeStretch(speed, SR)
    first = stretch.push(speech_like(3528))
    assert first.size > 0
    held = 3528 - first.size * speed  # input samples not yet out
    assert held <= 1024 + 2 * FEED_SAMPLES


def test_speed_one_is_the_input_itself():
    x = speech_like(5000)
    stretch = TimeStretch(1.0, SR)
    assert stretch.identity and stretch.factors == []
    assert stretch.push(x) is x
    assert stretch._graph is None  # no filter graph at all
    assert stretch.flush().size == 0
    assert (stretch.samples_in, stretch.samples_out) == (5000, 5000)


def test_push_last_brings_the_tail():
    x = speech_like(SR)
    stretch = TimeStretch(1.5, SR)
    out = np.concatenate([stretch.push(x[:5000]), stretch.push(x[5000:], last=True)])
    assert out.size == round(SR / 1.5)
    with pytest.raises(RuntimeError, match="flushed"):
        stretch.push(x)
    with pytest.raises(RuntimeError, match="already flushed"):
        stretch.flush()


def test_nothing_pushed_is_nothing_out():
    stretch = TimeStretch(0.8, SR)
    assert stretch.push(np.zeros(0, np.float32)).size == 0
    assert stretch.flush().size == 0


@pytest.mark.parametrize("speed, factors", [
    (1.0, []), (1.5, [1.5]), (0.5, [0.5]), (2.0, [2.0]), (4.0, [2.0, 2.0]), (0.25, [0.5, 0.5]),
])
def test_factors_beyond_one_instance_are_chained(speed, factors):
    assert atempo_factors(speed) == pytest.approx(factors)


@pytest.mark.parametrize("speed", [3.0, 0.3, 10.0])
def test_chained_factors_multiply_to_the_speed(speed):
    factors = atempo_factors(speed)
    assert len(factors) >= 2 and all(0.5 <= f <= 2.0 for f in factors)
    assert np.prod(factors) == pytest.approx(speed)


@pytest.mark.parametrize("speed", [0.0, -1.0, float("nan"), float("inf")])
def test_a_speed_that_is_no_rate_is_refused(speed):
    with pytest.raises(ValueError, match="positive number"):
        TimeStretch(speed)
