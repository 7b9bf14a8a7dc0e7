"""The synthesis service's stream of one segment: it asks the engine for frames a codec chunk at a
time (SynthesisRequest.delivery), so its task is woken once per chunk of audio, not once per engine
step; and what it counts (generations in flight, busy streams for admission) is right however the
stream goes."""

from __future__ import annotations

import contextlib

import pytest

from api.app import DEFAULT_VOICE_ID, open_runtime
from engine.requests import SamplingParams
from tests.api.conftest import gateway_settings


async def test_each_engine_request_carries_the_codecs_chunk_schedule(tiny_ckpt_dir, tmp_path):
    rt = await open_runtime(gateway_settings(tiny_ckpt_dir, tmp_path / "data", chunk_schedule=(3, 5)))
    try:
        svc = rt.service
        real_generate, requests, chunks = rt.engine.generate, [], []

        async def recording_generate(request):  # the real engine, with each request and chunk noted
            requests.append(request)
            async for chunk in real_generate(request):
                chunks.append(chunk)
                yield chunk

        rt.engine.generate = recording_generate
        prefix = (await svc.voice_prompt(DEFAULT_VOICE_ID)).prefix
        pcm = []
        async with contextlib.aclosing(svc.speak(svc.segment("Hello there, how are you?", "en"), prefix,
                                                 SamplingParams(temperature=0.0), "delivery-1")) as stream:
            async for piece in stream:
                pcm.append(piece)
    finally:
        await rt.aclose()
    assert [r.delivery for r in requests] == [(3, 5)] == [rt.decoder.schedule.sizes]
    frames = sum(c.num_frames for c in chunks)
    assert sum(p.size for p in pcm) == frames * rt.decoder.samples_per_frame
    # woken at 3, 8, 13, ... and at the end: never more chunks than boundaries plus one
    assert len(chunks) <= 1 + len(range(3, frames + 1, 5)) < frames


async def test_a_stream_waiting_for_its_consumer_is_not_counted_as_busy(tiny_ckpt_dir, tmp_path):
    """The load meter's busy streams are those generating: a stream held at its yield by a client
    reading at its own pace (a player at real time, a stalled HTTP reader) is not load, and counted
    as busy it read as saturation that refused other streams."""
    import asyncio

    rt = await open_runtime(gateway_settings(tiny_ckpt_dir, tmp_path / "data", chunk_schedule=(3, 5)))
    try:
        svc = rt.service
        prefix = (await svc.voice_prompt(DEFAULT_VOICE_ID)).prefix
        held, pieces = [], 0
        segment = svc.segment("Hello there, how are you today?", "en")
        async with contextlib.aclosing(svc.speak(segment, prefix, SamplingParams(temperature=0.0), "slow-reader")) as stream:
            async for _ in stream:
                pieces += 1
                await asyncio.sleep(0.05)  # the client takes its time with each piece
                held.append(svc.meter.busy_streams)
        assert pieces > 2 and held == [0] * pieces
        assert svc.meter.busy_streams == 0
        # a consumer that leaves at a yield leaves nothing counted either
        async with contextlib.aclosing(svc.speak(segment, prefix, SamplingParams(temperature=0.0), "leaver")) as stream:
            async for _ in stream:
                break
        assert svc.meter.busy_streams == 0
    finally:
        await rt.aclose()


async def test_a_codec_that_refuses_a_stream_leaves_no_generation_counted(tiny_ckpt_dir, tmp_path):
    from codec_worker.errors import CodecClosedError

    rt = await open_runtime(gateway_settings(tiny_ckpt_dir, tmp_path / "data"))
    try:
        svc = rt.service
        prefix = (await svc.voice_prompt(DEFAULT_VOICE_ID)).prefix
        real_open = rt.decoder.open_stream

        def closing():
            raise CodecClosedError("the codec is shutting down")

        rt.decoder.open_stream = closing
        segment = svc.segment("Hello there.", "en")
        with pytest.raises(CodecClosedError):
            async with contextlib.aclosing(svc.speak(segment, prefix, SamplingParams(), "refused")) as stream:
                async for _ in stream:
                    pass
        assert svc.in_flight == 0  # else each refusal would shrink GEPARD_MAX_CONCURRENT_GENERATIONS for good
        rt.decoder.open_stream = real_open
    finally:
        await rt.aclose()


async def test_the_load_meter_does_not_count_a_piece_still_being_generated(tiny_ckpt_dir, tmp_path):
    """A stream's time counts as load together with the audio it produced: while its next chunk is
    being generated the saturation is that of the pieces already out, not inflated by time with no
    audio for it yet (counted so, halfway through its third piece a stream read as 1.5x its rate,
    and on an idle server a second stream was refused that the pair would have served)."""
    from api.admission import LoadMeter

    class Clock:
        now = 100.0

        def __call__(self) -> float:
            return self.now

    rt = await open_runtime(gateway_settings(tiny_ckpt_dir, tmp_path / "data", chunk_schedule=(3, 5)))
    try:
        svc = rt.service
        clock = Clock()
        svc.meter = svc.admission.meter = LoadMeter(tau_s=2.0, clock=clock)
        real_open, probes, pieces = rt.decoder.open_stream, [], []

        class PacedStream:  # each piece after the first takes 0.1 s of the meter's clock to make
            def __init__(self, inner) -> None:
                self.inner, self.made = inner, 0

            def __getattr__(self, name):
                return getattr(self.inner, name)

            async def _paced(self, call):
                if self.made >= 1:
                    clock.now += 0.05
                    if self.made >= 2:  # halfway through a piece: what would a second stream be told?
                        probes.append((len(pieces), svc.meter.predicted_saturation(1)))
                    clock.now += 0.05
                self.made += 1
                return await call()

            async def push(self, codes):
                return await self._paced(lambda: self.inner.push(codes))

            async def finish(self):
                return await self._paced(self.inner.finish)

        rt.decoder.open_stream = lambda: PacedStream(real_open())
        prefix = (await svc.voice_prompt(DEFAULT_VOICE_ID)).prefix
        async with contextlib.aclosing(svc.speak(svc.segment("Hello there, how are you today?", "en"), prefix,
                                                 SamplingParams(temperature=0.0), "paced")) as stream:
            async for piece in stream:
                pieces.append(piece.size / svc.sample_rate_hz)
    finally:
        await rt.aclose()
    assert len(pieces) >= 3 and probes and probes[0][0] == 2
    # halfway through the third piece the meter has one counted piece: 0.1 s for pieces[1]
    assert probes[0][1] == pytest.approx(2 * 0.1 / pieces[1], rel=0.02)


async def test_a_segment_pause_is_silence_after_its_speech_and_a_pause_alone_asks_the_engine_nothing(tiny_ckpt_dir, tmp_path):
    """``Segment.pause_after_s`` (a ``<break>``) is that much silence after the segment's speech, at
    the codec's rate; a segment that is a pause only is silence with no engine request."""
    import dataclasses

    import numpy as np

    rt = await open_runtime(gateway_settings(tiny_ckpt_dir, tmp_path / "data"))
    try:
        svc = rt.service
        real_generate, requests = rt.engine.generate, []

        def recording_generate(request):
            requests.append(request)
            return real_generate(request)

        rt.engine.generate = recording_generate
        prefix = (await svc.voice_prompt(DEFAULT_VOICE_ID)).prefix

        async def spoken(segment) -> np.ndarray:
            async with contextlib.aclosing(svc.speak(segment, prefix, SamplingParams(temperature=0.0), "pause")) as s:
                return np.concatenate([p async for p in s])

        speech = svc.segment("Hello there.", "en")
        plain = await spoken(speech)
        paused = await spoken(dataclasses.replace(speech, pause_after_s=0.5))
        assert len(requests) == 2
        pause = round(0.5 * svc.sample_rate_hz)
        assert paused.size == plain.size + pause
        np.testing.assert_array_equal(paused[: plain.size], plain)  # greedy: the same speech
        assert not paused[plain.size:].any()
        alone = await spoken(dataclasses.replace(svc.segment("", "en"), pause_after_s=0.25))
        assert alone.size == round(0.25 * svc.sample_rate_hz) and not alone.any()
        assert len(requests) == 2 and svc.in_flight == 0
    finally:
        await rt.aclose()


async def test_a_segment_read_as_very_many_words_goes_as_several_engine_requests(tiny_ckpt_dir, tmp_path):
    """400 digits read one by one are ~400 words: one request would meet the frame cap (~93 s) long
    before the end. The segment goes as pieces of at most MAX_PIECE_WORDS words in a row, each its
    own engine request with its own id, and the audio of all of them is the segment's; closing the
    stream in the first piece makes no request for the others."""
    from api.text.speech_pieces import MAX_PIECE_WORDS

    rt = await open_runtime(gateway_settings(tiny_ckpt_dir, tmp_path / "data"))
    try:
        svc = rt.service
        real_generate, requests, frames = rt.engine.generate, [], []

        async def recording_generate(request):
            requests.append(request)
            async for chunk in real_generate(request):
                frames.append(chunk.num_frames)
                yield chunk

        rt.engine.generate = recording_generate
        prefix = (await svc.voice_prompt(DEFAULT_VOICE_ID)).prefix
        segment = svc.segment("My code is " + "1234567890" * 40 + ".", "en")
        sampling = SamplingParams(temperature=0.0, max_frames=12)
        async with contextlib.aclosing(svc.speak(segment, prefix, sampling, "digits")) as stream:
            samples = sum([pcm.size async for pcm in stream])
        assert [r.request_id for r in requests] == ["digits", "digits.1", "digits.2", "digits.3"]
        assert all(len(r.text.split()) <= MAX_PIECE_WORDS for r in requests)
        assert " ".join(r.text for r in requests).split() == segment.speech_text.split()
        assert samples == sum(frames) * rt.decoder.samples_per_frame > 0
        assert svc.in_flight == 0

        requests.clear()
        async with contextlib.aclosing(svc.speak(segment, prefix, sampling, "left")) as stream:
            async for _ in stream:
                break  # the client is gone at the first audio
        assert [r.request_id for r in requests] == ["left"] and svc.in_flight == 0
    finally:
        await rt.aclose()
