"""Stateful streaming decode (codec_worker.torchcodec.state): each stream's conv tails carried from
chunk to chunk give the one-shot audio, alone and batched across streams with ragged chunks, through
the batching decoder, with slots reused, exhausted and a failed batch decoded again."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from codec_worker.batching import BatchingCodecDecoder
from codec_worker.errors import InvalidCodesError
from codec_worker.nanocodec import (
    NanoCodec,
    carries_state_by_default,
    carry_decoder_state,
    decodes_better_with_torch,
    stream_decoding_codec,
)
from codec_worker.streaming import DecodeWindow, StreamingDecodeState, decode_carried
from codec_worker.torchcodec import ConvStateCache, TorchNanoCodec, load_torch_decoder
from codec_worker.torchcodec.decoder import CausalHiFiGANDecoder, DecoderConfig
from codec_worker.torchcodec.state import conv_tail
from tests.codec_worker.conftest import random_codes
from tests.codec_worker.test_torch_decoder import _stream as stream_audio

TOLERANCE = 1e-5  # float32 on CPU (in practice the chunked audio is bit-identical)


@pytest.fixture
def stateful(codec_path) -> TorchNanoCodec:
    codec = load_torch_decoder(codec_path)
    codec.carry_state(4)
    return codec


def _whole(codec: TorchNanoCodec | NanoCodec, codes: torch.Tensor) -> np.ndarray:
    return codec.decode_codes(codes.unsqueeze(0))[0].numpy()


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max())


# ---- the cache ------------------------------------------------------------------------------------


def test_every_causal_conv_gets_a_tail_of_its_input() -> None:
    config = DecoderConfig(input_dim=32, up_sample_rates=(4, 2), base_channels=16, in_kernel_size=7,
                           out_kernel_size=3, resblock_kernel_sizes=(3, 5), resblock_dilation_sizes=(1, 2))
    decoder = CausalHiFiGANDecoder(config)
    cache = ConvStateCache(decoder, slots=3, device=torch.device("cpu"), dtype=torch.float32)
    convs = [m for m in decoder.modules() if conv_tail(m)]
    # pre + post conv, per stage an upsample and kernels x dilations x 2 convs
    assert len(cache.buffers) == len(convs) == 2 + 2 * (1 + 2 * 2 * 2)
    shapes = {tuple(b.shape) for b in cache.buffers}
    assert (5, 32, 6) in shapes  # pre_conv: 32 latent channels, kernel 7 -> 6 samples, slots + scratch + zeros rows
    assert (5, 16, 1) in shapes  # first upsample: its input frame
    assert (5, 8, 2 * 2) in shapes  # a stage-1 residual conv: kernel 3, dilation 2
    assert (5, 4, 2) in shapes  # post_conv: 4 channels, kernel 3
    assert (cache.scratch, cache.zeros) == (3, 4)
    assert cache.bytes_per_slot == sum(b[0].numel() * 4 for b in cache.buffers)


def test_a_decoder_with_kernel_1_convs_streams_exactly_too() -> None:
    """A kernel-1 conv has nothing to remember: it gets no buffer, and its chunks still join."""
    torch.manual_seed(3)
    config = DecoderConfig(input_dim=32, up_sample_rates=(4, 2), base_channels=16, in_kernel_size=1,
                           out_kernel_size=1, resblock_kernel_sizes=(1, 3), resblock_dilation_sizes=(1, 2))
    decoder = CausalHiFiGANDecoder(config).eval()
    for p in decoder.parameters():
        torch.nn.init.normal_(p, std=0.2)
    cache = ConvStateCache(decoder, slots=1, device=torch.device("cpu"), dtype=torch.float32)
    assert len(cache.buffers) == 2 + 2 * (2 * 2)  # two upsamples; per stage the kernel-3 chain's 2 x 2 convs
    latents = torch.randn(1, 32, 9)
    with torch.no_grad():
        whole = decoder(latents)
        pieces, at = [], 0
        for size in (2, 3, 4):
            step = cache.step(torch.tensor([0]), torch.tensor([size]), torch.tensor([at == 0]), size)
            pieces.append(decoder(latents[:, :, at : at + size], None, step))
            step.commit()
            at += size
    assert float((torch.cat(pieces, dim=-1) - whole).abs().max()) <= TOLERANCE


def test_slots_are_handed_out_once_and_reused_last() -> None:
    decoder = CausalHiFiGANDecoder(DecoderConfig(input_dim=32, up_sample_rates=(2,), base_channels=4))
    cache = ConvStateCache(decoder, slots=2, device=torch.device("cpu"), dtype=torch.float32)
    first, second = cache.acquire(), cache.acquire()
    assert {first, second} == {0, 1} and cache.acquire() is None and cache.free_slots == 0
    cache.release(first)
    assert cache.acquire() == first
    with pytest.raises(ValueError, match="not held"):
        cache.release(5)
    cache.release(second)
    with pytest.raises(ValueError, match="not held"):
        cache.release(second)
    with pytest.raises(ValueError, match="slots must be"):
        ConvStateCache(decoder, slots=0, device=torch.device("cpu"), dtype=torch.float32)


# ---- decode_stateful ------------------------------------------------------------------------------


@pytest.mark.parametrize("cuts", [[2, 4, 8, 32], [1] * 12, [40], [4, 16, 16, 3]])
def test_chunks_with_carried_state_equal_the_one_shot_decode(stateful: TorchNanoCodec, cuts: list[int]) -> None:
    codes = random_codes(sum(cuts), seed=5)
    pieces, at = [], 0
    for size in cuts:
        audio = stateful.decode_stateful(codes[:, at : at + size].unsqueeze(0), [size], [1], [at == 0])
        assert audio.shape == (1, size * stateful.samples_per_frame)
        pieces.append(audio[0].numpy())
        at += size
    assert _max_diff(np.concatenate(pieces), _whole(stateful, codes)) <= TOLERANCE


def test_ragged_rows_of_several_streams_each_equal_their_one_shot_decode(stateful: TorchNanoCodec) -> None:
    utterances = [random_codes(n, seed=20 + i) for i, n in enumerate([30, 7, 19])]
    chunks = [[3, 10, 1, 16], [7, 0, 0, 0], [2, 2, 15, 0]]  # 0: the stream sits this call out
    at, pieces = [0, 0, 0], [[], [], []]
    for call in range(4):
        rows = [r for r in range(3) if chunks[r][call]]
        lengths = [chunks[r][call] for r in rows]
        codes = torch.zeros(len(rows), 32, max(lengths), dtype=torch.long)
        for i, r in enumerate(rows):
            codes[i, :, : lengths[i]] = utterances[r][:, at[r] : at[r] + lengths[i]]
        audio = stateful.decode_stateful(codes, lengths, [r + 1 for r in rows], [at[r] == 0 for r in rows])
        for i, r in enumerate(rows):
            spf = stateful.samples_per_frame
            assert not audio[i, lengths[i] * spf :].any()  # past its length a row is silent
            pieces[r].append(audio[i, : lengths[i] * spf].numpy())
            at[r] += lengths[i]
    for r, codes in enumerate(utterances):
        assert _max_diff(np.concatenate(pieces[r]), _whole(stateful, codes)) <= TOLERANCE


def test_a_fresh_stream_ignores_what_its_slot_held(stateful: TorchNanoCodec) -> None:
    old, new = random_codes(12, seed=1), random_codes(10, seed=2)
    stateful.decode_stateful(old.unsqueeze(0), [12], [0], [True])  # slot 0 now holds old's tails
    first = stateful.decode_stateful(new[:, :4].unsqueeze(0), [4], [0], [True])[0]
    rest = stateful.decode_stateful(new[:, 4:].unsqueeze(0), [6], [0], [False])[0]
    assert _max_diff(torch.cat([first, rest]).numpy(), _whole(stateful, new)) <= TOLERANCE


def test_a_fresh_stream_starts_from_zeros_even_where_its_slot_holds_nan(stateful: TorchNanoCodec) -> None:
    """A first chunk reads the zeros row, not its slot times 0: 0 * NaN (or inf) would be NaN."""
    cache = stateful.state_cache
    for buffer in cache.buffers:
        buffer[1].fill_(float("nan"))
    new = random_codes(7, seed=4)
    first = stateful.decode_stateful(new[:, :3].unsqueeze(0), [3], [1], [True])[0]
    rest = stateful.decode_stateful(new[:, 3:].unsqueeze(0), [4], [1], [False])[0]
    assert _max_diff(torch.cat([first, rest]).numpy(), _whole(stateful, new)) <= TOLERANCE
    assert all(float(buffer[cache.zeros].abs().max()) == 0 for buffer in cache.buffers)  # still zeros


def test_a_decode_that_fails_midway_leaves_the_state_as_it_was(stateful: TorchNanoCodec, monkeypatch) -> None:
    codes = random_codes(9, seed=3)
    head = stateful.decode_stateful(codes[:, :3].unsqueeze(0), [3], [2], [True])[0]
    before = [b[2].clone() for b in stateful.state_cache.buffers]
    decoder = stateful._decoder
    real = decoder.stages[-1].forward

    def broken(*args, **kwargs):  # the last stage fails: every earlier conv has recorded its tail
        raise RuntimeError("out of memory (simulated)")

    monkeypatch.setattr(decoder.stages[-1], "forward", broken)
    with pytest.raises(RuntimeError, match="simulated"):
        stateful.decode_stateful(codes[:, 3:].unsqueeze(0), [6], [2], [False])
    assert all(torch.equal(b[2], old) for b, old in zip(stateful.state_cache.buffers, before))
    monkeypatch.setattr(decoder.stages[-1], "forward", real)
    tail = stateful.decode_stateful(codes[:, 3:].unsqueeze(0), [6], [2], [False])[0]  # decoded again
    assert _max_diff(torch.cat([head, tail]).numpy(), _whole(stateful, codes)) <= TOLERANCE


def test_bad_stateful_calls_are_refused(codec_path, stateful: TorchNanoCodec) -> None:
    codes = random_codes(4, batch=2, seed=4)
    with pytest.raises(ValueError, match="same slot twice"):
        stateful.decode_stateful(codes, [4, 4], [1, 1], [True, True])
    with pytest.raises(ValueError, match="outside 0..3"):
        stateful.decode_stateful(codes, [4, 4], [0, 4], [True, True])
    with pytest.raises(InvalidCodesError, match="expected lengths as 2 ints"):
        stateful.decode_stateful(codes, [4], [0, 1], [True, True])
    with pytest.raises(InvalidCodesError, match=r"length 5 of item 1 is outside \[0, 4\] frames"):
        stateful.decode_stateful(codes, [4, 5], [0, 1], [True, True])
    with pytest.raises(ValueError, match="expected 2 slots and fresh flags, got 2 and 1"):
        stateful.decode_stateful(codes, [4, 4], [0, 1], [True])
    with pytest.raises(RuntimeError, match="carry_state"):
        load_torch_decoder(codec_path).decode_stateful(codes, [4, 4], [0, 1], [True, True])


def test_decode_carried_cuts_windows_without_context_and_splits_the_audio(stateful: TorchNanoCodec) -> None:
    codes = random_codes(20, seed=6)
    state = StreamingDecodeState(0, "2,4,8")
    windows = state.push(codes[:, :15]) + state.finish()  # 2, 4, 8, then the 1 left
    assert [w.skip_frames for w in windows] == [0, 0, 0, 0] and [w.num_frames for w in windows] == [2, 4, 8, 1]
    pieces = decode_carried(stateful, [3], [windows])[0]
    spf = stateful.samples_per_frame
    assert [p.size for p in pieces] == [2 * spf, 4 * spf, 8 * spf, spf]
    assert _max_diff(np.concatenate(pieces), _whole(stateful, codes[:, :15])) <= TOLERANCE
    with pytest.raises(ValueError, match="no context"):
        decode_carried(stateful, [0], [[DecodeWindow(codes[:, :5], skip_frames=2, start_frame=3)]])


# ---- through the batching decoder -----------------------------------------------------------------


async def _stream(decoder: BatchingCodecDecoder, codes: torch.Tensor, pushes: list[int]) -> tuple[np.ndarray, bool]:
    """A stream's audio, and whether it carried state."""
    stream = decoder.open_stream()
    return await stream_audio(decoder, codes, pushes, stream), stream.carries_state


async def test_batched_streams_carry_state_and_equal_the_one_shot_decode(codec: NanoCodec, stateful: TorchNanoCodec) -> None:
    lengths = [50, 17, 3, 33, 40, 9]  # six streams on four slots: two decode windowed
    utterances = [random_codes(n, seed=70 + i) for i, n in enumerate(lengths)]
    pushes = [[1] * 50, [5, 5, 7], [3], [2, 30, 1], [4, 6, 1, 5, 3, 6, 2, 6, 7], [9]]
    async with BatchingCodecDecoder(stateful, max_batch=3, schedule="2,4,8,32") as decoder:
        assert decoder.carries_state
        results = await asyncio.gather(*(_stream(decoder, c, p) for c, p in zip(utterances, pushes)))
    assert [carried for _, carried in results].count(True) == 4 and decoder.windowed_streams == 2
    for codes, (got, _) in zip(utterances, results):
        assert _max_diff(got, _whole(codec, codes)) <= TOLERANCE  # NeMo's one-shot decode
    assert stateful.state_cache.free_slots == 4  # finished streams gave their slots back


async def test_a_push_crossing_boundaries_decodes_as_one_row(stateful: TorchNanoCodec) -> None:
    codes = random_codes(30, seed=8)
    async with BatchingCodecDecoder(stateful, max_batch=8, schedule="2,4,8") as decoder:
        stream = decoder.open_stream()
        audio = await stream.push(codes)  # windows of 2, 4, 8, 8, 8 frames
        audio = np.concatenate([audio, await stream.finish()])
        await stream.aclose()
    assert decoder.windows_decoded == 5 and decoder.batches_decoded == 1
    assert _max_diff(audio, _whole(stateful, codes)) <= TOLERANCE


async def test_a_closed_stream_frees_its_slot_for_the_next(stateful: TorchNanoCodec) -> None:
    async with BatchingCodecDecoder(stateful, max_batch=4, schedule="2,4") as decoder:
        streams = [decoder.open_stream() for _ in range(4)]
        assert all(s.carries_state for s in streams) and stateful.state_cache.free_slots == 0
        await streams[0].push(random_codes(5, seed=9))  # its slot now holds tails
        await streams[0].aclose()
        codes = random_codes(11, seed=10)
        got, carried = await _stream(decoder, codes, [3, 8])
        assert carried
        for stream in streams[1:]:
            await stream.aclose()
    assert _max_diff(got, _whole(stateful, codes)) <= TOLERANCE
    assert stateful.state_cache.free_slots == 4


async def test_a_failed_batch_decodes_each_stream_again_from_its_state(stateful: TorchNanoCodec, monkeypatch) -> None:
    real = stateful.decode_stateful
    calls = []

    def flaky(codes, lengths, slots, fresh):  # the first call of two rows fails; alone they decode
        calls.append(len(slots))
        if calls.count(2) == 1 and len(slots) == 2:
            raise RuntimeError("CUDA error (simulated)")
        return real(codes, lengths, slots, fresh)

    monkeypatch.setattr(stateful, "decode_stateful", flaky)
    utterances = [random_codes(12, seed=11), random_codes(12, seed=12)]
    async with BatchingCodecDecoder(stateful, max_batch=4, schedule="4") as decoder:
        streams = [decoder.open_stream() for _ in utterances]
        first = [await s.push(c[:, :4]) for s, c in zip(streams, utterances)]
        with decoder._cond:  # hold the worker off until both streams have queued a window: one batch
            tasks = [asyncio.create_task(s.push(c[:, 4:8])) for s, c in zip(streams, utterances)]
            await asyncio.sleep(0)
            assert len(decoder._queue) == 2
        second = await asyncio.gather(*tasks)
        last = [await s.push(c[:, 8:]) + 0 for s, c in zip(streams, utterances)]
        for stream in streams:
            assert (await stream.finish()).size == 0
    assert calls == [1, 1, 2, 1, 1, 1, 1]  # the batch of two failed and was decoded row by row
    for i, codes in enumerate(utterances):
        assert _max_diff(np.concatenate([first[i], second[i], last[i]]), _whole(stateful, codes)) <= TOLERANCE


# ---- the gateway's choice (GEPARD_CODEC_CARRY_STATE) ----------------------------------------------


@pytest.mark.parametrize("impl, loaded, device, graphs, carry, expected", [
    ("auto", "nemo", "cpu", True, True, True),  # the CPU default: NeMo encodes, the torch decoder carries state
    ("auto", "nemo", "cpu", True, False, False),  # carrying off: NeMo decodes windowed
    ("nemo", "nemo", "cpu", True, True, False),  # NeMo by name: NeMo decodes (windowed: it cannot carry state)
    ("auto", "torch", "cpu", True, True, False),  # the torch decoder already decodes
    ("auto", "nemo", "cuda", False, True, True),
])
def test_nemo_decodes_through_the_torch_decoder_where_it_carries_state(impl, loaded, device, graphs, carry, expected) -> None:
    codec = SimpleNamespace(impl=loaded, device=torch.device(device))
    assert decodes_better_with_torch(impl, codec, graphs, carry) is expected


def test_state_is_carried_by_default_on_cpu_only_and_not_beside_a_compiled_decoder() -> None:
    assert carries_state_by_default(torch.device("cpu"), compiled=False)
    assert not carries_state_by_default(torch.device("cpu"), compiled=True)
    assert not carries_state_by_default(torch.device("cuda"), compiled=False)  # until measured on a GPU


def test_carrying_state_is_the_torch_decoders_alone(codec: NanoCodec, codec_path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="codec_worker.nanocodec")
    assert not carry_decoder_state(codec, 8)
    assert "carrying conv state applies to the torch decoder only" in caplog.text
    torch_codec = load_torch_decoder(codec_path)
    assert carry_decoder_state(torch_codec, 8) and torch_codec.state_cache.slots == 8
    assert "streams carry the decoder's conv state: 8 slots of" in caplog.text


def test_the_metrics_read_free_slots_and_windowed_streams_from_the_decoder(codec_path) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from api.metrics import _CodecStateSlots

    codec = load_torch_decoder(codec_path)
    codec.carry_state(1)
    decoder = BatchingCodecDecoder(codec, schedule="4")
    registry = CollectorRegistry()
    registry.register(_CodecStateSlots(decoder))

    def scraped() -> str:
        return generate_latest(registry).decode()

    assert "gepard_codec_state_slots_free 1.0" in scraped() and "gepard_codec_windowed_streams_total 0.0" in scraped()
    first, second = decoder.open_stream(), decoder.open_stream()
    assert first.carries_state and not second.carries_state
    assert "gepard_codec_state_slots_free 0.0" in scraped() and "gepard_codec_windowed_streams_total 1.0" in scraped()
    asyncio.run(first.aclose())
    assert "gepard_codec_state_slots_free 1.0" in scraped()
    assert BatchingCodecDecoder(codec, carry_state=False).state_slots_free == 0


def test_the_stream_decoding_codec_beside_nemo_carries_state_as_set(codec: NanoCodec, codec_path) -> None:
    """What the gateway and bench/pipeline.py call: unset, on CPU the torch decoder decodes beside
    NeMo's codec, carrying state in the slots asked for; off, NeMo decodes windowed."""
    decoding, carried = stream_decoding_codec(codec, codec_path, "auto", graphs=True, carry_state=None, compiled=False,
                                              slots=5)
    assert carried and decoding.impl == "torch" and decoding.state_cache.slots == 5
    assert stream_decoding_codec(codec, codec_path, "auto", graphs=True, carry_state=None, compiled=True,
                                 slots=5) == (codec, False)  # compiling: windowed, by NeMo on CPU
    assert stream_decoding_codec(codec, codec_path, "auto", graphs=True, carry_state=False, compiled=False,
                                 slots=5) == (codec, False)
