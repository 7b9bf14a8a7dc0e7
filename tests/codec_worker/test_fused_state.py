"""The carried conv state read and recorded by one Triton kernel per conv (codec_worker.torchcodec.fused
extend_with_tail, TorchNanoCodec.fuse_state): run on CPU tensors by Triton's interpreter, it gives
the eager state's inputs, records and audio bit for bit (every value is a copy), through chunked
decodes, ragged and fresh rows and the batching decoder, and a stateful decode then launches about
as many kernels as a windowed one instead of twice as many. A kernel that computes something else,
or no Triton, leaves the state eager, with a log line where the gateway fuses."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest
import torch

from codec_worker.batching import BatchingCodecDecoder
from codec_worker.nanocodec import fuse_decoder_activations
from codec_worker.torchcodec import ConvStateCache, TorchNanoCodec, fused, load_torch_decoder
from codec_worker.torchcodec.state import check_extend_kernel
from tests.codec_worker.conftest import random_codes
from tests.codec_worker.test_torch_decoder import _stream as stream_audio
from tests.triton_aot import assert_compiles_for_h200


def _pair(codec_path, slots: int = 3, fuse: bool = True) -> tuple[TorchNanoCodec, TorchNanoCodec]:
    """The same decoder twice, both carrying state; the second with the fused state."""
    eager, fast = load_torch_decoder(codec_path), load_torch_decoder(codec_path)
    if fuse:
        assert not fast.fused_state
        assert fast.fuse_state() == fast.carry_state(slots).convs > 0
    for codec in (eager, fast):
        codec.carry_state(slots)
    return eager, fast


# ---- the kernel against the eager ops ---------------------------------------------------------------


def test_every_conv_reads_and_records_as_the_eager_state(triton_interpreter, codec_path) -> None:
    """check_extend_kernel itself, then by hand on one conv: rows that continue their stream from a random
    tail and rows that start theirs (the zeros row), ending at their last frame and before it."""
    codec = load_torch_decoder(codec_path)
    cache = ConvStateCache(codec._decoder, 3, codec.device, codec.dtype)
    # raises on any difference
    assert check_extend_kernel(fused.extend_with_tail, codec._decoder, codec.device, codec.dtype) == cache.convs
    decoder_convs = [m for m in codec._decoder.modules() if id(m) in cache._index]
    widest = max(decoder_convs, key=lambda m: cache.tails[cache._index[id(m)]])
    index = cache._index[id(widest)]
    tail, channels = cache.tails[index], cache.buffers[index].shape[1]
    assert tail > 1
    generator = torch.Generator().manual_seed(3)
    caches = [ConvStateCache(codec._decoder, 3, codec.device, codec.dtype) for _ in range(2)]
    state = torch.randn(caches[0].store.shape, generator=generator)
    state[caches[0].zeros] = 0
    for c in caches:
        c.store.copy_(state)
    caches[1].kernel = fused.extend_with_tail
    frames, scale = 4, 2
    x = torch.randn(3, channels, frames * scale, generator=generator)
    steps = [c.step(torch.tensor([2, 0, 1]), torch.tensor([4, 1, 0]), torch.tensor([False, True, False]), frames)
             for c in caches]
    want, got = (step.extend(widest, x) for step in steps)
    assert got.shape == (3, channels, tail + frames * scale) and torch.equal(got, want)
    assert torch.equal(got[1, :, :tail], torch.zeros(channels, tail))  # a fresh row starts from zeros
    for step in steps:
        step.commit()
    columns = slice(cache.columns[index], cache.columns[index] + channels * tail)
    assert torch.equal(caches[1].store[:, columns], caches[0].store[:, columns])
    # row 2 had no new frame: its slot (1) keeps the tail it read
    assert torch.equal(caches[1].store[1, columns], state[1, columns])


def test_the_kernel_refuses_what_it_cannot_walk(triton_interpreter) -> None:
    store, stage, x = torch.zeros(4, 30), torch.zeros(2, 30), torch.zeros(2, 3, 8)
    reads, lengths = torch.zeros(2, dtype=torch.long), torch.ones(2, dtype=torch.long)
    with pytest.raises(ValueError, match=r"width >= 33"):
        fused.extend_with_tail(store, 3, 10, reads, x, lengths, 2, stage)
    with pytest.raises(ValueError, match="contiguous store"):
        fused.extend_with_tail(torch.zeros(30, 4).t(), 0, 5, reads, x, lengths, 2, stage)
    with pytest.raises(ValueError, match=r"reads\s+and lengths \[2\]"):
        fused.extend_with_tail(store, 0, 5, reads[:1], x, lengths, 2, stage)


def test_without_the_interpreter_fusing_the_state_says_it_needs_cuda(codec_path) -> None:
    codec = load_torch_decoder(codec_path)
    with pytest.raises(RuntimeError, match="the fused state cannot run here: Triton compiles for CUDA, not cpu"):
        codec.fuse_state()
    assert not codec.fused_state and codec.carry_state(2).kernel is None


def test_a_kernel_that_computes_something_else_is_refused_and_nothing_changes(triton_interpreter, codec_path) -> None:
    codec = load_torch_decoder(codec_path)
    cache = codec.carry_state(2)

    def reads_the_zeros_row(store, offset, tail, reads, *rest):
        return fused.extend_with_tail(store, offset, tail, torch.full_like(reads, store.shape[0] - 1), *rest)

    def records_nothing(store, offset, tail, reads, x, lengths, scale, stage):
        return fused.extend_with_tail(store, offset, tail, reads, x, lengths, scale, torch.zeros_like(stage))

    with pytest.raises(ValueError, match="the fused state differs from the eager one at conv 0"):
        codec.fuse_state(reads_the_zeros_row)
    with pytest.raises(ValueError, match="the fused state records other tails than the eager one on cpu/torch.float32"):
        codec.fuse_state(records_nothing)
    assert not codec.fused_state and cache.kernel is None and not cache.store.any()


# ---- whole decodes --------------------------------------------------------------------------------


def test_chunks_decode_bit_for_bit_as_with_the_eager_state(triton_interpreter, codec_path) -> None:
    """Three chunks of two streams, one row ragged (shorter than the chunk), the state fused before
    carry_state (it applies to caches made later too): the same audio and the same tails."""
    eager, fast = _pair(codec_path)
    assert fast.fused_state and fast.state_cache.kernel is fused.extend_with_tail
    codes = random_codes(9, batch=2, seed=7)
    for (a, b), fresh in (((0, 4), True), ((4, 6), False), ((6, 9), False)):
        chunk = codes[:, :, a:b]
        lengths = [b - a, max(1, b - a - 1)]
        want = eager.decode_stateful(chunk, lengths, [2, 0], [fresh] * 2)
        got = fast.decode_stateful(chunk, lengths, [2, 0], [fresh] * 2)
        assert torch.equal(got, want), (a, b)
    assert torch.equal(fast.state_cache.store, eager.state_cache.store)


async def test_the_batching_decoder_streams_through_the_fused_state(triton_interpreter, codec_path) -> None:
    """Two streams at once, ragged pushes: each carries its state and equals its one-shot decode."""
    eager, fast = _pair(codec_path, slots=2)
    utterances, pushes = [random_codes(7, seed=30), random_codes(4, seed=31)], [[2, 3, 2], [1, 3]]
    async with BatchingCodecDecoder(fast, max_batch=2, schedule="2,4") as decoder:
        results = await asyncio.gather(*(stream_audio(decoder, c, p) for c, p in zip(utterances, pushes)))
    assert decoder.windowed_streams == 0
    for codes, got in zip(utterances, results):
        np.testing.assert_allclose(got, eager.decode_codes(codes.unsqueeze(0))[0].numpy(), atol=1e-5, rtol=0)


def test_a_fused_stateful_decode_launches_about_as_many_kernels_as_a_windowed_one(triton_interpreter, codec_path) -> None:
    """Counted with bench/kernel_count.py's counter (aten ops that launch a kernel, and the Triton
    kernels): eagerly a stateful decode adds four kernels a conv to a windowed one (the tails'
    gather, the concatenation, the record's index and gather, its write back, against one pad);
    fused it is one kernel a conv and one copy of the records."""
    from bench.kernel_count import KernelCounter

    eager, fast = _pair(codec_path, slots=2)
    convs = fast.state_cache.convs
    codes = random_codes(4, batch=1, seed=9)

    class Counter(KernelCounter):
        KERNELS = ()

        def __enter__(self):
            fused._extend_with_tail.run = self._counted(fused._extend_with_tail.run)
            return super().__enter__()

        def __exit__(self, *exc):
            del fused._extend_with_tail.run
            return super().__exit__(*exc)

    with torch.no_grad():
        with Counter() as windowed:
            eager.decode_codes(codes, [4])
        with Counter() as carried:
            eager.decode_stateful(codes, [4], [0], [True])
        with Counter() as carried_fused:
            fast.decode_stateful(codes, [4], [0], [True])
    assert carried.aten["index_select"] == carried.aten["index_copy_"] == convs and carried.triton == 0
    assert carried.total - windowed.total >= 3 * convs
    assert carried_fused.triton == convs and carried_fused.aten["index_copy_"] == 1
    assert "index_select" not in carried_fused.aten and "gather" not in carried_fused.aten
    assert carried_fused.total <= windowed.total + 12, (carried_fused.aten, windowed.aten)


# ---- where the gateway fuses (GEPARD_CODEC_FUSED_ACTIVATIONS) ---------------------------------------


def test_the_gateways_fusing_fuses_the_carried_state_too(triton_interpreter, codec_path, caplog) -> None:
    codec = load_torch_decoder(codec_path)
    codec.carry_state(2)
    with caplog.at_level(logging.INFO, logger="codec_worker.nanocodec"):
        assert fuse_decoder_activations(codec, True, compiled=False)
    convs = codec.state_cache.convs
    assert codec.fused_state and codec.state_cache.kernel is not None
    assert f"codec: the carried state of {convs} convs is read and recorded by one Triton kernel each" in caplog.text


def test_where_the_state_cannot_fuse_the_gateway_says_so_and_decodes_eagerly(codec_path, monkeypatch, caplog) -> None:
    codec = load_torch_decoder(codec_path)
    codec.carry_state(2)
    monkeypatch.setattr(TorchNanoCodec, "fuse_activations", lambda self, kernel=None: 96)  # no interpreter here
    with caplog.at_level(logging.INFO, logger="codec_worker.nanocodec"):
        fuse_decoder_activations(codec, True, compiled=False)
    assert not codec.fused_state and codec.state_cache.kernel is None
    assert ("codec: the carried conv state stays eager (five kernels a conv): RuntimeError: the fused state cannot "
            "run here: Triton compiles for CUDA, not cpu") in caplog.text


# ---- compiled for the H200 ------------------------------------------------------------------------------


@pytest.mark.parametrize("numel", ["i32", "i64"])  # Triton types an int argument by its value
@pytest.mark.parametrize("pointer", ["*bf16", "*fp16", "*fp32"])
def test_kernel_compiles_for_an_h200_with_no_gpu_here(pointer: str, numel: str) -> None:
    """Triton's own ptxas builds the kernel for sm_90: the types, the int64 offsets, the masked
    loads before x's start (a tail's samples) are checked here."""
    signature = {"store_ptr": pointer, "store_row": numel, "offset": "i32", "tail": "i32", "reads_ptr": "*i64",
                 "x_ptr": pointer, "x_row": numel, "x_channel": "i32", "length": "i32", "lengths_ptr": "*i64",
                 "scale": "i32", "full_ptr": pointer, "stage_ptr": pointer, "stage_row": numel, "channels": "i32",
                 "BLOCK": "constexpr"}
    assert_compiles_for_h200(fused, "_extend_with_tail", signature, {"BLOCK": fused.BLOCK})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: part 0 of bench/gpu_session.sh runs it")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_on_cuda_the_fused_state_decodes_as_the_eager_state(dtype: torch.dtype, tmp_path) -> None:
    """On the device, the kernel as Triton compiles it passes its check and chunks decode to the
    same audio as with the eager state (every value a copy, the convs the same)."""
    from codec_worker.torchcodec.random import write_random_decoder_codec

    path = write_random_decoder_codec(tmp_path / "codec.nemo", size="tiny")
    eager, fast = (load_torch_decoder(path, "cuda", dtype) for _ in range(2))
    assert fast.fuse_state() > 0
    for codec in (eager, fast):
        codec.carry_state(2)
    codes = random_codes(6, batch=2, seed=12)
    for (a, b), fresh in (((0, 2), True), ((2, 6), False)):
        chunk = codes[:, :, a:b]
        want = eager.decode_stateful(chunk, [b - a, 1], [1, 0], [fresh] * 2)
        got = fast.decode_stateful(chunk, [b - a, 1], [1, 0], [fresh] * 2)
        assert torch.equal(got, want), (a, b)
