"""Batched decode across concurrent streams, stream/decoder lifecycle, and the async encoder."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest
import torch

from codec_worker.batching import BatchingCodecDecoder, NanoCodecEncoder, _Job, group_by_width
from codec_worker.errors import CodecClosedError, InvalidAudioError, InvalidCodesError
from codec_worker.interface import CodecDecoder, CodecEncoder, DecodeStream
from codec_worker.nanocodec import NanoCodec
from codec_worker.streaming import DecodeWindow
from tests.codec_worker.conftest import random_codes

TOLERANCE = 1e-5


async def _run_stream(decoder: CodecDecoder, codes: torch.Tensor, pushes: list[int]) -> np.ndarray:
    stream = decoder.open_stream()
    assert isinstance(stream, DecodeStream)
    pieces, at = [], 0
    try:
        for size in pushes:
            pieces.append(await stream.push(codes[:, at : at + size]))
            at += size
            await asyncio.sleep(0)  # let the other streams interleave
        pieces.append(await stream.finish())
    finally:
        await stream.aclose()
    return np.concatenate(pieces)


def _schedule(frames: int, rng: random.Random) -> list[int]:
    pushes: list[int] = []
    while sum(pushes) < frames:
        pushes.append(min(rng.randint(1, 5), frames - sum(pushes)))
    return pushes


@pytest.mark.parametrize("schedule", [(4, 8), (2, 4, 8, 16)])
async def test_concurrent_streams_equal_decoding_each_alone(codec: NanoCodec, schedule) -> None:
    rng = random.Random(0)
    utterances = [random_codes(frames, seed=30 + i) for i, frames in enumerate([9, 40, 3, 27, 33, 1])]
    expected = [codec.decode_codes(codes.unsqueeze(0))[0].numpy() for codes in utterances]
    async with BatchingCodecDecoder(codec, max_batch=4, schedule=schedule) as decoder:
        results = await asyncio.gather(
            *(_run_stream(decoder, codes, _schedule(codes.shape[1], rng)) for codes in utterances)
        )
    for got, want in zip(results, expected):
        assert got.shape == want.shape
        assert float(np.abs(got - want).max()) <= TOLERANCE
    assert decoder.windows_decoded >= len(utterances)
    assert decoder.batches_decoded <= decoder.windows_decoded


async def test_windows_of_several_streams_share_one_decoder_call(codec: NanoCodec) -> None:
    utterances = [random_codes(frames, seed=50 + frames) for frames in (8, 6, 7, 8)]
    expected = [codec.decode_codes(codes.unsqueeze(0))[0].numpy() for codes in utterances]
    async with BatchingCodecDecoder(codec, max_batch=8, schedule=(6, 32)) as decoder:
        streams = [decoder.open_stream() for _ in utterances]
        with decoder._cond:  # hold the worker off until every stream has queued its window
            tasks = [asyncio.create_task(s.push(codes)) for s, codes in zip(streams, utterances)]
            await asyncio.sleep(0)
            assert len(decoder._queue) == len(utterances)
        firsts = await asyncio.gather(*tasks)
        assert decoder.batches_decoded == 1 and decoder.windows_decoded == 4
        rests = [await s.finish() for s in streams]
        for stream in streams:
            await stream.aclose()
    for first, rest, want in zip(firsts, rests, expected):
        assert float(np.abs(np.concatenate([first, rest]) - want).max()) <= TOLERANCE


async def test_event_loop_keeps_running_while_decoding(codec: NanoCodec) -> None:
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    async with BatchingCodecDecoder(codec, schedule=(30, 32)) as decoder:
        stream = decoder.open_stream()
        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        pcm = await stream.push(random_codes(30, seed=40))
        ticks_during = ticks - before
        done.set()
        await task
        await stream.aclose()
    assert pcm.shape == (30 * 1024,)
    assert ticks_during > 1  # the loop ran other tasks while the worker thread decoded


async def test_aclose_mid_stream_frees_it(codec: NanoCodec) -> None:
    async with BatchingCodecDecoder(codec, schedule=(4, 4)) as decoder:
        stream = decoder.open_stream()
        first = await stream.push(random_codes(6, seed=41))
        assert first.shape == (4 * 1024,)
        assert stream._state.pending_frames == 2
        await stream.aclose()
        assert stream.closed and stream._state.pending_frames == 0 and stream._state.history_frames == 0
        with pytest.raises(CodecClosedError, match="is closed"):
            await stream.push(random_codes(1))
        with pytest.raises(CodecClosedError, match="is closed"):
            await stream.finish()
        await stream.aclose()  # idempotent
        # the decoder still serves other streams
        other = decoder.open_stream()
        assert (await other.push(random_codes(4, seed=42))).shape == (4 * 1024,)
        await other.aclose()


async def test_aclose_drops_queued_windows(codec: NanoCodec) -> None:
    decoder = BatchingCodecDecoder(codec, schedule=(2, 2))
    stream = decoder.open_stream()
    loop = asyncio.get_running_loop()
    with decoder._cond:  # hold the worker off while windows are queued
        windows = stream._state.push(random_codes(6, seed=43))
        futures = decoder._submit(stream.stream_id, windows)
        assert len(decoder._queue) == 3
        await stream.aclose()
        assert len(decoder._queue) == 0
    assert all(future.cancelled() for future in futures)
    await decoder.aclose()
    assert loop.is_running()


async def test_cancelled_push_closes_the_stream(codec: NanoCodec) -> None:
    async with BatchingCodecDecoder(codec, schedule=(20, 32)) as decoder:
        stream = decoder.open_stream()
        task = asyncio.create_task(stream.push(random_codes(20, seed=44)))
        await asyncio.sleep(0)  # the push has queued its window and awaits it
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert stream.closed
        with pytest.raises(CodecClosedError):
            await stream.push(random_codes(1))


async def test_finish_then_push_is_an_error(codec: NanoCodec) -> None:
    async with BatchingCodecDecoder(codec, schedule=(8, 32)) as decoder:
        stream = decoder.open_stream()
        assert (await stream.push(random_codes(3, seed=45))).shape == (0,)  # below the first chunk
        assert (await stream.finish()).shape == (3 * 1024,)
        with pytest.raises(CodecClosedError, match="is finished"):
            await stream.push(random_codes(1))
        await stream.aclose()


async def test_bad_codes_fail_the_push_not_the_decoder(codec: NanoCodec) -> None:
    async with BatchingCodecDecoder(codec, schedule=(1, 32)) as decoder:
        stream = decoder.open_stream()
        with pytest.raises(InvalidCodesError, match=r"expected codes \[32, T\]"):
            await stream.push(torch.zeros(8, 3, dtype=torch.long))
        assert (await stream.push(random_codes(1, seed=46))).shape == (1024,)
        await stream.aclose()


async def test_closed_decoder_refuses_work(codec: NanoCodec) -> None:
    decoder = BatchingCodecDecoder(codec, schedule=(1, 32))
    stream = decoder.open_stream()
    assert (await stream.push(random_codes(1, seed=47))).shape == (1024,)
    await decoder.aclose()
    assert decoder._thread is None
    with pytest.raises(CodecClosedError, match="decoder is closed"):
        decoder.open_stream()
    with pytest.raises(CodecClosedError, match="decoder is closed"):
        await stream.push(random_codes(1))
    await decoder.aclose()  # idempotent


def test_bad_settings_are_rejected(codec: NanoCodec) -> None:
    with pytest.raises(ValueError, match="max_batch must be an int >= 1"):
        BatchingCodecDecoder(codec, max_batch=0)
    with pytest.raises(ValueError, match=r"chunk sizes must be ints in \[1, 2000\] frames; size 1 is 0"):
        BatchingCodecDecoder(codec, schedule=(8, 0))


async def test_windows_of_the_ramp_go_first_when_the_queue_is_longer_than_a_batch(codec: NanoCodec) -> None:
    def job(stream_id: int, start: int) -> _Job:
        window = DecodeWindow(codes=torch.zeros(32, 4, dtype=torch.long), skip_frames=0, start_frame=start)
        return _Job(stream_id, window, None, None)  # type: ignore[arg-type]

    decoder = BatchingCodecDecoder(codec, max_batch=2, schedule=(2, 4, 8, 32))  # ramp: frames [0, 14)
    # queued oldest first: a steady window, then ramp windows of three streams, then a steady one
    decoder._queue.extend([job(1, 46), job(2, 6), job(3, 0), job(4, 2), job(5, 78)])
    taken = [[(j.stream_id, j.window.start_frame) for j in decoder._take_batch()] for _ in range(3)]
    # least advanced ramp windows first (first audio, then the ones with the least audio ahead),
    # then the oldest
    assert taken == [[(3, 0), (4, 2)], [(2, 6), (1, 46)], [(5, 78)]]
    await decoder.aclose()


def test_group_by_width_keeps_padding_bounded() -> None:
    def job(width: int) -> _Job:
        window = DecodeWindow(codes=torch.zeros(32, width, dtype=torch.long), skip_frames=0, start_frame=0)
        return _Job(0, window, None, None)  # type: ignore[arg-type]

    groups = group_by_width([[job(w)] for w in (57, 8, 33, 57, 16, 200)])
    assert [[row[0].window.width for row in group] for group in groups] == [[8, 16], [33, 57, 57], [200]]


# ---- encoder -------------------------------------------------------------------------------------


async def test_async_encoder_matches_the_codec(codec: NanoCodec) -> None:
    encoder = NanoCodecEncoder(codec)
    assert isinstance(encoder, CodecEncoder) and encoder.sample_rate_hz == 22050
    audio = (np.random.default_rng(0).standard_normal(5000) * 0.1).astype(np.float32)
    codes = await encoder.encode(audio)
    assert codes.shape == (32, 5) and codes.dtype == torch.int64 and codes.device.type == "cpu"
    assert torch.equal(codes, codec.encode(torch.from_numpy(audio).unsqueeze(0))[0])


@pytest.mark.parametrize(
    ("audio", "message"),
    [
        (np.zeros((1, 100), dtype=np.float32), r"expected mono audio \[N>0\], got shape \(1, 100\)"),
        (np.zeros(0, dtype=np.float32), r"expected mono audio"),
        (np.zeros(100, dtype=np.int16), r"expected float audio"),
        (torch.zeros(100), r"expected a numpy array"),
        (np.full(100, np.inf, dtype=np.float32), r"NaN or infinite"),
    ],
)
async def test_async_encoder_rejects_bad_audio(codec: NanoCodec, audio, message: str) -> None:
    with pytest.raises(InvalidAudioError, match=message):
        await NanoCodecEncoder(codec).encode(audio)


async def test_first_windows_are_decoded_before_continuations_when_the_queue_is_long(codec: NanoCodec) -> None:
    """Time to first audio stays flat under load: with more windows queued than one batch holds,
    every stream's first window is taken before older continuation windows, and each stream's
    windows keep their order (a schedule whose ramp is the first window only)."""
    decoder = BatchingCodecDecoder(codec, max_batch=3, schedule=(8, 32))
    loop = asyncio.get_running_loop()

    def job(stream: int, start: int) -> _Job:
        window = DecodeWindow(torch.zeros(32, 4, dtype=torch.long), 0, start)
        return _Job(stream, window, loop, loop.create_future())

    queued = [job(1, 8), job(1, 24), job(2, 8), job(3, 0), job(2, 24), job(4, 0), job(3, 8)]
    decoder._queue.extend(queued)
    first = decoder._take_batch()
    assert [(j.stream_id, j.window.start_frame) for j in first] == [(3, 0), (4, 0), (1, 8)]
    second = decoder._take_batch()
    assert [(j.stream_id, j.window.start_frame) for j in second] == [(1, 24), (2, 8), (2, 24)]
    assert [(j.stream_id, j.window.start_frame) for j in decoder._take_batch()] == [(3, 8)]
    short = [job(5, 8), job(6, 0)]
    decoder._queue.extend(short)
    assert decoder._take_batch() == short  # a queue that fits in one batch is taken as it is
    await decoder.aclose()


def test_a_batch_settles_each_event_loops_windows_in_one_call() -> None:
    """Windows of streams on two event loops: each future gets its own audio (or the batch's
    error), and the worker wakes each loop once per batch, not once per window."""
    import threading

    from codec_worker import batching

    loops = [asyncio.new_event_loop() for _ in range(2)]
    wakeups = {id(loop): 0 for loop in loops}
    threads = []
    for loop in loops:
        real = loop.call_soon_threadsafe

        def counted(callback, *args, _loop=loop, _real=real, **kwargs):
            if callback is batching._settle_all:
                wakeups[id(_loop)] += 1
            return _real(callback, *args, **kwargs)

        loop.call_soon_threadsafe = counted
        threads.append(threading.Thread(target=loop.run_forever, daemon=True))
        threads[-1].start()

    async def new_future() -> asyncio.Future:
        return asyncio.get_running_loop().create_future()

    async def outcome(future: asyncio.Future):
        try:
            return await future
        except Exception as exc:  # noqa: BLE001 (the outcome under test)
            return exc

    def jobs(n: int) -> list[_Job]:
        return [_Job(i, None, loops[i % 2], asyncio.run_coroutine_threadsafe(new_future(), loops[i % 2]).result(5))
                for i in range(n)]

    def outcomes(batch: list[_Job]) -> list:
        return [asyncio.run_coroutine_threadsafe(outcome(job.future), job.loop).result(5) for job in batch]

    try:
        batch = jobs(6)
        batching._deliver(batch, results=[np.full(3, i, dtype=np.float32) for i in range(6)])
        assert [int(pcm[0]) for pcm in outcomes(batch)] == list(range(6))
        assert list(wakeups.values()) == [1, 1]
        failed = jobs(4)
        batching._deliver(failed, error=CodecClosedError("closed"))
        assert all(isinstance(o, CodecClosedError) for o in outcomes(failed))
        assert list(wakeups.values()) == [2, 2]
    finally:
        for loop, thread in zip(loops, threads):
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
            loop.close()


async def test_a_failed_batch_fails_only_the_stream_whose_window_fails_alone(codec: NanoCodec, monkeypatch, caplog) -> None:
    """One stream's window that breaks its batch (bad codes, a decoder fault on its input) fails that
    stream only: the group is retried window by window and the healthy streams get their audio."""
    from codec_worker.errors import DecodeError

    healthy = [random_codes(8, seed=61), random_codes(8, seed=62)]
    poison = random_codes(8, seed=99)
    expected = [codec.decode_codes(codes.unsqueeze(0))[0].numpy() for codes in healthy]
    real, calls = type(codec).decode_codes, []

    def flaky(self, codes, lengths=None):
        calls.append(codes.shape[0])
        if any(torch.equal(codes[row, :, :8], poison) for row in range(codes.shape[0])):
            raise RuntimeError("simulated fault on one stream's window")
        return real(self, codes, lengths)

    monkeypatch.setattr(type(codec), "decode_codes", flaky)
    async with BatchingCodecDecoder(codec, max_batch=8, schedule=(8,)) as decoder:
        streams = [decoder.open_stream() for _ in range(3)]
        with decoder._cond:  # hold the worker off until all three windows are queued: one batch
            tasks = [asyncio.create_task(s.push(c)) for s, c in zip(streams, [healthy[0], poison, healthy[1]])]
            await asyncio.sleep(0)
            assert len(decoder._queue) == 3
        with caplog.at_level("ERROR", logger="codec_worker.batching"):
            results = await asyncio.gather(*tasks, return_exceptions=True)
        for stream in streams:
            await stream.aclose()
    assert calls == [3, 1, 1, 1]  # the batch, then each window alone
    assert isinstance(results[1], DecodeError) and "simulated fault" in str(results[1])
    for got, want in zip((results[0], results[2]), expected):
        assert isinstance(got, np.ndarray) and float(np.abs(got - want).max()) <= TOLERANCE
    lines = [r for r in caplog.records if r.name == "codec_worker.batching" and r.levelname == "ERROR"]
    assert len(lines) == 1 and "3 windows" in lines[0].getMessage() and "simulated fault" in lines[0].getMessage()
    assert "retried 3 alone, 1 failed again" in lines[0].getMessage()
    assert streams[1].closed and decoder.windows_decoded == 2
