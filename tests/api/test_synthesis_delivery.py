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
        prefix = await svc.voice_prefix(DEFAULT_VOICE_ID)
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
        prefix = await svc.voice_prefix(DEFAULT_VOICE_ID)
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
        prefix = await svc.voice_prefix(DEFAULT_VOICE_ID)
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
