"""A CPU model of CUDA graph capture and replay, for code that is never run on a GPU here.

A captured CUDA graph keeps the kernels a step launched, with the memory they read and wrote,
and replays just those: none of the step's Python runs again, every Python value it used is
the one it had at capture, and capture itself computes nothing. ``RecordedGraph`` does the same
with aten ops on CPU tensors:

- capture records every op the step dispatches (with its arguments: tensors by identity, Python
  values as they were) and afterwards restores every tensor the step wrote, since a capture
  runs no kernel;
- replay re-runs the recorded ops in order on the same tensors: ops that write in place run
  again, ops that make a new tensor write their result into the tensor made at capture (the
  graph's private memory), views are left alone (they alias memory already refreshed).

So a step whose result depends on anything but device memory (a Python number read from the
host each call, a tensor made fresh on the host) replays the capture-time value, as a GPU would.
``simulated_cuda_graphs`` puts these in place of torch.cuda's graph API for StepGraphs.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tests.stand_in_gpu import SYNCING, CaptureUnsafe

_GRAPH_CALL = inspect.signature(torch.cuda.graph.__init__)  # the real API's, read before any test patches it


@dataclass
class _Op:
    func: Any
    args: tuple
    kwargs: dict
    out: Any
    writes: bool  # the op writes one of its arguments
    view: bool  # the op returns an alias of an argument


def _writes(func) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)


def _returns_view(func) -> bool:
    return any(r.alias_info is not None for r in func._schema.returns)


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[_Op] = []
        self.saved: list[tuple[torch.Tensor, torch.Tensor]] = []  # (tensor written, its contents before)
        self.made: set[int] = set()  # ids of tensors made during the capture

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name in SYNCING:
            raise CaptureUnsafe(f"{name} waits for the device inside the captured step")
        writes = _writes(func)
        if writes:
            for a, value in zip(func._schema.arguments, list(args) + [kwargs.get(a.name) for a in func._schema.arguments[len(args):]]):
                if a.alias_info is not None and a.alias_info.is_write and isinstance(value, torch.Tensor) \
                        and id(value) not in self.made:
                    self.saved.append((value, value.clone()))
        out = func(*args, **kwargs)
        view = _returns_view(func)
        if not (writes or view):  # fresh memory (a view of a tensor from before shares that tensor's)
            self.made.update(id(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        self.ops.append(_Op(func, args, kwargs, out, writes, view))
        return out


class RecordedGraph:
    """Stands in for torch.cuda.CUDAGraph."""

    def __init__(self) -> None:
        self.ops: list[_Op] = []
        self.replays = 0

    def replay(self) -> None:
        with torch.no_grad():
            for op in self.ops:
                if op.writes:
                    op.func(*op.args, **op.kwargs)
                elif not op.view:
                    fresh = op.func(*op.args, **op.kwargs)
                    for dst, src in zip(tree_flatten(op.out)[0], tree_flatten(fresh)[0]):
                        if isinstance(dst, torch.Tensor):
                            dst.copy_(src)
        self.replays += 1


@contextlib.contextmanager
def _capture(*args: Any, **kwargs: Any) -> Iterator[None]:
    """Stands in for ``torch.cuda.graph(graph, pool=..., stream=..., capture_error_mode=...)``,
    taking exactly the arguments the real one takes."""
    call = _GRAPH_CALL.bind(None, *args, **kwargs)  # TypeError where torch.cuda.graph would raise one
    call.apply_defaults()
    if call.arguments["capture_error_mode"] not in ("global", "thread_local", "relaxed"):
        raise ValueError(f"unknown capture_error_mode {call.arguments['capture_error_mode']!r}")
    graph = call.arguments["cuda_graph"]
    recorder = _Recorder()
    with recorder:
        yield
    graph.ops = recorder.ops
    with torch.no_grad():
        for tensor, before in reversed(recorder.saved):  # a capture computes nothing
            tensor.copy_(before)


@dataclass
class SimulatedCuda:
    graphs: list[RecordedGraph] = field(default_factory=list)

    def new_graph(self) -> RecordedGraph:
        g = RecordedGraph()
        self.graphs.append(g)
        return g


def simulated_cuda_graphs(monkeypatch: pytest.MonkeyPatch) -> SimulatedCuda:
    """Make the torch fast path on CPU run as on CUDA with graphs: ``auto`` picks it, it captures
    its decode steps (StepGraphs, FastGenerator.capture_all) into RecordedGraphs and replays them.
    Streams, events and pinned memory stay CPU no-ops: they order work, which one CPU thread
    does anyway."""
    from engine.backends import cuda_graphs, torch_fast

    sim = SimulatedCuda()
    monkeypatch.setattr(torch.cuda, "CUDAGraph", sim.new_graph)
    monkeypatch.setattr(torch.cuda, "graph", _capture)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: object())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch_fast, "is_cuda", lambda device: True)
    monkeypatch.setattr(torch_fast, "new_engine_stream", lambda device, priority="high": None)
    monkeypatch.setattr(torch_fast, "StepGraphs", lambda device, **kw: cuda_graphs.StepGraphs(torch.device("cuda"), **kw))
    return sim


def record(step: Callable[[], None]) -> RecordedGraph:
    """Capture ``step`` into a RecordedGraph (for tests of the model itself)."""
    g = RecordedGraph()
    with _capture(g):
        step()
    return g


__all__ = ["RecordedGraph", "SimulatedCuda", "record", "simulated_cuda_graphs"]
