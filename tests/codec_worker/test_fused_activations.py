"""The decoder's snake activations: the eager form computed in place equals the functional ops bit
for bit, and the Triton kernel (codec_worker.torchcodec.fused), run on CPU tensors by Triton's
interpreter, equals them within float32 rounding, alone and through whole decodes, windowed and
carrying state. On CPU without the interpreter, and for a kernel that computes something else, the
codec keeps its eager activations, with a log line."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from codec_worker.batching import BatchingCodecDecoder
from codec_worker.nanocodec import fuse_decoder_activations, fuses_activations_by_default
from codec_worker.torchcodec import TorchNanoCodec, fused, load_torch_decoder
from codec_worker.torchcodec.decoder import MultiKernelResidual, ResidualUnit
from codec_worker.torchcodec.layers import (
    LEAKY_RELU_SLOPE,
    HalfSnake,
    PendingSum,
    Snake,
    snake,
    snake_then_leaky,
    value_of,
)
from tests.codec_worker.conftest import random_codes
from tests.codec_worker.test_torch_decoder import _stream as stream_audio
from tests.triton_aot import assert_compiles_for_h200


def _functional(x: torch.Tensor, alpha: torch.Tensor, split: int) -> torch.Tensor:
    """What HalfSnake computed before it worked in place: the ops one by one, then a concatenation."""
    return torch.cat([snake(x[:, :split], alpha), F.leaky_relu(x[:, split:], LEAKY_RELU_SLOPE)], dim=1)


def _alphas(split: int, seed: int) -> torch.Tensor:
    """Per-channel alphas as a trained codec has them (not the 1.0 of a fresh init), one near 0."""
    alpha = torch.rand(1, split, 1, generator=torch.Generator().manual_seed(seed)) * 3 + 0.05
    alpha[:, :1] = 0.0  # eps keeps 1 / alpha finite
    return alpha


def _randomise_alphas(codec: TorchNanoCodec, seed: int) -> None:
    with torch.no_grad():
        for i, module in enumerate(codec._snakes()):
            module.alpha.copy_(_alphas(module.alpha.shape[1], seed + i))


# ---- eager, in place ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels,split", [(9, 4), (8, 4), (6, 6), (5, 0)])
def test_in_place_activation_is_bit_identical_to_the_functional_ops(dtype: torch.dtype, channels: int, split: int) -> None:
    x = (4 * torch.randn(3, channels, 257, generator=torch.Generator().manual_seed(channels))).to(dtype)
    alpha = _alphas(split, seed=split).to(dtype)
    assert torch.equal(snake_then_leaky(x, alpha, split), _functional(x, alpha, split))


def test_modules_use_the_in_place_form_and_still_run_under_autograd() -> None:
    x = torch.randn(2, 7, 50, requires_grad=True)  # a decoder built from scratch has trainable alphas
    half, full = HalfSnake(7), Snake(7)
    y = half(x)
    y.sum().backward()
    assert x.grad is not None and half.alpha.grad is not None
    with torch.no_grad():
        assert torch.equal(half(x), _functional(x, half.alpha, 3))
        assert torch.equal(full(x), snake(x, full.alpha))


# ---- the Triton kernel, interpreted ---------------------------------------------------------------


@pytest.mark.parametrize("channels,split,length", [(7, 3, 1500), (6, 6, 1024), (4, 0, 3), (3, 1, 1)])
def test_kernel_equals_the_eager_activation(triton_interpreter, channels: int, split: int, length: int) -> None:
    # lengths past one block and not a multiple of it, exactly one block, shorter than one
    x = 4 * torch.randn(2, channels, length, generator=torch.Generator().manual_seed(length))
    alpha = _alphas(split, seed=length)
    got = triton_interpreter.snake_then_leaky(x, alpha, split)
    assert got.shape == x.shape and got.dtype == x.dtype and got.is_contiguous()
    torch.testing.assert_close(got, snake_then_leaky(x, alpha, split), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("pad,length", [(2, 5), (10, 1500), (1030, 3)])
def test_kernel_writes_behind_the_zeros_a_causal_conv_pads_with(triton_interpreter, pad: int, length: int) -> None:
    """What F.pad(activation, (pad, 0)) gives in two kernels, in one: pads short and long against
    the rows (a padded row spanning blocks, a block spanning rows)."""
    x = 4 * torch.randn(3, 5, length, generator=torch.Generator().manual_seed(pad))
    alpha = _alphas(2, seed=pad)
    got = triton_interpreter.snake_then_leaky(x, alpha, 2, pad)
    assert got.shape == (3, 5, pad + length) and got.is_contiguous()
    assert not got[..., :pad].any()
    torch.testing.assert_close(got, F.pad(snake_then_leaky(x, alpha, 2), (pad, 0)), rtol=1e-6, atol=1e-6)
    # the values are those of the unpadded kernel, bit for bit
    assert torch.equal(got[..., pad:], triton_interpreter.snake_then_leaky(x, alpha, 2))


def test_modules_pad_what_they_activate_fused_or_not(triton_interpreter) -> None:
    half = HalfSnake(6)
    with torch.no_grad():
        half.alpha.copy_(_alphas(3, seed=8))
    x = torch.randn(2, 6, 9)
    with torch.no_grad():
        eager = half(x, 4)
        assert torch.equal(eager, F.pad(half(x), (4, 0)))
        half.kernel = triton_interpreter.snake_then_leaky
        torch.testing.assert_close(half(x, 4), eager, rtol=1e-6, atol=1e-6)
    assert half.split == 3


# ---- the sums the activations read ----------------------------------------------------------------


def _like(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return 3 * torch.randn(shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("pad", [0, 7])
def test_kernel_adds_a_residual_sum_and_writes_it_out(triton_interpreter, pad: int) -> None:
    """A unit's input is the last unit's x + y, and its residual too: the kernel adds it (x, an
    up-sample's cut output, strided; rows past one block), activates it and writes the sum out,
    the eager add's bits; the unit then reads it without adding again."""
    x = _like((2, 5, 1300), seed=1)[..., :1200]
    y = _like((2, 5, 1200), seed=2)
    alpha = _alphas(2, seed=3)
    pending = PendingSum([(x, y)])
    pending.keep = True
    got = triton_interpreter.snake_then_leaky(pending, alpha, 2, pad)
    assert pending.total is not None and pending.total.is_contiguous()
    assert torch.equal(pending.total, x + y) and pending.value() is pending.total
    torch.testing.assert_close(got, F.pad(snake_then_leaky(x + y, alpha, 2), (pad, 0)), rtol=1e-6, atol=1e-6)
    # read once (a unit's last sum goes to the mean, the mean to the next stage): nothing written out
    once = PendingSum([(x, y)])
    assert torch.equal(triton_interpreter.snake_then_leaky(once, alpha, 2, pad), got) and once.total is None


def test_kernel_adds_the_mean_of_the_chains_and_refuses_terms_of_other_shapes(triton_interpreter) -> None:
    """The mean of three chains' last pairs, added in the eager ops' order: the activation of the
    eager mean (in float32 the same input, bit for bit). A mean of more pairs than the kernel adds
    is added eagerly first, to the same result."""
    pairs = [(_like((2, 6, 300), seed=2 * i), _like((2, 6, 300), seed=2 * i + 1)) for i in range(fused.MAX_PAIRS)]
    alpha = _alphas(3, seed=4)
    want = snake_then_leaky(PendingSum(pairs, divisor=3).value(), alpha, 3)
    torch.testing.assert_close(triton_interpreter.snake_then_leaky(PendingSum(pairs, divisor=3), alpha, 3), want,
                               rtol=1e-6, atol=1e-6)
    more = pairs + [pairs[0]]
    torch.testing.assert_close(triton_interpreter.snake_then_leaky(PendingSum(more, divisor=4), alpha, 3),
                               snake_then_leaky(PendingSum(more, divisor=4).value(), alpha, 3), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="a pending sum's terms differ in shape"):
        triton_interpreter.snake_then_leaky(PendingSum([pairs[0], (pairs[1][0], pairs[1][1][..., 1:])], 2), alpha, 3)


def test_a_pending_sum_needs_a_pair_and_a_divisor() -> None:
    with pytest.raises(ValueError, match="a pending sum needs at least one pair and a divisor >= 1, got 0 and 1"):
        PendingSum([])
    with pytest.raises(ValueError, match="a pending sum needs at least one pair and a divisor >= 1, got 1 and 0"):
        PendingSum([(torch.zeros(1, 1, 1), torch.zeros(1, 1, 1))], divisor=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sums_left_to_eager_activations_are_the_adds_in_place_bit_for_bit(codec_path, dtype: torch.dtype) -> None:
    """fold_sums without kernels: every PendingSum is computed by ``value()``, the decoder's own
    adds in their order, so the audio is the same bits, windowed and carrying state."""
    plain, folded = (load_torch_decoder(codec_path, "cpu", dtype) for _ in range(2))
    for codec in (plain, folded):
        _randomise_alphas(codec, seed=13)
    stages = len(folded._decoder.stages)
    config = folded._decoder.config
    units = stages * len(config.resblock_kernel_sizes) * len(config.resblock_dilation_sizes)
    assert folded._decoder.fold_sums() == units + stages
    codes = random_codes(6, batch=2, seed=3)
    assert torch.equal(folded.decode_codes(codes), plain.decode_codes(codes))
    for codec in (plain, folded):
        codec.carry_state(2)
    for chunk, fresh in ((codes[:, :, :4], True), (codes[:, :, 4:], False)):
        args = (chunk, [chunk.shape[-1]] * 2, [0, 1], [fresh] * 2)
        assert torch.equal(folded.decode_stateful(*args), plain.decode_stateful(*args))


def test_kernel_takes_a_strided_input_and_an_empty_one(triton_interpreter) -> None:
    x = torch.randn(2, 40, 5).transpose(1, 2)  # [2, 5, 40], not contiguous
    alpha = _alphas(2, seed=3)
    torch.testing.assert_close(triton_interpreter.snake_then_leaky(x, alpha, 2), snake_then_leaky(x, alpha, 2),
                               rtol=1e-6, atol=1e-6)
    empty = torch.randn(2, 5, 0)
    assert triton_interpreter.snake_then_leaky(empty, alpha, 2).shape == (2, 5, 0)


def test_kernel_refuses_alphas_that_do_not_match_the_split(triton_interpreter) -> None:
    with pytest.raises(ValueError, match="expected x \\[B, C, T\\], 3 alphas for split 3 and pad >= 0, got "
                                         "\\(1, 6, 10\\), 2 and 0"):
        triton_interpreter.snake_then_leaky(torch.randn(1, 6, 10), torch.ones(1, 2, 1), 3)
    with pytest.raises(ValueError, match="and pad >= 0, got \\(1, 6, 10\\), 3 and -1"):
        triton_interpreter.snake_then_leaky(torch.randn(1, 6, 10), torch.ones(1, 3, 1), 3, -1)


def test_kernel_without_the_interpreter_says_it_needs_cuda() -> None:
    assert fused.unavailable_reason(torch.device("cpu")) == "Triton compiles for CUDA, not cpu"
    with pytest.raises(RuntimeError, match="cannot run here: Triton compiles for CUDA, not cpu"):
        fused.snake_then_leaky(torch.randn(1, 4, 10), torch.ones(1, 2, 1), 2)


#: (PAIRS, MEAN, KEEP) of each input an activation reads in a decode: a tensor, a residual
#: unit's sum (kept), the mean of the chains
INPUT_FORMS = {"tensor": (0, False, False), "residual": (1, False, True), "mean": (3, True, False)}


@pytest.mark.parametrize("form", list(INPUT_FORMS))
@pytest.mark.parametrize("numel", ["i32", "i64"])  # Triton types an int argument by its value
@pytest.mark.parametrize("pointer", ["*bf16", "*fp16", "*fp32"])
def test_kernel_compiles_for_an_h200_with_no_gpu_here(pointer: str, numel: str, form: str) -> None:
    """Triton's own ptxas builds the kernel for sm_90, the H200 of the GPU sessions: what the
    interpreter does not check (types, the int64 offsets, the float32 sums and the casts of the
    stores) is checked here."""
    pairs, mean, keep = INPUT_FORMS[form]
    signature = {"x_ptr": pointer, "x_batch": numel, "x_channel": "i32", "b0_ptr": pointer, "a1_ptr": pointer,
                 "b1_ptr": pointer, "a2_ptr": pointer, "b2_ptr": pointer, "divisor": "fp32", "total_ptr": pointer,
                 "alpha_ptr": pointer, "out_ptr": pointer, "numel": numel, "channels": "i32", "split": "i32",
                 "length": "i32", "pad": "i32", "eps": "fp32", "slope": "fp32", "BLOCK": "constexpr",
                 "PAIRS": "constexpr", "MEAN": "constexpr", "KEEP": "constexpr"}
    assert_compiles_for_h200(fused, "_snake_then_leaky", signature, {"BLOCK": fused.BLOCK, "PAIRS": pairs,
                                                                     "MEAN": mean, "KEEP": keep})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: part 0 of bench/gpu_session.sh runs it")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_on_cuda_the_compiled_kernel_decodes_as_the_eager_activations(dtype: torch.dtype, tmp_path) -> None:
    """On the device, the kernel as Triton really compiles it: its check passes at fuse time, and a
    whole decode is as close to the float32 CPU decode as the eager activations' (bf16 rounds once
    per activation instead of once per op, so it may be closer). Decoder-only codec: no NeMo there."""
    from codec_worker.torchcodec.random import write_random_decoder_codec

    path = write_random_decoder_codec(tmp_path / "codec.nemo", size="tiny")
    reference, eager, fast = (load_torch_decoder(path, *where) for where in
                              (("cpu", torch.float32), ("cuda", dtype), ("cuda", dtype)))
    for codec in (reference, eager, fast):
        _randomise_alphas(codec, seed=11)
    assert fast.fuse_activations() == len(fast._snakes()) > 0
    codes = random_codes(40, batch=3, seed=6)
    want = reference.decode_codes(codes)
    eager_error = float((eager.decode_codes(codes).cpu() - want).abs().max())
    fused_error = float((fast.decode_codes(codes).cpu() - want).abs().max())
    assert fused_error <= max(2 * eager_error, 1e-4), (fused_error, eager_error)


# ---- whole decodes --------------------------------------------------------------------------------


def test_fused_decoder_decodes_as_the_eager_one(triton_interpreter, codec_path) -> None:
    eager, fast = load_torch_decoder(codec_path), load_torch_decoder(codec_path)
    for codec in (eager, fast):
        _randomise_alphas(codec, seed=11)
    assert fast.fused_activations == 0
    count = fast.fuse_activations()
    assert count == fast.fused_activations == len(fast._snakes()) > 0
    codes = random_codes(6, batch=2, seed=4)
    np.testing.assert_allclose(fast.decode_codes(codes).numpy(), eager.decode_codes(codes).numpy(), atol=2e-6, rtol=0)
    # carrying state: two chunks, the second continuing the first from the stored tails
    for codec in (eager, fast):
        codec.carry_state(2)
    first, second = codes[:, :, :4], codes[:, :, 4:]
    for chunk, fresh in ((first, True), (second, False)):
        want = eager.decode_stateful(chunk, [chunk.shape[-1]] * 2, [0, 1], [fresh] * 2)
        got = fast.decode_stateful(chunk, [chunk.shape[-1]] * 2, [0, 1], [fresh] * 2)
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=2e-6, rtol=0)


async def test_batching_decoder_streams_through_the_fused_decoder(triton_interpreter, codec_path) -> None:
    """Two streams at once, ragged pushes, state carried: each equals its one-shot eager decode."""
    eager, fast = load_torch_decoder(codec_path), load_torch_decoder(codec_path)
    fast.fuse_activations()
    utterances, pushes = [random_codes(5, seed=20), random_codes(3, seed=21)], [[2, 3], [1, 2]]
    async with BatchingCodecDecoder(fast, max_batch=2, schedule="2,4", carry_state=True) as decoder:
        results = await asyncio.gather(*(stream_audio(decoder, c, p) for c, p in zip(utterances, pushes)))
    assert decoder.windowed_streams == 0
    for codes, got in zip(utterances, results):
        np.testing.assert_allclose(got, eager.decode_codes(codes.unsqueeze(0))[0].numpy(), atol=2e-6, rtol=0)


def test_a_kernel_that_computes_something_else_is_refused_and_nothing_changes(codec_path) -> None:
    codec = load_torch_decoder(codec_path)
    _randomise_alphas(codec, seed=5)
    identity = lambda x, alpha, split, pad: F.pad(value_of(x), (pad, 0))  # noqa: E731
    with pytest.raises(ValueError, match="differs from the eager one on cpu/torch.float32 \\(tensor, pad 0: "):
        codec.fuse_activations(identity)
    unpadded = lambda x, alpha, split, pad: snake_then_leaky(value_of(x), alpha, split)  # noqa: E731
    with pytest.raises(ValueError, match="differs from the eager one on cpu/torch.float32 \\(tensor, pad 10: shape "
                                         "\\(2, \\d+, 700\\), expected \\(2, \\d+, 710\\)\\)"):
        codec.fuse_activations(unpadded)

    def first_pair_only(x, alpha, split, pad):  # a mean's other chains left out
        if isinstance(x, PendingSum) and len(x.pairs) > 1:
            x = PendingSum(x.pairs[:1])
        return F.pad(snake_then_leaky(value_of(x), alpha, split), (pad, 0))

    with pytest.raises(ValueError, match="\\(mean, pad 0: max abs diff"):
        codec.fuse_activations(first_pair_only)

    def keeps_nothing(x, alpha, split, pad):  # the right activation, but the unit's residual never written out
        total = value_of(x)
        if isinstance(x, PendingSum):
            x.total = None
        return F.pad(snake_then_leaky(total, alpha, split), (pad, 0))

    with pytest.raises(ValueError, match="\\(residual, pad 10: the sum it keeps for the residual is not the eager add's\\)"):
        codec.fuse_activations(keeps_nothing)
    assert codec.fused_activations == 0
    sums = [m for m in codec._decoder.modules() if isinstance(m, (ResidualUnit, MultiKernelResidual))]
    assert sums and not any(m.defer_sums for m in sums)
    off_by_rounding = lambda x, alpha, split, pad: F.pad(snake_then_leaky(value_of(x), alpha, split) * (1 + 1e-7), (pad, 0))  # noqa: E731
    assert codec.fuse_activations(off_by_rounding) == len(codec._snakes())
    assert all(m.defer_sums for m in sums)


# ---- the setting (GEPARD_CODEC_FUSED_ACTIVATIONS) ------------------------------------------------------


def test_default_is_on_for_cuda_unless_compiled() -> None:
    assert fuses_activations_by_default(torch.device("cuda"), compiled=False)
    assert not fuses_activations_by_default(torch.device("cuda"), compiled=True)  # Inductor fuses them itself
    assert not fuses_activations_by_default(torch.device("cpu"), compiled=False)


def test_on_cpu_the_default_leaves_the_decoder_eager_and_asking_for_it_warns(codec_path, caplog) -> None:
    codec = load_torch_decoder(codec_path)
    assert fuse_decoder_activations(codec, None, compiled=False) is False
    assert fuse_decoder_activations(codec, False, compiled=False) is False
    with caplog.at_level(logging.WARNING, logger="codec_worker.nanocodec"):
        assert fuse_decoder_activations(codec, True, compiled=False) is False
    assert codec.fused_activations == 0
    assert "activations stay eager: RuntimeError: the fused activations cannot run here: Triton compiles for " \
           "CUDA, not cpu" in caplog.text


def test_a_fusion_that_loses_the_device_stops_the_start(codec_path, monkeypatch, caplog) -> None:
    """A kernel that fails its check leaves the activations eager; a lost device cannot run them eagerly either."""
    codec = load_torch_decoder(codec_path)

    def lost() -> int:
        raise torch.AcceleratorError("CUDA error: device-side assert triggered")

    monkeypatch.setattr(codec, "fuse_activations", lost)
    with caplog.at_level(logging.INFO, logger="codec_worker.nanocodec"):
        with pytest.raises(torch.AcceleratorError, match="device-side assert"):
            fuse_decoder_activations(codec, True, compiled=False)
    assert "stay eager" not in caplog.text


def test_a_decoder_without_snake_activations_has_nothing_to_fuse(triton_interpreter, codec_path, caplog) -> None:
    from codec_worker._checkpoint import read_source
    from codec_worker.torchcodec.codec import _codec_config
    from codec_worker.torchcodec.decoder import CausalHiFiGANDecoder

    raw = dict(read_source(codec_path).config)
    raw["audio_decoder"] = {**raw["audio_decoder"], "activation": "lrelu", "up_sample_rates": [4, 2],
                            "base_channels": 16}
    raw["samples_per_frame"] = 8
    config, decoder_config = _codec_config(raw, "<lrelu test codec>")
    codec = TorchNanoCodec(config, CausalHiFiGANDecoder(decoder_config).eval(), fingerprint="lrelu",
                           device=torch.device("cpu"), dtype=torch.float32)
    with caplog.at_level(logging.INFO, logger="codec_worker.nanocodec"):
        assert fuse_decoder_activations(codec, True, compiled=False) is False
    assert codec.fused_activations == 0
    assert "the decoder has no snake activation; nothing to fuse" in caplog.text
    assert "run as one Triton kernel" not in caplog.text


def test_nemo_decoder_is_left_as_it_is(caplog) -> None:
    nemo = SimpleNamespace(impl="nemo", device=torch.device("cuda"))
    with caplog.at_level(logging.INFO, logger="codec_worker.nanocodec"):
        assert fuse_decoder_activations(nemo, None, compiled=False) is False
    assert "fused activations apply to the torch decoder only" in caplog.text


def test_setting_fuses_with_the_interpreter(triton_interpreter, codec_path, caplog) -> None:
    codec = load_torch_decoder(codec_path)
    with caplog.at_level(logging.INFO, logger="codec_worker.nanocodec"):
        assert fuse_decoder_activations(codec, True, compiled=False) is True
    assert codec.fused_activations == len(codec._snakes())
    assert f"{codec.fused_activations} snake activations run as one Triton kernel each" in caplog.text

