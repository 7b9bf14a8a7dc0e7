"""Batched streaming decode across many utterances, and the async encoder.

    decoder = BatchingCodecDecoder(codec, max_batch=32, schedule="2,4,8,32")  # borrows codec; owns a thread
    stream = decoder.open_stream()
    pcm = await stream.push(codes)    # codes [32, T] int64 -> pcm [N] float32 @ 22050 Hz
    pcm = await stream.finish()
    await stream.aclose()
    await decoder.aclose()

Each stream cuts exact decode windows (codec_worker.streaming) and queues them. ONE background
thread takes up to ``max_batch`` queued windows from any streams, groups them by width, and
decodes each group in one decoder call (right-padded, see streaming.decode_windows). Results go
back to the awaiting coroutine through ``loop.call_soon_threadsafe``, so the event loop never
blocks on the decoder. When a group's call fails, each of its windows is decoded alone, so only
the streams whose window fails again get the error (DecodeError); the others get their audio.

A codec that carries state (the torch decoder after ``carry_state``) gives each stream a state slot
while one is free: its windows hold no context, and a batch decodes each such stream's windows as one
row (streaming.decode_carried), in order. Streams that find every slot taken decode windowed, as
with any other codec.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, TypeVar

import numpy as np
import torch

from codec_worker.errors import CodecClosedError, CodecError, DecodeError, InvalidAudioError
from codec_worker.interface import CodecDecoder, CodecDescription, CodecEncoder, DecodeStream
from codec_worker.schedule import DEFAULT_SCHEDULE, ChunkSchedule, ScheduleLike
from codec_worker.streaming import DecodeWindow, StreamingDecodeState, decode_carried, decode_windows

if TYPE_CHECKING:
    from codec_worker.nanocodec import NanoCodec
    from codec_worker.torchcodec import ConvStateCache, TorchNanoCodec

logger = logging.getLogger(__name__)

_EMPTY = np.zeros(0, dtype=np.float32)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class DecodeBatchEvent:
    """One decoder call of the worker (for monitoring): its wall time and how many windows it decoded."""

    duration_s: float
    windows: int


#: Called on the decoder's worker thread after every successful decoder call; must be cheap and
#: thread-safe. An exception it raises is logged and ignored.
DecodeObserver = Callable[[DecodeBatchEvent], None]


@dataclass(eq=False, slots=True)
class _Job:
    """One window waiting for the worker, and where its audio goes."""

    stream_id: int
    window: DecodeWindow
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[np.ndarray]
    slot: Optional[int] = None  # the stream's state slot: its window holds no context (decode_carried)
    dropped: bool = field(default=False)  # set (under the decoder lock) when its stream is closed


def _settle(future: asyncio.Future[np.ndarray], result: np.ndarray | None, error: BaseException | None) -> None:
    """Runs on the future's loop: set the outcome unless the waiter already gave up."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


_Outcome = tuple[asyncio.Future[np.ndarray], Optional[np.ndarray], Optional[BaseException]]


def _settle_all(outcomes: list[_Outcome]) -> None:
    for future, result, error in outcomes:
        _settle(future, result, error)


def _deliver(jobs: list[_Job], results: Sequence[np.ndarray | None] | None = None,
             error: BaseException | None = None) -> None:
    """Settle the jobs' futures (each its result, or all the error) with one call into each event
    loop: a cross-thread call wakes its loop, and a batch holds a window of every busy stream."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
    for i, job in enumerate(jobs):
        by_loop.setdefault(job.loop, []).append((job.future, None if results is None else results[i], error))
    for loop, outcomes in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle_all, outcomes)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


def _decode_error(exc: Exception) -> CodecError:
    """What a window's waiter gets for a failed decode: a CodecError as is, anything else wrapped."""
    return exc if isinstance(exc, CodecError) else DecodeError(f"decoder failed: {exc}")


#: Jobs decoded as one row of a decoder call: one window, or a carried stream's consecutive windows.
_Row = list[_Job]


def _row_width(row: _Row) -> int:
    """Frames the row decodes: its window's (with context), or its carried windows' new frames."""
    return row[0].window.width if row[0].slot is None else sum(job.window.num_frames for job in row)


def group_by_width(rows: list[_Row], ratio: float = 2.0) -> list[list[_Row]]:
    """Split rows into decode groups whose widest row is at most ``ratio`` x the narrowest."""
    groups: list[list[_Row]] = []
    for row in sorted(rows, key=_row_width):
        if groups and _row_width(row) <= ratio * _row_width(groups[-1][0]):
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


def batch_rows(jobs: list[_Job]) -> tuple[list[_Row], list[_Row]]:
    """The rows of a batch: (windowed, carried). A windowed job is a row of its own; a carried
    stream's jobs make one row, in frame order (its state advances through them in turn)."""
    windowed = [[job] for job in jobs if job.slot is None]
    runs: dict[int, _Row] = {}
    for job in jobs:
        if job.slot is not None:
            runs.setdefault(job.stream_id, []).append(job)
    carried = [sorted(run, key=lambda j: j.window.start_frame) for run in runs.values()]
    return windowed, carried


class _StreamState(enum.Enum):
    OPEN = "open"  # push/finish allowed
    FINISHED = "finished"  # finish() returned; only aclose() is left
    CLOSED = "closed"  # aclose() called, or a push was cancelled or failed


class BatchingCodecDecoder(CodecDecoder):
    """CodecDecoder that decodes the windows of many concurrent streams in shared batches.

    Borrows ``codec`` (does not close it). Owns a worker thread, started on first use and
    stopped by :meth:`aclose`. ``schedule`` sets each stream's cadence (``codec_worker.schedule``).
    ``carry_state``: streams use the codec's state slots when it has them (False: all windowed).
    """

    def __init__(self, codec: NanoCodec | TorchNanoCodec, max_batch: int = 32, schedule: ScheduleLike = DEFAULT_SCHEDULE,
                 carry_state: bool = True) -> None:
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be an int >= 1, got {max_batch!r}")
        self.schedule = ChunkSchedule.of(schedule)  # validated once, here, not on the first open_stream()
        self.sample_rate_hz = codec.sample_rate_hz
        self.samples_per_frame = codec.samples_per_frame
        self.max_batch = max_batch
        self._codec = codec
        self._cond = threading.Condition()
        self._queue: deque[_Job] = deque()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._ids = itertools.count(1)
        self.batches_decoded = 0  # decoder calls made (for metrics and tests)
        self.windows_decoded = 0
        self.observer: Optional[DecodeObserver] = None  # see DecodeObserver
        self.windowed_streams = 0  # streams that found no free state slot (with a stateful codec)
        self._stream: Optional[torch.cuda.Stream] = None  # CUDA only; created by the worker thread
        self._state: Optional[ConvStateCache] = getattr(codec, "state_cache", None) if carry_state else None
        logger.debug(
            "batching codec decoder: max_batch=%d chunk schedule %s context=%d, state slots %s",
            max_batch,
            self.schedule,
            codec.receptive_field_frames,
            self._state.slots if self._state is not None else "none",
        )

    # ---- public API ----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def max_window_frames(self) -> int:
        """The widest window a stream cuts: its left context plus the schedule's largest chunk (what
        a compiled decoder must be compiled for, see nanocodec.compile_decoder)."""
        return self._codec.receptive_field_frames + max(self.schedule.sizes)

    @property
    def max_chunk_frames(self) -> int:
        """The widest chunk a stream carrying state decodes (what stateful graphs are captured for)."""
        return max(self.schedule.sizes)

    @property
    def carries_state(self) -> bool:
        return self._state is not None

    @property
    def description(self) -> CodecDescription:
        """The decoder streams decode with, and which of its speed-ups are on now."""
        codec = self._codec
        return CodecDescription(codec.impl, str(codec.device), str(codec.dtype).removeprefix("torch."), self.carries_state,
                                codec.fused_activations > 0, codec.compiled, bool(codec.graph_shapes))

    @property
    def state_slots_free(self) -> int:
        """State slots no stream holds (0 when streams do not carry state)."""
        return self._state.free_slots if self._state is not None else 0

    def open_stream(self) -> BatchedDecodeStream:
        if self._closed:
            raise CodecClosedError("codec decoder is closed; create a new one")
        slot = self._state.acquire() if self._state is not None else None
        if self._state is not None and slot is None:
            self.windowed_streams += 1
            if self.windowed_streams == 1 or self.windowed_streams % 1000 == 0:
                logger.warning("codec: all %d state slots are taken; a stream decodes windowed, re-decoding %d "
                               "frames of context per chunk (%d such streams so far)", self._state.slots,
                               self._codec.receptive_field_frames, self.windowed_streams)
        context = 0 if slot is not None else self._codec.receptive_field_frames
        state = StreamingDecodeState(context, self.schedule)
        return BatchedDecodeStream(self, next(self._ids), state, slot)

    async def aclose(self) -> None:
        """Stop the worker after its current batch; queued windows fail with CodecClosedError."""
        with self._cond:
            if self._closed and self._thread is None:
                return
            self._closed = True
            pending = list(self._queue)
            self._queue.clear()
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        _deliver(pending, error=CodecClosedError("codec decoder closed while the window was queued"))
        if thread is not None:
            await asyncio.to_thread(thread.join)
        logger.info("codec decoder closed after %d batches", self.batches_decoded)

    async def __aenter__(self) -> BatchingCodecDecoder:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await asyncio.shield(self.aclose())

    # ---- used by streams (event-loop side) -----------------------------------------------

    def _submit(self, stream_id: int, windows: list[DecodeWindow], slot: Optional[int] = None) -> list[asyncio.Future[np.ndarray]]:
        loop = asyncio.get_running_loop()
        jobs = [_Job(stream_id, window, loop, loop.create_future(), slot) for window in windows]
        with self._cond:
            if self._closed:
                raise CodecClosedError("codec decoder is closed; create a new one")
            self._queue.extend(jobs)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="codec-decoder", daemon=True)
                self._thread.start()
            self._cond.notify()
        return [job.future for job in jobs]

    def _drop(self, stream_id: int) -> int:
        """Remove a stream's queued windows (a batch already decoding still completes)."""
        with self._cond:
            kept = deque(job for job in self._queue if job.stream_id != stream_id)
            dropped = len(self._queue) - len(kept)
            for job in self._queue:
                if job.stream_id == stream_id:
                    job.dropped = True
                    job.future.cancel()
            self._queue = kept
        return dropped

    def _release(self, slot: int) -> None:
        """A closed or finished stream's state slot is free again. A batch still decoding may write
        it once more; the next stream to take it starts from zeros (its first window is fresh)."""
        if self._state is not None:
            self._state.release(slot)

    # ---- worker thread -------------------------------------------------------------------

    def _take_batch(self) -> list[_Job] | None:
        """Block until windows are queued; take up to max_batch. None once closed."""
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            if len(self._queue) <= self.max_batch:
                batch = list(self._queue)
                self._queue.clear()
                return batch
            # More waiting than one batch holds: the windows of the schedule's ramp go first, the
            # least advanced first (a first window is its stream's time to first audio; the next few
            # have little audio buffered ahead of them), then the oldest windows; each stream's
            # windows keep their order.
            ramp = self.schedule.ramp_frames
            urgent = sorted((job for job in self._queue if job.window.start_frame < ramp), key=lambda j: j.window.start_frame)
            first = urgent[: self.max_batch]
            taken = set(map(id, first))
            rest = (job for job in self._queue if id(job) not in taken)
            batch = first + list(itertools.islice(rest, self.max_batch - len(first)))
            taken.update(map(id, batch))
            self._queue = deque(job for job in self._queue if id(job) not in taken)
            return batch

    def _run(self) -> None:
        logger.debug("codec decoder worker started")
        while (jobs := self._take_batch()) is not None:
            windowed, carried = batch_rows(jobs)
            for group in group_by_width(windowed) + group_by_width(carried):
                self._decode_group(group)
        logger.debug("codec decoder worker stopped")

    def _decode_group(self, rows: list[_Row]) -> None:
        # 1) skip rows whose stream was closed or whose waiter went away (a carried row needs all
        #    its windows: its stream is closed as soon as one is given up)
        rows = [row for row in rows if not any(job.dropped or job.future.cancelled() for job in row)]
        if not rows:
            return
        jobs = [job for row in rows for job in row]
        # 2) decode in one call (on CUDA: on the decoder's own stream, see _cuda_stream)
        try:
            pieces = self._decode_counted(rows)
        except Exception as exc:  # one bad batch fails its windows, not the worker
            if len(rows) == 1:
                logger.exception("codec decode of 1 row (%d windows) failed", len(jobs))
                _deliver(jobs, error=_decode_error(exc))
            else:  # which row broke it? each alone: only the rows that fail again fail
                self._decode_each(rows, exc)
            return
        # 3) hand each window's audio back to its loop
        _deliver(jobs, results=pieces)

    def _decode_counted(self, rows: list[_Row]) -> list[np.ndarray]:
        """One decoder call for ``rows`` (all windowed or all carried), counted and reported to the
        observer; each job's audio, in row order."""
        started = time.perf_counter()
        if rows[0][0].slot is None:
            pieces = self._decode_on_stream(lambda: decode_windows(self._codec, [row[0].window for row in rows]))
        else:
            slots = [row[0].slot for row in rows]
            runs = [[job.window for job in row] for row in rows]
            nested = self._decode_on_stream(lambda: decode_carried(self._stateful_codec, slots, runs))
            pieces = [piece for row_pieces in nested for piece in row_pieces]
        windows = sum(len(row) for row in rows)
        self.batches_decoded += 1
        self.windows_decoded += windows
        if self.observer is not None:
            try:
                self.observer(DecodeBatchEvent(time.perf_counter() - started, windows))
            except Exception:  # monitoring never fails a decode
                logger.exception("codec decode observer failed (ignored)")
        return pieces

    @property
    def _stateful_codec(self) -> TorchNanoCodec:
        return self._codec  # type: ignore[return-value]  # only streams of a codec with a state cache get slots

    def _decode_each(self, rows: list[_Row], batch_error: Exception) -> None:
        """A group's decode failed: decode each of its rows alone, so one stream's bad window (or
        one that breaks the batch) fails that stream only; the others get their audio (a carried
        row's state is written only by a call that succeeds, so it can be decoded again). One log
        line for the group, with the batch's error and how many rows failed again."""
        retried = failed = 0
        for row in rows:
            if any(job.dropped or job.future.cancelled() for job in row):  # closed meanwhile: nobody waits
                continue
            retried += 1
            try:
                pieces = self._decode_counted([row])
            except Exception as exc:
                failed += 1
                logger.debug("codec decode of stream %d's row alone failed", row[0].stream_id, exc_info=True)
                _deliver(row, error=_decode_error(exc))
            else:
                _deliver(row, results=pieces)
        windows = sum(len(row) for row in rows)
        what = f"{windows} windows" if windows == len(rows) else f"{windows} windows in {len(rows)} rows"
        logger.error("codec decode of %s failed (%s: %s); retried %d alone, %d failed again",
                     what, type(batch_error).__name__, batch_error, retried, failed)

    def _decode_on_stream(self, decode: Callable[[], _T]) -> _T:
        """``decode`` (decode_windows or decode_carried), on CUDA on a stream of its own, so the
        codec's kernels do not queue behind (or hold up) the engine's on the default stream.

        The stream first waits for the default stream (the weights and anything the caller queued
        there are ready), and the decode's copy of the audio to the host is issued on this stream
        and blocks until it is done, so the returned arrays are complete.
        """
        stream = self._cuda_stream()
        if stream is None:
            return decode()
        stream.wait_stream(torch.cuda.current_stream(stream.device))
        with torch.cuda.stream(stream):
            pieces = decode()  # ends in a blocking .cpu() on `stream`
        stream.synchronize()  # nothing of this batch may still run once its audio is handed out
        return pieces

    def _cuda_stream(self) -> Optional[torch.cuda.Stream]:
        """The worker's CUDA stream, created once on first use; None unless the codec is on CUDA."""
        device = getattr(self._codec, "device", None)
        if not isinstance(device, torch.device) or device.type != "cuda":
            return None
        if self._stream is None:
            self._stream = torch.cuda.Stream(device=device)
        return self._stream


class BatchedDecodeStream(DecodeStream):
    """One utterance on a BatchingCodecDecoder. Not safe to use from several tasks at once."""

    def __init__(self, decoder: BatchingCodecDecoder, stream_id: int, state: StreamingDecodeState,
                 slot: Optional[int] = None) -> None:
        self.stream_id = stream_id
        self._decoder = decoder
        self._state = state
        self._slot = slot  # the codec's state slot this stream holds (None: windowed decode)
        self.carries_state = slot is not None
        self._status = _StreamState.OPEN

    @property
    def closed(self) -> bool:
        return self._status is _StreamState.CLOSED

    async def push(self, codes: torch.Tensor) -> np.ndarray:
        """Add frames [32, T]; return the PCM [N] float32 of the chunks that became ready."""
        self._check_open("push")
        return await self._decode(self._state.push(codes))

    async def finish(self) -> np.ndarray:
        """Decode every frame still buffered; return its PCM. Only aclose() may follow."""
        self._check_open("finish")
        pcm = await self._decode(self._state.finish())
        self._status = _StreamState.FINISHED
        self._release_slot()
        return pcm

    async def aclose(self) -> None:
        """Drop buffered frames and queued windows; idempotent."""
        if self._status is _StreamState.CLOSED:
            return
        self._status = _StreamState.CLOSED
        self._state.discard()
        dropped = self._decoder._drop(self.stream_id)
        self._release_slot()
        if dropped:
            logger.debug("decode stream %d closed, %d queued windows dropped", self.stream_id, dropped)

    def _release_slot(self) -> None:
        if self._slot is not None:
            slot, self._slot = self._slot, None
            self._decoder._release(slot)

    def _check_open(self, action: str) -> None:
        if self._decoder.closed:
            raise CodecClosedError(f"cannot {action}: codec decoder is closed")
        if self._status is not _StreamState.OPEN:
            raise CodecClosedError(f"cannot {action}: decode stream {self.stream_id} is {self._status.value}")

    async def _decode(self, windows: list[DecodeWindow]) -> np.ndarray:
        if not windows:
            return _EMPTY
        futures = self._decoder._submit(self.stream_id, windows, self._slot)
        try:
            pieces = [await future for future in futures]
        except BaseException:
            # cancelled or failed: the stream has lost audio and cannot continue seamlessly
            for future in futures:
                if future.done() and not future.cancelled():
                    future.exception()  # mark as retrieved
                else:
                    future.cancel()
            await self.aclose()
            raise
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


class NanoCodecEncoder(CodecEncoder):
    """CodecEncoder over a NanoCodec (borrowed); each encode runs in a worker thread.

    ``encode_blocking`` is the same work in the calling thread, for a caller that runs it on an
    executor of its own (voice cloning does: voices/cloning.py, so clones never occupy the event
    loop's default executor and a cancelled clone can wait for its thread)."""

    def __init__(self, codec: NanoCodec) -> None:
        self.sample_rate_hz = codec.sample_rate_hz
        self._codec = codec

    async def encode(self, audio: np.ndarray) -> torch.Tensor:
        """Mono audio [N] float @ sample_rate_hz -> unfolded codes [32, ceil(N/1024)] int64 (CPU)."""
        return await asyncio.to_thread(self.encode_blocking, audio)

    def encode_blocking(self, audio: np.ndarray) -> torch.Tensor:
        """``encode`` in the calling thread (it blocks for the whole encode)."""
        if not isinstance(audio, np.ndarray):
            raise InvalidAudioError(f"expected a numpy array [N], got {type(audio).__name__}")
        if audio.ndim != 1 or audio.size == 0:
            raise InvalidAudioError(f"expected mono audio [N>0], got shape {audio.shape}")
        if not np.issubdtype(audio.dtype, np.floating):
            raise InvalidAudioError(f"expected float audio in [-1, 1], got dtype {audio.dtype}")
        batch = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32)).unsqueeze(0)  # [1, N]
        codes = self._codec.encode(batch)  # [1, 32, T]
        return codes[0].cpu()


__all__ = ["BatchedDecodeStream", "BatchingCodecDecoder", "DecodeBatchEvent", "DecodeObserver", "NanoCodecEncoder", "group_by_width"]
