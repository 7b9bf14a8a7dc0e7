"""SynthesisService.speak at a speech rate: the segment's speech is stretched (api/audio/tempo.py)
before it is yielded, so what the stream timing and the sinks count is the delivered audio; the
segment's own speed wins over the request's; a pause after the speech is not stretched; speed 1.0
builds no filter graph and goes through no thread."""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest

import api.synthesis
from api.app import DEFAULT_VOICE_ID, open_runtime
from engine.requests import SamplingParams
from tests.api.conftest import gateway_settings


@pytest.fixture
async def rt(tiny_ckpt_dir, tmp_path):
    runtime = await open_runtime(gateway_settings(tiny_ckpt_dir, tmp_path / "data"))
    try:
        yield runtime
    finally:
        await runtime.aclose()


async def spoken(rt, segment, **kw) -> tuple[np.ndarray, list[int]]:
    """The segment's audio at temperature 0, and the size of each piece yielded."""
    svc = rt.service
    prefix = (await svc.voice_prompt(DEFAULT_VOICE_ID)).prefix
    pieces = []
    async with contextlib.aclosing(svc.speak(segment, prefix, SamplingParams(temperature=0.0), "speed", **kw)) as s:
        async for pcm in s:
            assert pcm.dtype == np.float32 and pcm.ndim == 1
            pieces.append(pcm)
    return np.concatenate(pieces), [p.size for p in pieces]


async def test_the_speech_is_stretched_and_the_timing_counts_the_stretched_audio(rt):
    svc = rt.service
    segment = svc.segment("Hello there.", "en")
    plain, _ = await spoken(rt, segment)
    with svc.stream_timing("test") as timing:
        fast, sizes = await spoken(rt, segment, speed=1.5, timing=timing)
        assert timing.audio_s == pytest.approx(fast.size / svc.sample_rate_hz)
    assert fast.size == round(plain.size / 1.5)
    assert len(sizes) > 1  # streamed, not held to the end
    assert not np.allclose(fast, plain[: fast.size], atol=1e-3)
    assert svc.in_flight == 0 and svc.meter.busy_streams == 0


async def test_the_segments_speed_wins_over_the_requests(rt):
    svc = rt.service
    segment = svc.segment("Hello there.", "en")
    plain, _ = await spoken(rt, segment)
    slow, _ = await spoken(rt, dataclasses.replace(segment, speed=0.8), speed=1.5)
    assert slow.size == round(plain.size / 0.8)
    same, _ = await spoken(rt, dataclasses.replace(segment, speed=1.0), speed=1.5)
    np.testing.assert_array_equal(same, plain)  # a segment at 1.0 inside a fast request: untouched


async def test_a_pause_after_the_speech_is_not_stretched(rt):
    svc = rt.service
    segment = svc.segment("Hello there.", "en")
    plain, _ = await spoken(rt, segment)
    paused, _ = await spoken(rt, dataclasses.replace(segment, pause_after_s=0.5), speed=1.25)
    speech = round(plain.size / 1.25)
    assert paused.size == speech + round(0.5 * svc.sample_rate_hz)
    assert not paused[speech:].any()
    alone, _ = await spoken(rt, dataclasses.replace(svc.segment("", "en"), pause_after_s=0.25), speed=0.6)
    assert alone.size == round(0.25 * svc.sample_rate_hz)


async def test_speed_one_builds_no_filter_graph(rt, monkeypatch):
    made = []

    class Recording(api.synthesis.TimeStretch):
        def __init__(self, *args, **kw) -> None:
            super().__init__(*args, **kw)
            made.append(self)

    monkeypatch.setattr(api.synthesis, "TimeStretch", Recording)
    segment = rt.service.segment("Hello there.", "en")
    plain, _ = await spoken(rt, segment)
    assert [s.identity for s in made] == [True] and made[0]._graph is None
    assert made[0].samples_in == 0  # never called: the codec's pieces go out as they are
    fast, _ = await spoken(rt, segment, speed=1.25)
    assert not made[1].identity and made[1].samples_in == plain.size and made[1].samples_out == fast.size
