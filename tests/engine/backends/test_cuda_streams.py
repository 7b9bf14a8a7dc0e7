"""The engine's CUDA stream and its priority (engine.backends.cuda_graphs.new_engine_stream,
GEPARD_TORCH_STREAM_PRIORITY): made at high priority by default, above the codec's stream, so
that on a GPU a decode step's small kernels start before a replayed codec decode's queued ones.
The CUDA case runs in part 0 of bench/gpu_session.sh."""

from __future__ import annotations

import pytest
import torch

from engine.backends import cuda_graphs


def test_the_engine_stream_is_made_at_its_priority(monkeypatch):
    """On CUDA the engine's stream is made at high priority by default (torch's lower number runs
    first: above the codec's stream, made at 0), at normal on request; on CPU there is none. (No
    CUDA runtime here: the stream's constructor is recorded instead.)"""
    made = []
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None, priority=0: made.append((device, priority)) or "stream")
    cuda = torch.device("cuda", 0)
    assert cuda_graphs.new_engine_stream(cuda) == cuda_graphs.new_engine_stream(cuda, "normal") == "stream"
    assert made == [(cuda, -1), (cuda, 0)]
    assert cuda_graphs.new_engine_stream(torch.device("cpu")) is None and len(made) == 2
    with pytest.raises(ValueError, match="unknown stream priority 'low'; expected one of high, normal"):
        cuda_graphs.new_engine_stream(cuda, "low")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: part 0 of bench/gpu_session.sh runs it")
def test_on_cuda_the_engine_stream_outranks_the_codecs() -> None:
    """The device's own word: the default (high) stream's priority runs before a normal one's,
    which is what the codec's stream (made with torch's default) gets."""
    cuda = torch.device("cuda")
    high, normal = cuda_graphs.new_engine_stream(cuda), cuda_graphs.new_engine_stream(cuda, "normal")
    assert high.priority < normal.priority == torch.cuda.Stream(device=cuda).priority
