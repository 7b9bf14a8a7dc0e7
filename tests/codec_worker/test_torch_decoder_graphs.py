"""The torch decoder as CUDA graphs (GEPARD_CODEC_CUDA_GRAPHS), the logic around the capture, on CPU.

A CUDA graph needs a GPU; what surrounds it does not, and is what can go wrong: which shapes are
captured, how a decode is padded into a captured shape's buffers and cut back out, that a result
survives the next decode through the same buffers, that larger decodes fall back to the eager
decoder, and that nothing is captured where no graph can run. Here the capture step is a stand-in
that runs the body (the only thing this machine cannot do is record it); the real capture ran on an
H200 in bench/torch_codec.py --graphs (see README, "On a GPU").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import numpy as np
import pytest
import torch

from codec_worker.batching import BatchingCodecDecoder
from codec_worker.nanocodec import NanoCodec, capture_decoder_graphs, decodes_better_with_torch, decoding_codec
from codec_worker.torchcodec import TorchNanoCodec
from codec_worker.torchcodec.codec import cuda_graph_capture
from tests.codec_worker.conftest import random_codes
from tests.codec_worker.test_torch_decoder import TOLERANCE, _max_diff, _stream
from tests.codec_worker.test_torch_decoder_compiled import assert_eager_audio, small_codec
from tests.recorded_graph import simulated_cuda_graphs

LOST = "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported"

MAX_BATCH = 4
MAX_FRAMES = 16


class RecordingCapture:
    """Stands in for cuda_graph_capture: "records" a body by keeping it; a replay runs it."""

    def __init__(self) -> None:
        self.captured = 0
        self.replays = 0

    def __call__(self, body: Callable[[], None]) -> Callable[[], None]:
        self.captured += 1
        body()  # as the real capture warms up: the body runs once before it is recorded

        def replay() -> None:
            self.replays += 1
            body()

        return replay


@pytest.fixture(scope="module")
def eager_codec(codec_path: Path) -> TorchNanoCodec:
    return small_codec(codec_path)


@pytest.fixture()
def graphed(eager_codec: TorchNanoCodec) -> tuple[TorchNanoCodec, RecordingCapture]:
    codec = TorchNanoCodec(eager_codec.config, eager_codec._decoder, fingerprint="small", device=eager_codec.device,
                           dtype=eager_codec.dtype)
    capture = RecordingCapture()
    assert codec.capture_graphs(MAX_BATCH, MAX_FRAMES, capture=capture) == 3 * 5  # batches 1, 2, 4 x widths 1 .. 16
    assert capture.captured == 15 and capture.replays == 0
    assert codec.graph_shapes == [(b, w) for b in (1, 2, 4) for w in (1, 2, 4, 8, 16)]
    assert eager_codec.graph_shapes == []
    return codec, capture


@pytest.mark.parametrize("batch, frames, replayed", [(1, 1, True), (1, 13, True), (3, 11, True), (4, 16, True),
                                                     (2, 7, True), (5, 9, False), (2, 30, False)])
def test_a_replayed_decode_gives_the_eager_audio(eager_codec, graphed, batch: int, frames: int, replayed: bool) -> None:
    codec, capture = graphed
    codes = random_codes(frames, batch=batch, seed=batch * 100 + frames)
    lengths = [frames] + [max(1, frames - 3 * i) for i in range(1, batch)]  # right-padded rows
    got = codec.decode_codes(codes, lengths=lengths)
    # shapes past the largest captured one (5 windows, 30 frames) decode eagerly
    assert capture.replays == (1 if replayed else 0)
    assert_eager_audio(got, eager_codec.decode_codes(codes, lengths=lengths), lengths, eager_codec.samples_per_frame)


def test_a_decode_is_not_overwritten_by_the_next_one_through_the_same_graph(eager_codec, graphed) -> None:
    codec, capture = graphed
    first_codes, second_codes = random_codes(6, batch=2, seed=1), random_codes(7, batch=2, seed=2)  # both (2, 8)
    first = codec.decode_codes(first_codes)
    kept = first.clone()
    second = codec.decode_codes(second_codes)
    assert capture.replays == 2
    assert torch.equal(first, kept)
    assert _max_diff(first, eager_codec.decode_codes(first_codes)) <= TOLERANCE
    assert _max_diff(second, eager_codec.decode_codes(second_codes)) <= TOLERANCE


def test_a_short_window_after_a_long_one_reads_none_of_its_frames(eager_codec, graphed) -> None:
    """Both pad into the (1, 16) shape: the frames the long window left in its buffer lie past the
    short one's, where a causal decoder never looks, and its output is cut before them."""
    codec, _ = graphed
    codec.decode_codes(random_codes(16, batch=1, seed=3))
    short = random_codes(9, batch=1, seed=4)
    assert _max_diff(codec.decode_codes(short), eager_codec.decode_codes(short)) <= TOLERANCE


async def test_streams_through_the_graphs_join_into_the_whole_utterance(eager_codec, graphed) -> None:
    codec, capture = graphed
    utterances = [random_codes(frames, seed=80 + i) for i, frames in enumerate([50, 17, 3])]
    pushes = [[1] * 50, [5, 5, 7], [3]]
    async with BatchingCodecDecoder(codec, max_batch=3, schedule="2,4") as decoder:
        assert decoder.max_window_frames <= MAX_FRAMES  # every window replayed
        results = [await _stream(decoder, c, p) for c, p in zip(utterances, pushes)]
    assert capture.replays > 0 and capture.captured == 15  # nothing captured while serving
    for codes, got in zip(utterances, results):
        whole = eager_codec.decode_codes(codes.unsqueeze(0))[0].numpy()
        assert got.shape == whole.shape and _max_diff(got, whole) <= TOLERANCE


class _Stream:
    """torch.cuda.Stream's part cuda_graph_capture uses; on one CPU thread, work is in order anyway."""

    def __init__(self, device=None) -> None:
        pass

    def wait_stream(self, other) -> None:
        pass


def _recorded_cuda(eager_codec: TorchNanoCodec, monkeypatch):
    """CUDA graphs as tests/recorded_graph.py models them, and a fresh codec on the eager one's decoder."""
    sim = simulated_cuda_graphs(monkeypatch)
    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _Stream())
    codec = TorchNanoCodec(eager_codec.config, eager_codec._decoder, fingerprint="small", device=eager_codec.device,
                           dtype=eager_codec.dtype)
    return sim, codec


def test_the_cuda_capture_records_decodes_that_replay_the_eager_audio(eager_codec, monkeypatch) -> None:
    """cuda_graph_capture itself, under tests/recorded_graph.py's model of capture and replay: a
    replay re-runs only the kernels the capture recorded, on the memory they used, with every
    Python value as it was at capture; so a decode that read anything but its buffers (a length
    taken on the host, a tensor made fresh each call) would give the capture's audio, not its own."""
    sim, codec = _recorded_cuda(eager_codec, monkeypatch)
    assert codec.capture_graphs(2, 8, capture=cuda_graph_capture(torch.device("cuda"))) == 2 * 4
    assert len(sim.graphs) == 8 and all(g.ops for g in sim.graphs) and not any(g.replays for g in sim.graphs)
    spf = eager_codec.samples_per_frame
    for batch, lengths in [(1, [3]), (2, [8, 5]), (1, [1]), (2, [7, 7]), (1, [4])]:
        codes = random_codes(max(lengths), batch=batch, seed=sum(lengths) + batch)
        got = codec.decode_codes(codes, lengths=lengths)
        assert_eager_audio(got, eager_codec.decode_codes(codes, lengths=lengths), lengths, spf)
    assert sum(g.replays for g in sim.graphs) == 5


async def test_streams_carrying_state_replay_their_own_graphs(eager_codec) -> None:
    """With carry_state, the chunks of streams that hold a state slot replay graphs of their own
    (one per padded shape up to the largest chunk); the audio is still the whole utterance's."""
    codec = TorchNanoCodec(eager_codec.config, eager_codec._decoder, fingerprint="small", device=eager_codec.device,
                           dtype=eager_codec.dtype)
    codec.carry_state(2)
    capture = RecordingCapture()
    assert codec.capture_graphs(MAX_BATCH, MAX_FRAMES, capture=capture, max_chunk_frames=8) == 15 + 3 * 4
    assert codec.state_graph_shapes == [(b, w) for b in (1, 2, 4) for w in (1, 2, 4, 8)]
    # the two kinds of graph share capture's memory pool: one lock orders all their replays
    assert codec._graphs._lock is codec._state_graphs._lock
    utterances = [random_codes(frames, seed=90 + i) for i, frames in enumerate([30, 17, 9])]
    pushes = [[1] * 30, [5, 5, 7], [9]]
    async with BatchingCodecDecoder(codec, max_batch=3, schedule="2,4,8") as decoder:
        results = await asyncio.gather(*(_stream(decoder, c, p) for c, p in zip(utterances, pushes)))
    assert decoder.windowed_streams == 1  # three streams, two slots: one decoded windowed
    assert capture.replays > 0 and capture.captured == 27  # nothing captured while serving
    for codes, got in zip(utterances, results):
        whole = eager_codec.decode_codes(codes.unsqueeze(0))[0].numpy()
        assert got.shape == whole.shape and _max_diff(got, whole) <= TOLERANCE


def test_the_cuda_capture_of_stateful_decodes_reads_slots_and_flags_from_its_buffers(eager_codec, monkeypatch) -> None:
    """Under the recorded-graph model: a replayed stateful decode must read each row's slot, its
    length and whether it starts its stream from the shape's buffers, and write the tails back
    inside the graph; otherwise the chunks would not join into each stream's one-shot audio."""
    sim, codec = _recorded_cuda(eager_codec, monkeypatch)
    codec.carry_state(3)
    assert codec.capture_graphs(2, 4, capture=cuda_graph_capture(torch.device("cuda")), max_chunk_frames=4) == 6 + 6
    utterances = [random_codes(11, seed=21), random_codes(9, seed=22)]
    # (rows as (stream, frames)); stream 1 sits out the second call and starts late on another slot
    calls = [[(0, 2)], [(0, 4)], [(0, 3), (1, 4)], [(1, 1), (0, 2)], [(1, 4)]]
    at, pieces, spf = [0, 0], [[], []], eager_codec.samples_per_frame
    for rows in calls:
        lengths = [n for _, n in rows]
        codes = torch.zeros(len(rows), 32, max(lengths), dtype=torch.long)
        for i, (s, n) in enumerate(rows):
            codes[i, :, :n] = utterances[s][:, at[s] : at[s] + n]
        audio = codec.decode_stateful(codes, lengths, [2 - s for s, _ in rows], [at[s] == 0 for s, _ in rows])
        for i, (s, n) in enumerate(rows):
            pieces[s].append(audio[i, : n * spf].numpy())
            at[s] += n
    assert sum(g.replays for g in sim.graphs) == len(calls)
    for s, codes in enumerate(utterances):
        whole = eager_codec.decode_codes(codes[:, : at[s]].unsqueeze(0))[0].numpy()
        assert _max_diff(np.concatenate(pieces[s]), whole) <= TOLERANCE


def failing_stateful_capture(eager_codec: TorchNanoCodec, error: BaseException
                             ) -> tuple[TorchNanoCodec, RecordingCapture, Callable[[Callable[[], None]], Callable[[], None]]]:
    """A codec carrying state for 2 streams, and a capture that records the 15 windowed shapes of
    MAX_BATCH x MAX_FRAMES and raises ``error`` at the first stateful one."""
    codec = TorchNanoCodec(eager_codec.config, eager_codec._decoder, fingerprint="small", device=eager_codec.device,
                           dtype=eager_codec.dtype)
    codec.carry_state(2)
    recording = RecordingCapture()

    def capture(body: Callable[[], None]) -> Callable[[], None]:
        if recording.captured == 15:
            raise error
        return recording(body)

    return codec, recording, capture


def test_stateful_decodes_that_fail_to_capture_run_eagerly_beside_the_windowed_graphs(eager_codec, caplog) -> None:
    refused = RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore detail")
    codec, recording, capture = failing_stateful_capture(eager_codec, refused)
    with caplog.at_level(logging.ERROR, logger="codec_worker.torchcodec.codec"):
        assert codec.capture_graphs(MAX_BATCH, MAX_FRAMES, capture=capture, max_chunk_frames=8) == 15
    assert len(codec.graph_shapes) == 15 and codec.state_graph_shapes == []
    assert ("capturing the stateful decodes as CUDA graphs failed (RuntimeError: CUDA error: operation not permitted "
            "when stream is capturing); they run eagerly, windowed decodes replay their 15 graphs") in caplog.text
    codes = random_codes(6, batch=1, seed=3)
    first = codec.decode_stateful(codes[:, :, :2], [2], [0], [True])  # eager, carrying state
    second = codec.decode_stateful(codes[:, :, 2:], [4], [0], [False])
    whole = eager_codec.decode_codes(codes)
    assert _max_diff(torch.cat([first, second], dim=1).numpy(), whole.numpy()) <= TOLERANCE
    replays = recording.replays
    codec.decode_codes(codes)
    assert recording.replays == replays + 1  # a windowed decode still replays


def test_stateful_decodes_that_lose_the_device_while_capturing_raise(eager_codec, caplog) -> None:
    codec, _, capture = failing_stateful_capture(eager_codec, torch.AcceleratorError(LOST))  # not refused: gone
    with caplog.at_level(logging.ERROR, logger="codec_worker.torchcodec.codec"):
        with pytest.raises(torch.AcceleratorError, match="illegal memory access"):
            codec.capture_graphs(MAX_BATCH, MAX_FRAMES, capture=capture, max_chunk_frames=8)
    assert "they run eagerly" not in caplog.text
    # the windowed graphs captured before the loss are not kept: nothing replays on the lost context
    assert codec.graph_shapes == [] and codec.state_graph_shapes == []


def test_there_is_nothing_to_capture_on_a_cpu_codec(eager_codec, caplog) -> None:
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device; this codec is on cpu"):
        eager_codec.capture_graphs(2, 8)
    caplog.set_level(logging.DEBUG, logger="codec_worker.nanocodec")
    assert not capture_decoder_graphs(eager_codec, 2, 8)  # the gateway's call: a no-op on CPU
    assert eager_codec.graph_shapes == []
    assert "codec: on cpu, no CUDA graphs to capture" in caplog.text


def test_a_capture_that_fails_leaves_the_decoder_decoding_eagerly(codec_path, monkeypatch, caplog) -> None:
    codec = small_codec(codec_path)
    codec.device = torch.device("cuda")  # only checked, never used: the capture fails first

    def no_graphs(device):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore detail")

    monkeypatch.setattr("codec_worker.torchcodec.codec.cuda_graph_capture", no_graphs)
    caplog.set_level(logging.INFO, logger="codec_worker.nanocodec")
    assert not capture_decoder_graphs(codec, 2, 8)
    assert codec.graph_shapes == []
    assert ("codec: capturing the torch decoder as CUDA graphs failed (RuntimeError: CUDA error: operation not "
            "permitted when stream is capturing); decoding eagerly") in caplog.text
    codec.device = torch.device("cpu")
    audio = codec.decode_codes(random_codes(4, batch=1))
    assert audio.shape == (1, 4 * codec.samples_per_frame) and float(audio.abs().max()) > 0.01


def test_a_capture_that_loses_the_device_stops_the_start(codec_path, monkeypatch, caplog) -> None:
    """An eager decode could not run on that device either: serving "eagerly" would only move the
    failure to every request's first chunk. The gateway's start fails instead (api.app)."""
    codec = small_codec(codec_path)
    codec.device = torch.device("cuda")  # only checked, never used: the capture fails first

    def lost(device):
        raise torch.AcceleratorError(LOST)

    monkeypatch.setattr("codec_worker.torchcodec.codec.cuda_graph_capture", lost)
    caplog.set_level(logging.INFO, logger="codec_worker.nanocodec")
    with pytest.raises(torch.AcceleratorError, match="illegal memory access"):
        capture_decoder_graphs(codec, 2, 8)
    assert "decoding eagerly" not in caplog.text


def test_nemos_decoder_is_not_captured_and_says_so(codec: NanoCodec, caplog) -> None:
    caplog.set_level(logging.INFO, logger="codec_worker.nanocodec")
    assert not capture_decoder_graphs(codec, 2, 8)
    assert "CUDA graphs apply to the torch decoder only (GEPARD_CODEC_IMPL=torch)" in caplog.text
    assert np.isfinite(codec.decode_codes(random_codes(2, batch=1)).numpy()).all()


@pytest.mark.parametrize("impl, loaded, device, graphs, expected", [
    ("auto", "nemo", "cuda", True, True),  # the gateway's GPU default: NeMo encodes, the torch decoder replays
    ("nemo", "nemo", "cuda", True, False),  # asked for NeMo by name: NeMo decodes
    ("auto", "nemo", "cpu", True, False),  # nothing to replay on CPU
    ("auto", "nemo", "cuda", False, False),  # graphs off: no reason to load a second decoder
    ("auto", "torch", "cuda", True, False),  # the torch decoder already decodes
])
def test_on_cuda_nemos_codec_decodes_through_the_torch_decoder_only_where_it_can_replay(impl, loaded, device, graphs,
                                                                                         expected) -> None:
    codec = SimpleNamespace(impl=loaded, device=torch.device(device))
    assert decodes_better_with_torch(impl, codec, graphs) is expected


def test_a_torch_decoder_that_does_not_load_leaves_nemo_decoding(tmp_path, caplog) -> None:
    """The GPU default loads the torch decoder beside NeMo's codec; where it cannot (here: no
    checkpoint at all), NeMo's decoder decodes and the server starts as before, with a WARNING."""
    nemo_on_cuda = SimpleNamespace(impl="nemo", device=torch.device("cuda"), dtype=torch.bfloat16)
    caplog.set_level(logging.WARNING, logger="codec_worker.nanocodec")
    assert decoding_codec(nemo_on_cuda, tmp_path / "missing.nemo", "auto", graphs=True) is nemo_on_cuda
    assert "the torch decoder did not load beside NeMo's codec (CodecNotFoundError" in caplog.text
    assert "NeMo's decoder decodes, eagerly" in caplog.text


def test_where_nemo_decodes_anyway_nothing_else_is_loaded(codec: NanoCodec, codec_path) -> None:
    assert decoding_codec(codec, codec_path, "auto", graphs=True) is codec  # on CPU: NeMo decodes
    assert decoding_codec(codec, codec_path, "nemo", graphs=True) is codec


def test_the_batching_decoder_describes_the_decoder_and_the_speed_ups_it_runs(codec: NanoCodec, eager_codec, graphed,
                                                                              codec_path: Path) -> None:
    """What the gateway logs at start and exports as gepard_codec_info: NeMo's decoder has none of
    the speed-ups; the torch decoder says which are on (here: CUDA graphs, by the CPU stand-in for
    capture; carried state). Fused activations need Triton (test_fused_activations counts them)."""
    from codec_worker.interface import CodecDescription

    assert BatchingCodecDecoder(codec).description == CodecDescription("nemo", "cpu", "float32", False, False, False,
                                                                       False)
    assert BatchingCodecDecoder(eager_codec).description == CodecDescription("torch", "cpu", "float32", False, False,
                                                                             False, False)
    assert BatchingCodecDecoder(graphed[0]).description.cuda_graphs is True
    carrying = small_codec(codec_path)
    carrying.carry_state(2)
    assert BatchingCodecDecoder(carrying).description == CodecDescription("torch", "cpu", "float32", True, False, False,
                                                                          False)
    assert BatchingCodecDecoder(carrying, carry_state=False).description.carry_state is False  # streams decode windowed
