"""bench/pipeline.py: a stream takes the engine's frames as the gateway's does (a codec chunk at a
time, on the tiny engine and the torch codec), a burst's figures (interpolated percentiles over the
streams that were heard, the rest failed), the one-stream headline pooled over its bursts, and its
JSON written after every row, so a run cut by SIGINT (bench/gpu_session.sh's cap) keeps its rows."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from bench.pipeline import Probe, Row, StreamResult, fmt, headline, one_stream, predicted_burst_s, summarise

ROOT = Path(__file__).resolve().parents[1]


# -- a stream asks the engine for frames as SynthesisService.speak does ------------------------------------
@pytest.fixture(scope="module")
def torch_codec(tmp_path_factory: pytest.TempPathFactory):
    """The tiny random codec, decode only (the torch decoder: seconds, where NeMo's takes ~20 s here)."""
    from codec_worker.nanocodec import load_codec
    from codec_worker.torchcodec.random import write_random_decoder_codec

    path = tmp_path_factory.mktemp("codec") / "nanocodec.nemo"
    write_random_decoder_codec(path, size="tiny")
    return load_codec(path, device="cpu", dtype=torch.float32, impl="torch")


async def test_a_stream_takes_the_engines_frames_a_codec_chunk_at_a_time_as_speak_does(tiny_model, torch_codec):
    from codec_worker.batching import BatchingCodecDecoder
    from engine.backends.torch_backend import TorchEngine, TorchEngineConfig

    engine = TorchEngine(tiny_model, TorchEngineConfig(max_batch=2))
    requests, sizes = [], []
    generate = engine.generate

    async def watched(request):  # the real engine's frames, with what was asked and what came noted
        requests.append(request)
        async for chunk in generate(request):
            sizes.append(chunk.num_frames)
            yield chunk

    engine.generate = watched
    decoder = BatchingCodecDecoder(torch_codec, schedule=(4, 8))
    try:
        result = await one_stream(engine, decoder, "r1", 0, 24, torch_codec.sample_rate_hz)
    finally:
        await decoder.aclose()
        await engine.aclose()
    assert requests[0].delivery == decoder.schedule.sizes == (4, 8)  # api/synthesis.py speak() passes it too
    # 24 frames (the tiny checkpoint stops there) handed over at the schedule's boundaries (4, 12, 20, ...;
    # more at once when the codec lags), not one by one
    frames = [n for n in sizes if n]
    assert sum(frames) == 24 and frames[0] >= 4 and min(frames[:-1]) >= 4 and len(frames) <= 4, sizes
    assert result.audio_s > 0 and result.ttfa_s >= result.ttff_s > 0


# -- a burst's figures ---------------------------------------------------------------------------------
class _NoGpu:
    def device_gib(self):
        return None

    def torch_gib(self):
        return None


ARGS = argparse.Namespace(backend="torch", size="tiny", frames=100)


def test_a_stream_without_audio_fails_and_the_percentiles_rest_on_the_others():
    heard = [StreamResult(ttff_s=0.005, ttfa_s=0.010, total_s=1.0, audio_s=4.0, underrun_s=0.0),
             StreamResult(ttff_s=0.015, ttfa_s=0.020, total_s=3.0, audio_s=4.0, underrun_s=0.1)]
    silent = StreamResult(ttff_s=math.nan, ttfa_s=math.nan, total_s=0.0, audio_s=0.0, underrun_s=0.0)
    row = summarise(ARGS, "fast", "2,4,8,32", 3, 2.0, [heard[0], silent, heard[1]], Probe(), _NoGpu())
    assert (row.n, row.failed) == (2, 1)
    # interpolated: the p50 of two samples is their mean, not the smaller one
    assert row.ttfa_p50_ms == pytest.approx(15.0) and row.ttfa_p99_ms == pytest.approx(19.9)
    assert row.ttff_p50_ms == pytest.approx(10.0)
    assert row.rtf_p50 == pytest.approx(0.5)  # (0.25 + 0.75) / 2: the silent stream's 0 is not a score
    assert row.underrun_p99_ms == pytest.approx(99.0)
    assert row.xrt == pytest.approx(4.0)  # every stream's audio over the burst's wall time
    line = fmt(row)
    assert line.split()[:3] == ["2,4,8,32", "3", "2"] and line.endswith("FAILED: 1 stream(s) without audio")


def _row(c: int, ttfa: float, rtf: float, schedule: str = "2,4,8,32", n: int = 1, failed: int = 0) -> Row:
    return Row("torch", "fast", "full", schedule, c, 200, 1.0, 10.0, rtf, rtf, ttfa, ttfa, ttfa / 2, 0.0, 0.0, 1.0,
               1.0, 10, 0.1, 0.1, n=n, failed=failed)


def test_the_one_stream_headline_pools_every_burst_at_one_stream():
    from bench.pipeline import one_stream_figures

    rows = [_row(1, 30.0, 0.05), _row(1, 10.0, 0.01), _row(1, 12.0, 0.02), _row(1, 50.0, 0.04),
            _row(1, math.nan, 0.0, n=0, failed=1),  # a burst whose stream was not heard: no sample
            _row(1, 1.0, 0.001, schedule="8,32"),  # another schedule: the first-audio comparison only
            _row(8, 40.0, 0.3, n=8)]
    head = headline(rows)
    one = head["one_stream"]
    # p50s of the four bursts heard (ttfa 10, 12, 30, 50 ms): not the first burst's figure alone
    assert (one["ttfa_ms"], one["ttff_ms"], one["rtf"]) == pytest.approx((21.0, 10.5, 0.03))
    assert (one["schedule"], one["n"], one["failed"]) == ("2,4,8,32", 4, 1)
    assert one_stream_figures([r for r in rows if r.concurrency == 8]) is None
    assert head["max_realtime_concurrency"] == 8
    # a level with a stream that was never heard is not one that kept every stream real time
    assert headline([*rows[:4], replace(rows[-1], failed=1)])["max_realtime_concurrency"] == 1


# -- a run cut short keeps what it measured ----------------------------------------------------------------
def test_a_run_cut_by_sigint_keeps_the_rows_it_printed(tmp_path):
    """bench/gpu_session.sh stops a part at its cap with SIGINT (timeout --signal=INT): the rows
    measured by then must already be in --json."""
    out = tmp_path / "gpu-torch.json"
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "GEPARD_BENCH_DIR": str(tmp_path / "bench")}
    proc = subprocess.Popen([sys.executable, "bench/pipeline.py", "--size", "tiny", "--codec", "no", "--concurrency",
                             "1", "--rounds", "1000", "--frames", "8", "--checkpoint", str(tmp_path / "ckpt"),
                             "--json", str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "".join(lines)  # ended before its first row
            lines.append(line)
            if line.split()[:3] == ["no", "codec", "1"]:  # the first row (schedule "no codec", C=1)
                break
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    result = json.loads(out.read_text())
    assert result["rows"] and all(r["concurrency"] == 1 and r["n"] == 1 for r in result["rows"]), result
    assert len(result["rows"]) < 1000  # cut, not finished
    assert result["one_stream"]["n"] == len(result["rows"])
    assert not out.with_name(out.name + ".part").exists()
    # what the engine ran, from its own description: on CPU the reference loop, no graphs, no kernels
    assert (result["runner"], result["engine_cuda_graphs"], result["torch_fused_kernels"]) == ("reference", False, False)


def test_the_budget_predicts_bursts_sublinearly_from_few_streams_and_linearly_from_many():
    # the H200's figures: one stream's burst took 0.67 s, 128 streams' 5.1 s, 256 streams' 10.3 s
    from_one = predicted_burst_s(1, 0.67, 128)
    assert 5.1 < from_one < 0.67 * 128  # not the 103 s that once skipped a level that took 5
    assert from_one == pytest.approx(0.67 * 128 ** 0.5 * 1.2)
    assert predicted_burst_s(128, 5.1, 256) == pytest.approx(5.1 * 2 * 1.2)  # the device is full: linear
    assert predicted_burst_s(16, 2.0, 32) == pytest.approx(4.8)
