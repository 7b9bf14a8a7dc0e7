"""Streaming decode: any chunk schedule concatenates to the one-shot decode; the receptive field is right."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from codec_worker.errors import CodecClosedError, InvalidCodesError
from codec_worker.nanocodec import NanoCodec
from codec_worker.schedule import ChunkSchedule
from codec_worker.streaming import DecodeWindow, StreamingDecoder, StreamingDecodeState, decode_windows
from tests.codec_worker.conftest import random_codes

TOLERANCE = 1e-5
FRAMES = 44  # > first chunk + receptive field + a chunk, so history trimming is exercised


@pytest.fixture(scope="module")
def utterance(codec: NanoCodec) -> tuple[torch.Tensor, np.ndarray]:
    """codes [32, FRAMES] and their one-shot decode [FRAMES * 1024]."""
    codes = random_codes(FRAMES, seed=11)
    return codes, codec.decode_codes(codes.unsqueeze(0))[0].numpy()


def _stream(codec: NanoCodec, codes: torch.Tensor, first: int, chunk: int, pushes: list[int],
            schedule: tuple[int, ...] | None = None) -> np.ndarray:
    schedule = schedule or (first, chunk)
    decoder = StreamingDecoder(codec, schedule=schedule)
    pieces, at = [], 0
    for size in pushes:
        pieces.append(decoder.push(codes[:, at : at + size]))
        at += size
        assert decoder.state.history_frames <= codec.receptive_field_frames
        assert decoder.state.pending_frames < max(schedule)
    assert at == codes.shape[1]
    pieces.append(decoder.finish())
    assert all(piece.dtype == np.float32 and piece.ndim == 1 for piece in pieces)
    return np.concatenate(pieces)


@pytest.mark.parametrize("first", range(1, 11))
def test_streaming_equals_one_shot_for_every_first_chunk(codec: NanoCodec, utterance, first: int) -> None:
    codes, expected = utterance
    rng = random.Random(first)
    pushes = []
    while sum(pushes) < FRAMES:
        pushes.append(min(rng.randint(1, 6), FRAMES - sum(pushes)))
    audio = _stream(codec, codes, first=first, chunk=rng.randint(6, 16), pushes=pushes)
    assert audio.shape == expected.shape
    assert float(np.abs(audio - expected).max()) <= TOLERANCE


@pytest.mark.parametrize("seed", range(4))
def test_streaming_equals_one_shot_for_random_schedules(codec: NanoCodec, utterance, seed: int) -> None:
    codes, expected = utterance
    rng = random.Random(100 + seed)
    pushes = []
    while sum(pushes) < FRAMES:  # empty pushes, single frames and big bursts
        pushes.append(min(rng.choice([0, 1, 1, 2, 3, 9, 17, 30]), FRAMES - sum(pushes)))
    audio = _stream(codec, codes, first=rng.randint(1, 10), chunk=rng.randint(1, 20), pushes=pushes)
    assert float(np.abs(audio - expected).max()) <= TOLERANCE


@pytest.mark.parametrize("schedule", [(2, 4, 8, 32), (2, 4, 8, 16), (1, 2, 4, 8, 16), (1, 1, 2, 3, 5, 8), (3, 1, 5)])
def test_streaming_equals_one_shot_for_growing_schedules(codec: NanoCodec, utterance, schedule) -> None:
    codes, expected = utterance
    rng = random.Random(sum(schedule))
    patterns = [[FRAMES], _random_pushes(rng)] + ([[1] * FRAMES] if schedule == (2, 4, 8, 32) else [])
    for pushes in patterns:  # one burst, random pushes (empty ones too), one frame at a time
        audio = _stream(codec, codes, 0, 0, pushes, schedule=schedule)
        assert audio.shape == expected.shape
        assert float(np.abs(audio - expected).max()) <= TOLERANCE, (schedule, pushes)


def _random_pushes(rng: random.Random) -> list[int]:
    pushes: list[int] = []
    while sum(pushes) < FRAMES:
        pushes.append(min(rng.choice([0, 1, 2, 3, 7, 15]), FRAMES - sum(pushes)))
    return pushes


def test_growing_cadence_and_window_layout() -> None:
    state = StreamingDecodeState(receptive_field_frames=25, schedule="2,4,8,32")
    cut: list[tuple[int, DecodeWindow]] = []
    for frame in range(100):
        for window in state.push(random_codes(1, seed=frame)):
            cut.append((frame + 1, window))
    assert [(at, w.start_frame, w.skip_frames, w.num_frames) for at, w in cut] == [
        (2, 0, 0, 2),  # the first audio needs only 2 frames
        (6, 2, 2, 4),
        (14, 6, 6, 8),
        (46, 14, 14, 32),  # steady size from here on
        (78, 46, 25, 32),  # context capped at the receptive field
    ]
    assert [state.schedule.end_of(i) for i in range(5)] == [at for at, _ in cut]
    # a burst crossing several boundaries is cut the same way
    burst = StreamingDecodeState(receptive_field_frames=25, schedule=(2, 4, 8, 32)).push(random_codes(100))
    assert [(w.start_frame, w.num_frames) for w in burst] == [(w.start_frame, w.num_frames) for _, w in cut]


def test_chunk_schedule_parsing_and_arithmetic() -> None:
    s = ChunkSchedule.parse(" 2, 4,8 ,32")
    assert s == ChunkSchedule.of((2, 4, 8, 32)) == ChunkSchedule.of(s) and str(s) == "2,4,8,32"
    assert (s.first, s.steady, s.ramp_frames) == (2, 32, 14)
    assert [s.size(i) for i in range(6)] == [2, 4, 8, 32, 32, 32]
    assert [s.end_of(i) for i in range(6)] == [2, 6, 14, 46, 78, 110]
    one = ChunkSchedule.of([16])
    assert ([one.end_of(i) for i in range(3)], one.ramp_frames) == ([16, 32, 48], 16)
    assert ChunkSchedule.of((4, 16)).ramp_frames == 4  # the old (first, chunk) pair: only first windows are urgent
    with pytest.raises(ValueError, match=r"size 0 is True"):
        ChunkSchedule((True, 4))
    with pytest.raises(ValueError, match=r"size 1 is 2001"):
        ChunkSchedule.parse("2,2001")
    with pytest.raises(ValueError, match="needs 1 to 16 sizes, got 17"):
        ChunkSchedule.of([1] * 17)


def test_one_push_of_everything_then_finish(codec: NanoCodec, utterance) -> None:
    codes, expected = utterance
    audio = _stream(codec, codes, first=8, chunk=32, pushes=[FRAMES])
    assert float(np.abs(audio - expected).max()) <= TOLERANCE


def test_cadence_and_window_layout() -> None:
    state = StreamingDecodeState(receptive_field_frames=25, schedule=(8, 32))
    cut: list[tuple[int, DecodeWindow]] = []
    for frame in range(100):
        for window in state.push(random_codes(1, seed=frame)):
            cut.append((frame + 1, window))
    assert [(at, w.start_frame, w.skip_frames, w.num_frames) for at, w in cut] == [
        (8, 0, 0, 8),  # first chunk: no context yet
        (40, 8, 8, 32),  # context is all 8 frames before
        (72, 40, 25, 32),  # context capped at the receptive field
    ]
    assert state.history_frames == 25 and state.pending_frames == 100 - 72
    (last,) = state.finish()
    assert (last.start_frame, last.skip_frames, last.num_frames) == (72, 25, 28)
    assert state.finished and state.history_frames == 0


def test_a_burst_is_cut_into_chunk_sized_windows() -> None:
    state = StreamingDecodeState(receptive_field_frames=25, schedule=(8, 32))
    windows = state.push(random_codes(80))
    assert [(w.start_frame, w.num_frames) for w in windows] == [(0, 8), (8, 32), (40, 32)]
    assert state.pending_frames == 8
    assert [w.width for w in windows] == [8, 40, 57]


def test_window_context_holds_the_right_frames() -> None:
    codes = random_codes(60, seed=1)
    state = StreamingDecodeState(receptive_field_frames=25, schedule=(8, 32))
    windows = state.push(codes) + state.finish()
    for window in windows:
        start = window.start_frame - window.skip_frames
        assert torch.equal(window.codes, codes[:, start : window.start_frame + window.num_frames])


def test_empty_stream_finishes_with_nothing(codec: NanoCodec) -> None:
    decoder = StreamingDecoder(codec)
    assert decoder.push(torch.zeros(32, 0, dtype=torch.long)).shape == (0,)
    assert decoder.finish().shape == (0,)


def test_push_after_finish_and_double_finish_fail() -> None:
    state = StreamingDecodeState(25)
    state.finish()
    with pytest.raises(CodecClosedError, match="finished"):
        state.push(random_codes(1))
    with pytest.raises(CodecClosedError, match="already finished"):
        state.finish()


@pytest.mark.parametrize(
    ("codes", "message"),
    [
        (torch.zeros(1, 32, 2, dtype=torch.long), r"expected codes \[32, T\], got shape \(1, 32, 2\)"),
        (torch.zeros(32, 2), r"expected integer codes"),
        (np.zeros((32, 2), dtype=np.int64), r"expected codes as a torch\.Tensor"),
    ],
)
def test_bad_pushes_are_rejected(codes, message: str) -> None:
    with pytest.raises(InvalidCodesError, match=message):
        StreamingDecodeState(25).push(codes)


@pytest.mark.parametrize(
    ("channel", "frame", "code", "levels"),
    [(0, 2, 8, 8), (1, 0, 7, 7), (31, 3, 6, 6), (5, 1, -1, 7), (30, 3, -7, 6)],  # levels per channel: [8, 7, 6, 6] * 8
)
def test_out_of_range_push_names_channel_and_frame(channel: int, frame: int, code: int, levels: int) -> None:
    codes = random_codes(4)
    codes[channel, frame] = code
    state = StreamingDecodeState(25)
    with pytest.raises(InvalidCodesError, match=rf"code {code} out of range \[0, {levels}\) at channel {channel}, frame {frame}"):
        state.push(codes)
    assert state.pending_frames == 0  # nothing was buffered


def test_every_channels_extreme_codes_are_accepted() -> None:
    highest = torch.tensor([8, 7, 6, 6] * 8).unsqueeze(-1) - 1
    state = StreamingDecodeState(25)
    state.push(torch.cat([highest, torch.zeros_like(highest)], dim=1))
    assert state.emitted_frames + state.pending_frames == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"receptive_field_frames": -1}, "receptive_field_frames must be an int >= 0"),
        ({"receptive_field_frames": 25, "schedule": (0, 4)}, r"chunk sizes must be ints in \[1, 2000\] frames; size 0 is 0"),
        ({"receptive_field_frames": 25, "schedule": (2, 2.5)}, r"size 1 is 2.5"),
        ({"receptive_field_frames": 25, "schedule": ()}, "a chunk schedule needs 1 to 16 sizes, got 0"),
        ({"receptive_field_frames": 25, "schedule": "2,x"}, r"'2,x' is not a comma-separated list of frame counts \(bad item 'x'\)"),
    ],
)
def test_bad_cadence_is_rejected(kwargs, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StreamingDecodeState(**kwargs)


def test_decode_windows_batches_windows_of_different_widths(codec: NanoCodec, utterance) -> None:
    codes, expected = utterance
    state = StreamingDecodeState(codec.receptive_field_frames, schedule=(3, 7))
    windows = state.push(codes) + state.finish()
    assert len({w.width for w in windows}) > 2  # right padding really happens
    pieces = decode_windows(codec, windows)  # one decoder call
    assert [len(p) for p in pieces] == [w.num_frames * 1024 for w in windows]
    assert float(np.abs(np.concatenate(pieces) - expected).max()) <= TOLERANCE


# ---- receptive field ---------------------------------------------------------------------------


def _flip(codes: torch.Tensor, frame: int) -> torch.Tensor:
    """Move every code of one frame to the opposite end of its range."""
    from codec_worker.fsq import channel_levels

    changed = codes.clone()
    changed[:, frame] = torch.tensor(channel_levels()) - 1 - changed[:, frame]
    return changed


def test_frames_beyond_the_receptive_field_do_not_matter(codec: NanoCodec) -> None:
    L = codec.receptive_field_frames
    start, frames = L + 5, L + 9
    codes = random_codes(frames, seed=21)
    base = codec.decode_codes(codes.unsqueeze(0))[0, start * 1024 :]
    for far in range(0, start - L):  # every frame more than L before the window's first new frame
        out = codec.decode_codes(_flip(codes, far).unsqueeze(0))[0, start * 1024 :]
        assert float((out - base).abs().max()) <= 1e-6, f"frame {far} ({start - far} before) changed the output"


def test_receptive_field_is_not_larger_than_needed(codec: NanoCodec) -> None:
    L = codec.receptive_field_frames
    start, frames = L + 5, L + 9
    codes = random_codes(frames, seed=21)
    base = codec.decode_codes(codes.unsqueeze(0))[0, start * 1024 :]
    # a frame L-2 before the first new frame still reaches it: L overshoots by at most a couple
    near = codec.decode_codes(_flip(codes, start - (L - 2)).unsqueeze(0))[0, start * 1024 :]
    assert float((near - base).abs().max()) > 0
    # and context matters: with 8 frames less of it the window is wrong well above float noise
    # (the random tiny codec's far taps are weak, so a few frames less only shift ~1e-7)
    short = codec.decode_codes(codes[:, start - (L - 8) :].unsqueeze(0))[0, (L - 8) * 1024 :]
    assert float((short - base).abs().max()) > 1e-6


def test_the_default_cadence_follows_the_device():
    """Unset, CPU servers get 4,16 (the codec bounds their capacity) and GPU servers 2,4,8,32."""
    from codec_worker.schedule import CPU_SCHEDULE, DEFAULT_SCHEDULE, default_schedule

    assert default_schedule(torch.device("cpu")) == CPU_SCHEDULE == ChunkSchedule.parse("4,16")
    assert default_schedule("cpu") == CPU_SCHEDULE
    for device in (torch.device("cuda", 0), "cuda:1", "cuda"):
        assert default_schedule(device) == DEFAULT_SCHEDULE == ChunkSchedule.parse("2,4,8,32")


def test_the_gateway_decoder_takes_the_device_default_unless_set(gateway, tiny_ckpt_dir, tmp_path):
    import asyncio

    from api.app import open_runtime
    from tests.api.conftest import gateway_settings

    assert gateway.runtime.decoder.schedule == ChunkSchedule.parse("4,16")  # unset, on CPU

    async def configured() -> ChunkSchedule:
        rt = await open_runtime(gateway_settings(tiny_ckpt_dir, tmp_path, chunk_schedule=(3, 9)))
        try:
            return rt.decoder.schedule
        finally:
            await rt.aclose()

    assert asyncio.run(configured()) == ChunkSchedule.parse("3,9")
