"""The carried conv state read and recorded by one Triton kernel per conv (codec_worker.torchcodec.fused
extend_with_tail, TorchNanoCodec.fuse_state): run on CPU tensors by Triton's interpreter, it gives
the eager state's inputs, records and audio bit for bit (every value is a copy), through chunked
decodes, ragged and fresh rows and the batching decoder, and a stateful decode then launches about
as many kernels as a windowed one instead of twice as many. With the activations fused too, the
state kernel applies each conv's activation: the same bits as the activation kernel, and a decode
launches fewer kernels than a windowed one. A kernel that computes something else, or no Triton,
leaves the state eager, with a log line where the gateway fuses."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest
import torch

from codec_worker.batching import BatchingCodecDecoder
from codec_worker.nanocodec import fuse_decoder_activations
from codec_worker.torchcodec import ConvStateCache, TorchNanoCodec, fused, load_torch_decoder
from codec_worker.torchcodec.layers import PendingSum, snake_then_leaky
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


def test_a_step_of_a_cache_without_the_kernel_cannot_extend_through_it(codec_path) -> None:
    """fused_extend is the kernel's way in; a step begun before the cache had its kernel keeps
    no staging rows, so it refuses rather than record into nothing."""
    codec = load_torch_decoder(codec_path)
    cache = codec.carry_state(2)
    step = cache.step(torch.tensor([0]), torch.tensor([1]), torch.tensor([True]), 1)
    cache.kernel = fused.extend_with_tail  # too late for this step
    with pytest.raises(RuntimeError, match="fused_extend needs the cache's kernel, set before the step began"):
        step.fused_extend(0, torch.zeros(1, cache.buffers[0].shape[1], 1), 1)


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

    def records_nothing(store, offset, tail, reads, x, lengths, scale, stage, *activation):
        return fused.extend_with_tail(store, offset, tail, reads, x, lengths, scale, torch.zeros_like(stage), *activation)

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
    with torch.no_grad():
        with KernelCounter() as windowed:
            eager.decode_codes(codes, [4])
        with KernelCounter() as carried:
            eager.decode_stateful(codes, [4], [0], [True])
        with KernelCounter() as carried_fused:
            fast.decode_stateful(codes, [4], [0], [True])
    assert carried.aten["index_select"] == carried.aten["index_copy_"] == convs and carried.triton == 0
    assert carried.total - windowed.total >= 3 * convs
    assert carried_fused.kernels == {"_extend_with_tail": convs} and carried_fused.aten["index_copy_"] == 1
    assert "index_select" not in carried_fused.aten and "gather" not in carried_fused.aten
    assert carried_fused.total <= windowed.total + 12, (carried_fused.aten, windowed.aten)


def test_with_the_activations_fused_too_each_conv_is_one_kernel_for_activation_pad_or_state(triton_interpreter,
                                                                                         codec_path) -> None:
    """Every snake activation feeds a conv. Windowed, the fused activation writes the conv's padded
    input: the only pad left is the first conv's (it reads latents, not an activation). Carrying
    state, the state kernel applies the activation: no activation kernel runs at all, one kernel a
    conv. Either way the residual sums, the chains' means and the cut up-sample outputs' copies are
    gone into those kernels: the network is its convs and one kernel before each, and a stateful
    decode launches what a windowed one does but for its few set-up ops (its rows' slots, which
    start fresh, the commit)."""
    from bench.kernel_count import KernelCounter

    windowed, carried = load_torch_decoder(codec_path), load_torch_decoder(codec_path)
    activations = windowed.fuse_activations()
    assert carried.fuse_activations() == activations > 0
    convs = carried.fuse_state()
    carried.carry_state(1)
    codes = random_codes(4, batch=1, seed=9)
    with torch.no_grad():
        with KernelCounter() as window:
            windowed.decode_codes(codes, [4])
        with KernelCounter() as state:
            carried.decode_stateful(codes, [4], [0], [True])
    assert window.kernels == {"_snake_then_leaky": activations} and window.aten["constant_pad_nd"] == 1
    assert state.kernels == {"_extend_with_tail": convs} and "constant_pad_nd" not in state.aten
    for counted in (window, state):
        assert not {"add", "add_", "clone", "copy_", "cat"} & set(counted.aten), counted.aten
        assert counted.aten["div"] == 1  # the dequantisation's; no chain's mean
    assert state.total <= window.total + 6, (state.aten, window.aten)


# ---- the activation applied by the state kernel ---------------------------------------------------


def test_the_kernel_applies_the_activation_and_records_what_it_read(triton_interpreter) -> None:
    """With alphas, x's samples go through the activation first: within rounding of the eager
    activation, bit for bit what the activation kernel computes, and the record is the very
    values the input holds at the row's end (or the old tail where the row is shorter)."""
    generator = torch.Generator().manual_seed(5)
    rows, channels, tail, length = 3, 5, 4, 6
    offset = 3
    width = offset + channels * tail + 2
    store = torch.randn(6, width, generator=generator)
    stage = torch.zeros(rows, width)
    reads, lengths = torch.tensor([4, 1, 2]), torch.tensor([3, 1, 0])  # frames; scale 2 samples a frame
    x = 3 * torch.randn(rows, channels, length, generator=generator)
    alpha, split = 0.2 + torch.rand(1, 2, 1, generator=generator), 2
    got = fused.extend_with_tail(store, offset, tail, reads, x, lengths, 2, stage, alpha, split)
    activated = fused.snake_then_leaky(x, alpha, split)
    torch.testing.assert_close(activated, snake_then_leaky(x, alpha, split), rtol=1e-6, atol=1e-6)
    assert torch.equal(got[..., tail:], activated)
    tails = store[reads, offset : offset + channels * tail].view(rows, channels, tail)
    assert torch.equal(got[..., :tail], tails)
    recorded = stage[:, offset : offset + channels * tail].view(rows, channels, tail)
    for row, end in enumerate((lengths * 2).tolist()):  # the tail samples before the row's real end
        assert torch.equal(recorded[row], got[row, :, end : end + tail]), row
    with pytest.raises(ValueError, match="expected 3 alphas for split 3 of 5 channels, got 2"):
        fused.extend_with_tail(store, offset, tail, reads, x, lengths, 2, stage, alpha, 3)


@pytest.mark.parametrize("pairs", [1, 3])
def test_the_kernel_adds_a_pending_sum_as_the_activation_kernel_does(triton_interpreter, pairs: int) -> None:
    """A conv's input may be a unit's sum (kept: it is also the unit's residual) or the chains'
    mean: the state kernel adds it as the activation kernel does, the same bits, activates it and
    records what it read; a kept sum is written out, the eager add's bits."""
    generator = torch.Generator().manual_seed(8)
    rows, channels, tail, length = 3, 5, 4, 6
    width = channels * tail + 1
    store, stage = torch.randn(5, width, generator=generator), torch.zeros(rows, width)
    reads, lengths = torch.tensor([4, 1, 2]), torch.tensor([3, 2, 0])  # frames; 2 samples a frame
    first = (3 * torch.randn(rows, channels, length + 2, generator=generator))[..., 1:-1]  # strided
    terms = [first] + [3 * torch.randn(rows, channels, length, generator=generator) for _ in range(2 * pairs - 1)]
    alpha, split = 0.2 + torch.rand(1, 3, 1, generator=generator), 3

    def pending() -> PendingSum:
        made = PendingSum(list(zip(terms[::2], terms[1::2])), divisor=pairs)
        made.keep = pairs == 1
        return made

    read = pending()
    got = fused.extend_with_tail(store, 0, tail, reads, read, lengths, 2, stage, alpha, split)
    assert torch.equal(got[..., tail:], fused.snake_then_leaky(pending(), alpha, split))
    torch.testing.assert_close(got[..., tail:], snake_then_leaky(pending().value(), alpha, split), rtol=1e-6, atol=1e-6)
    assert torch.equal(got[..., :tail], store[reads, : channels * tail].view(rows, channels, tail))
    recorded = stage[:, : channels * tail].view(rows, channels, tail)
    for row, end in enumerate((lengths * 2).tolist()):
        assert torch.equal(recorded[row], got[row, :, end : end + tail]), row
    if pairs == 1:
        assert torch.equal(read.total, terms[0] + terms[1])
    else:
        assert read.total is None


def test_a_kernel_whose_activation_or_record_is_off_is_refused(triton_interpreter, codec_path) -> None:
    codec = load_torch_decoder(codec_path)

    def ignores_the_activation(*plain, alpha=None, split=0):
        return fused.extend_with_tail(*plain[:8])

    def records_the_raw_samples(store, offset, tail, reads, x, lengths, scale, stage, *activation):
        fused.extend_with_tail(store, offset, tail, reads, x, lengths, scale, stage)
        return fused.extend_with_tail(store, offset, tail, reads, x, lengths, scale, torch.empty_like(stage), *activation)

    with pytest.raises(ValueError, match="the fused state's activation differs from the eager one at conv 1 \\(tensor\\) "
                                         "on cpu/torch.float32"):
        codec.fuse_state(ignores_the_activation)
    with pytest.raises(ValueError, match="the fused state records other tails than the eager one on cpu/torch.float32"):
        codec.fuse_state(records_the_raw_samples)

    def keeps_no_sum(store, offset, tail, reads, x, *rest):  # adds a unit's sum right, never writes it out
        if isinstance(x, PendingSum):
            x = PendingSum(x.pairs, x.divisor)
        return fused.extend_with_tail(store, offset, tail, reads, x, *rest)

    with pytest.raises(ValueError, match="the fused state's kept sum is not the eager add's at conv \\d+ on "
                                         "cpu/torch.float32"):
        codec.fuse_state(keeps_no_sum)
    assert not codec.fused_state


def test_chunks_with_the_activation_in_the_state_kernel_decode_as_with_the_activation_kernel(triton_interpreter,
                                                                                           codec_path) -> None:
    """Both fused, the activation runs inside the state kernel; fused activations over the eager
    state run it as its own kernel. The same expression either way: the same audio and tails, bit
    for bit, through chunks of ragged and fresh rows."""
    apart, folded = _pair(codec_path, fuse=False)
    for codec in (apart, folded):
        codec.fuse_activations()
    folded.fuse_state()
    folded.carry_state(3)
    codes = random_codes(6, batch=2, seed=17)
    for (a, b), fresh in (((0, 3), True), ((3, 6), False)):
        chunk = codes[:, :, a:b]
        lengths = [b - a, b - a - 1]
        want = apart.decode_stateful(chunk, lengths, [2, 0], [fresh] * 2)
        got = folded.decode_stateful(chunk, lengths, [2, 0], [fresh] * 2)
        assert torch.equal(got, want), (a, b)
    assert torch.equal(folded.state_cache.store, apart.state_cache.store)


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


#: (ACTIVATE, PAIRS, MEAN, KEEP): every variant a decode launches: a conv with no activation
#: before it, and one whose activation reads a tensor, a residual unit's sum (kept), the mean
INPUT_FORMS = {"plain": (False, 0, False, False), "tensor": (True, 0, False, False),
               "residual": (True, 1, False, True), "mean": (True, 3, True, False)}


@pytest.mark.parametrize("form", list(INPUT_FORMS))
@pytest.mark.parametrize("numel", ["i32", "i64"])  # Triton types an int argument by its value
@pytest.mark.parametrize("pointer", ["*bf16", "*fp16", "*fp32"])
def test_kernel_compiles_for_an_h200_with_no_gpu_here(pointer: str, numel: str, form: str) -> None:
    """Triton's own ptxas builds the kernel for sm_90: the types, the int64 offsets, the masked
    loads before x's start (a tail's samples), the activation's scalar alpha, the sums' float32
    adds and their rounding to the tensors' dtype are checked here."""
    activate, pairs, mean, keep = INPUT_FORMS[form]
    signature = {"store_ptr": pointer, "store_row": numel, "offset": "i32", "tail": "i32", "reads_ptr": "*i64",
                 "x_ptr": pointer, "x_row": numel, "x_channel": "i32", "b0_ptr": pointer, "a1_ptr": pointer,
                 "b1_ptr": pointer, "a2_ptr": pointer, "b2_ptr": pointer, "divisor": "fp32", "total_ptr": pointer,
                 "length": "i32", "lengths_ptr": "*i64", "scale": "i32", "full_ptr": pointer, "stage_ptr": pointer,
                 "stage_row": numel, "channels": "i32", "alpha_ptr": pointer, "split": "i32", "eps": "fp32",
                 "slope": "fp32", "BLOCK": "constexpr", "ACTIVATE": "constexpr", "PAIRS": "constexpr",
                 "MEAN": "constexpr", "KEEP": "constexpr"}
    assert_compiles_for_h200(fused, "_extend_with_tail", signature, {"BLOCK": fused.BLOCK, "ACTIVATE": activate,
                                                                     "PAIRS": pairs, "MEAN": mean, "KEEP": keep})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: part 0 of bench/gpu_session.sh runs it")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_on_cuda_the_fused_state_decodes_as_the_eager_state(dtype: torch.dtype, tmp_path) -> None:
    """On the device, the kernel as Triton compiles it passes its check and chunks decode to the
    same audio as with the eager state (every value a copy, the convs the same); with the
    activations fused, the same audio whether the state kernel or their own kernel applies them."""
    from codec_worker.torchcodec.random import write_random_decoder_codec

    path = write_random_decoder_codec(tmp_path / "codec.nemo", size="tiny")
    eager, fast, apart, folded = (load_torch_decoder(path, "cuda", dtype) for _ in range(4))
    assert fast.fuse_state() > 0
    # the activations fused: as their own kernel over the eager state, and inside the state kernel
    for codec in (apart, folded):
        codec.fuse_activations()
    folded.fuse_state()
    for codec in (eager, fast, apart, folded):
        codec.carry_state(2)
    codes = random_codes(6, batch=2, seed=12)
    for (a, b), fresh in (((0, 2), True), ((2, 6), False)):
        chunk = codes[:, :, a:b]
        want = eager.decode_stateful(chunk, [b - a, 1], [1, 0], [fresh] * 2)
        got = fast.decode_stateful(chunk, [b - a, 1], [1, 0], [fresh] * 2)
        assert torch.equal(got, want), (a, b)
        want = apart.decode_stateful(chunk, [b - a, 1], [1, 0], [fresh] * 2)
        got = folded.decode_stateful(chunk, [b - a, 1], [1, 0], [fresh] * 2)
        assert torch.equal(got, want), ("folded", a, b)  # one expression, compiled in both kernels
