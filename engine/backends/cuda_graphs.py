"""The CUDA-only parts of the fast path, kept apart so the rest runs (and is tested) on CPU.

- ``StepGraphs``: one CUDA graph per (batch bucket, span bucket) of the decode step, captured on
  first use (or by ``capture``) and replayed after; all graphs share one memory pool (they run
  one at a time on the engine's stream, and keep nothing alive between replays).
- ``HostCopy``: device -> host copy of a step's results; on CUDA into pinned memory with
  ``non_blocking`` and an event, so the step's only host synchronisation is waiting for that copy
  (the fast path keeps two, so that with overlapped steps one step's copy never lands in the
  buffer the host is still reading).
- ``TableUpload``: host -> device copy of a bucket's row tables through pinned staging.
- ``engine_stream``: the engine's own CUDA stream, so the codec decoding on the default stream
  overlaps generation instead of queueing behind it.

Every class takes the device and does the plain (synchronous) thing when it is not CUDA.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Callable, Iterator, Optional

import torch

from engine.backends.fast_step import HostRows, RowTables

logger = logging.getLogger(__name__)


def is_cuda(device: torch.device) -> bool:
    return device.type == "cuda"


#: the engine stream's priority (GEPARD_TORCH_STREAM_PRIORITY); torch's: lower runs first
STREAM_PRIORITIES = {"high": -1, "normal": 0}


def new_engine_stream(device: torch.device, priority: str = "high") -> Optional["torch.cuda.Stream"]:
    """The engine's own CUDA stream; None on CPU. ``high`` puts it above every stream of normal
    priority, the codec's included: when SMs free up, the GPU's block scheduler starts the
    engine's waiting blocks before the codec's. A decode step is a chain of small kernels, each of
    which otherwise waits behind the codec's large ones: on the H200 at 256 streams, with the
    codec replayed as CUDA graphs (a decode's kernels queued at once), steps took 40.8 ms p50,
    nearly the 46 ms of audio they make, against 6.8 ms with the codec eager (its kernels
    launched one by one). The codec's throughput barely changes when a few small kernels go
    first. CUDA graphs replayed on the stream run at its priority."""
    if priority not in STREAM_PRIORITIES:
        raise ValueError(f"unknown stream priority {priority!r}; expected one of {', '.join(STREAM_PRIORITIES)}")
    return torch.cuda.Stream(device=device, priority=STREAM_PRIORITIES[priority]) if is_cuda(device) else None


@contextlib.contextmanager
def on_stream(stream: Optional["torch.cuda.Stream"]) -> Iterator[None]:
    """Run the block on ``stream`` (CUDA), after what the default stream queued so far (the
    prompts' embeddings are computed there, by the engine's worker before it adds a request); a
    no-op on CPU."""
    if stream is None:
        yield
        return
    stream.wait_stream(torch.cuda.default_stream(stream.device))
    with torch.cuda.stream(stream):
        yield


class HostCopy:
    """Results of a step ([rows, cols] int64) to the host, with one wait."""

    def __init__(self, rows: int, cols: int, device: torch.device) -> None:
        self.cuda = is_cuda(device)
        self.buffer = torch.zeros(rows, cols, dtype=torch.int64, pin_memory=self.cuda)
        self.event = torch.cuda.Event() if self.cuda else None
        self.rows = 0

    def start(self, src: torch.Tensor) -> None:
        self.rows = src.shape[0]
        self.buffer[: self.rows].copy_(src, non_blocking=self.cuda)
        if self.event is not None:
            self.event.record()

    def wait(self) -> torch.Tensor:
        if self.event is not None:
            self.event.synchronize()
        return self.buffer[: self.rows]


class TableUpload:
    """Writes a HostRows image into a bucket's RowTables (pinned staging + non_blocking on CUDA).

    The staging buffer is reused: before it is written again, the host waits for the copies out
    of it that the last upload queued (an event; with overlapped steps the stream may not have
    reached them yet)."""

    def __init__(self, rows: int, device: torch.device) -> None:
        self.cuda = is_cuda(device)
        self.ints = torch.zeros(5, rows, dtype=torch.int64, pin_memory=self.cuda)
        # the bool columns (real, commit) get pinned staging of their own: a .bool() of the ints
        # would be a pageable temporary, whose copy makes the host wait for the stream
        self.flags = torch.zeros(2, rows, dtype=torch.bool, pin_memory=self.cuda)
        self.floats = torch.zeros(rows, dtype=torch.float32, pin_memory=self.cuda)
        self.copied = torch.cuda.Event() if self.cuda else None

    def __call__(self, tables: RowTables, rows: HostRows) -> None:
        ints, floats = rows.packed()
        b = tables.rows
        if self.copied is not None:
            self.copied.synchronize()  # a no-op before the first record
        self.ints[:, :b].copy_(ints)
        self.flags[:, :b].copy_(ints[2:4])  # on the host: 0/1 -> False/True
        self.floats[:b].copy_(floats)
        nb = self.cuda
        tables.slot.copy_(self.ints[0, :b], non_blocking=nb)
        tables.feed.copy_(self.ints[1, :b], non_blocking=nb)
        tables.real.copy_(self.flags[0, :b], non_blocking=nb)
        tables.commit.copy_(self.flags[1, :b], non_blocking=nb)
        tables.uncond.copy_(self.ints[4, :b], non_blocking=nb)
        tables.cfg_scale.copy_(self.floats[:b], non_blocking=nb)
        if self.copied is not None:
            self.copied.record()


class StepGraphs:
    """Captured decode steps keyed by (bucket, span); CUDA only."""

    def __init__(self, device: torch.device, what: str = "the decode step for batch bucket %d, span %d") -> None:
        if not is_cuda(device):
            raise ValueError(f"CUDA graphs need a CUDA device, not {device}")
        self.device = device
        self.what = what  # the log's name for a captured shape, formatted with its key
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs: dict[tuple[int, int], "torch.cuda.CUDAGraph"] = {}

    def __contains__(self, key: tuple[int, int]) -> bool:
        return key in self.graphs

    def replay(self, key: tuple[int, int], step: Callable[[], None], tables: RowTables) -> None:
        graph = self.graphs.get(key)
        if graph is None:
            graph = self.capture(key, step, tables)
        graph.replay()

    def capture(self, key: tuple[int, int], step: Callable[[], None], tables: RowTables) -> "torch.cuda.CUDAGraph":
        """Capture ``step`` over ``tables``. The warm-up run before capture really executes, so
        it runs with every row turned into padding (it then touches only the scratch slot); the
        tables' real contents are put back afterwards, also when the capture fails (the caller
        may then run the step eagerly over them)."""
        stream = torch.cuda.current_stream(self.device)
        columns = (tables.slot, tables.feed, tables.real, tables.commit, tables.uncond, tables.cfg_scale)
        saved = [t.clone() for t in columns]
        try:
            tables.fill_padding()
            step()  # warm-up: lazy cuBLAS/attention initialisation happens outside the capture
            graph = torch.cuda.CUDAGraph()
            # thread_local: work another thread queues meanwhile (the codec decoding on its own stream,
            # a model loading) may not invalidate this capture, as it would in the default global mode
            with torch.cuda.graph(graph, pool=self.pool, stream=stream, capture_error_mode="thread_local"):
                step()
        finally:
            for dst, src in zip(columns, saved):
                dst.copy_(src)
        self.graphs[key] = graph
        logger.info("captured %s (%d graphs)", self.what % key, len(self.graphs))
        return graph


__all__ = ["STREAM_PRIORITIES", "HostCopy", "StepGraphs", "TableUpload", "is_cuda", "new_engine_stream", "on_stream"]
