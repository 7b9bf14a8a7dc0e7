"""The torch decoder through torch.compile (GEPARD_CODEC_COMPILE), on CPU.

The compiled decoder must give the eager decoder's audio for any batch and window width (padded to
powers of two, larger ones eager), streams decoded window by window must still join into the whole
utterance's audio, and everything must be compiled before serving: a compile while serving would
stall every stream for seconds. The mechanics are tested on a small decoder built from the same
classes (2 up-sampling stages, 1 kernel size; tracing the published layout's ~1,100 ops takes about
10 s a graph here), through torch.compile's "eager" backend: Dynamo captures the same whole graphs
with the same guards (which decide what compiles when) and runs them with PyTorch's own kernels,
because TorchInductor takes minutes to generate C++ kernels on these CPUs. The published layout is
captured whole in tests/test_bench_pipeline_torchcodec.py (bench/torch_codec.py --compile); a GPU
session compiles it with Inductor.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

from codec_worker.batching import BatchingCodecDecoder
from codec_worker.nanocodec import NanoCodec, compile_decoder
from codec_worker.torchcodec import TorchNanoCodec
from codec_worker.torchcodec.codec import padded_size, padded_sizes
from tests.codec_worker.conftest import random_codes
from tests.codec_worker.test_torch_decoder import TOLERANCE, _max_diff, _stream


MAX_BATCH = 4
MAX_FRAMES = 16


def small_codec(codec_path: Path) -> TorchNanoCodec:
    """The tiny codec's config with a small decoder network (same classes), random weights."""
    from codec_worker._checkpoint import read_source
    from codec_worker.torchcodec.codec import _codec_config
    from codec_worker.torchcodec.decoder import CausalHiFiGANDecoder
    from codec_worker.torchcodec.random import randomize

    raw = dict(read_source(codec_path).config)
    raw["audio_decoder"] = {**raw["audio_decoder"], "up_sample_rates": [4, 2], "base_channels": 16,
                            "resblock_kernel_sizes": [3], "resblock_dilation_sizes": [1, 3]}
    raw["samples_per_frame"] = 8
    config, decoder_config = _codec_config(raw, "<small test codec>")
    decoder = CausalHiFiGANDecoder(decoder_config).eval().requires_grad_(False)
    randomize(decoder, torch.Generator().manual_seed(0))
    return TorchNanoCodec(config, decoder, fingerprint="small", device=torch.device("cpu"), dtype=torch.float32)


@pytest.fixture(scope="module")
def eager_codec(codec_path: Path) -> TorchNanoCodec:
    return small_codec(codec_path)


@pytest.fixture(scope="module")
def compiled_codec(eager_codec: TorchNanoCodec) -> TorchNanoCodec:
    codec = TorchNanoCodec(eager_codec.config, eager_codec._decoder, fingerprint="small", device=eager_codec.device,
                           dtype=eager_codec.dtype)
    assert codec.compile(MAX_BATCH, MAX_FRAMES, backend="eager") == 3 * 5  # batches 1, 2, 4 x widths 1 .. 16
    assert codec.compiled and not eager_codec.compiled
    return codec


def assert_eager_audio(got: torch.Tensor, want: torch.Tensor, lengths: list[int], spf: int) -> None:
    """A faster decode's audio is the eager decoder's: same shape, real audio, silence past each row's length."""
    assert got.shape == want.shape == (len(lengths), max(lengths) * spf) and got.dtype == torch.float32
    assert float(want.abs().max()) > 0.01  # real audio
    assert _max_diff(got, want) <= TOLERANCE
    for row, length in enumerate(lengths):
        assert not bool(got[row, length * spf :].any())


def compiled_graphs() -> int:
    return counters["stats"]["unique_graphs"]


def test_sizes_pad_to_powers_of_two():
    assert [padded_size(n) for n in (1, 2, 3, 4, 5, 31, 32, 33, 57)] == [1, 2, 4, 4, 8, 32, 32, 64, 64]
    assert padded_sizes(1) == [1] and padded_sizes(5) == [1, 2, 4, 8] and padded_sizes(32) == [1, 2, 4, 8, 16, 32]


@pytest.mark.parametrize("batch, frames", [(1, 1), (1, 2), (1, 13), (3, 1), (2, 7), (4, 16), (3, 11), (5, 9), (2, 30)])
def test_the_compiled_decoder_gives_the_eager_audio_without_compiling_again(
    eager_codec: TorchNanoCodec, compiled_codec: TorchNanoCodec, batch: int, frames: int
) -> None:
    codes = random_codes(frames, batch=batch, seed=batch * 100 + frames)
    lengths = [frames] + [max(1, frames - 3 * i) for i in range(1, batch)]  # right-padded rows
    before = compiled_graphs()
    got = compiled_codec.decode_codes(codes, lengths=lengths)
    # everything was compiled up front; larger decodes (5 windows, 30 frames) run uncompiled
    assert compiled_graphs() == before
    assert_eager_audio(got, eager_codec.decode_codes(codes, lengths=lengths), lengths, eager_codec.samples_per_frame)


async def test_streams_through_the_compiled_decoder_join_into_the_whole_utterance(
    eager_codec: TorchNanoCodec, compiled_codec: TorchNanoCodec
) -> None:
    utterances = [random_codes(frames, seed=80 + i) for i, frames in enumerate([50, 17, 3])]
    pushes = [[1] * 50, [5, 5, 7], [3]]
    before = compiled_graphs()
    async with BatchingCodecDecoder(compiled_codec, max_batch=3, schedule="2,4") as decoder:
        assert decoder.max_window_frames <= MAX_FRAMES  # every window compiled
        results = [await _stream(decoder, c, p) for c, p in zip(utterances, pushes)]
    assert compiled_graphs() == before
    for codes, got in zip(utterances, results):
        whole = eager_codec.decode_codes(codes.unsqueeze(0))[0].numpy()
        assert got.shape == whole.shape and _max_diff(got, whole) <= TOLERANCE


def test_a_compile_that_fails_leaves_the_decoder_decoding_uncompiled(codec_path, monkeypatch, caplog):
    """No C++ compiler, an Inductor or Triton failure: the server must still speak."""

    def broken(fn, **kwargs):
        def compiled(*args):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore detail")
        return compiled

    monkeypatch.setattr(torch, "compile", broken)
    caplog.set_level(logging.INFO, logger="codec_worker.nanocodec")
    codec = small_codec(codec_path)
    assert not compile_decoder(codec, 2, 8)
    assert not codec.compiled
    audio = codec.decode_codes(random_codes(4, batch=1))
    assert audio.shape == (1, 4 * codec.samples_per_frame) and float(audio.abs().max()) > 0.01
    assert ("codec: compiling the torch decoder failed (RuntimeError: InvalidCxxCompiler: No working C++ compiler "
            "found); decoding uncompiled") in caplog.text


def test_a_compile_that_loses_the_device_stops_the_start(codec_path, monkeypatch, caplog):
    """Not a compiler failure: an uncompiled decode would fail on that device as well."""

    def lost(fn, **kwargs):
        def compiled(*args):
            raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered")
        return compiled

    monkeypatch.setattr(torch, "compile", lost)
    caplog.set_level(logging.INFO, logger="codec_worker.nanocodec")
    with pytest.raises(torch.AcceleratorError, match="illegal memory access"):
        compile_decoder(small_codec(codec_path), 2, 8)
    assert "decoding uncompiled" not in caplog.text


def test_nemos_decoder_is_not_compiled_and_says_so(codec: NanoCodec, caplog):
    caplog.set_level(logging.WARNING, logger="codec_worker.nanocodec")
    assert not compile_decoder(codec, 2, 8)
    assert "compiling applies to the torch decoder only (GEPARD_CODEC_IMPL=torch)" in caplog.text
    assert np.isfinite(codec.decode_codes(random_codes(2, batch=1)).numpy()).all()
