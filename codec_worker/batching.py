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
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import numpy as np
import torch

from codec_worker.errors import CodecClosedError, CodecError, DecodeError, InvalidAudioError
from codec_worker.interface import CodecDecoder, CodecEncoder, DecodeStream
from codec_worker.schedule import DEFAULT_SCHEDULE, ChunkSchedule, ScheduleLike
from codec_worker.streaming import DecodeWindow, StreamingDecodeState, decode_windows

if TYPE_CHECKING:
    from codec_worker.nanocodec import NanoCodec

logger = logging.getLogger(__name__)

_EMPTY = np.zeros(0, dtype=np.float32)


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


def group_by_width(jobs: list[_Job], ratio: float = 2.0) -> list[list[_Job]]:
    """Split jobs into decode groups whose widest window is at most ``ratio`` x the narrowest."""
    groups: list[list[_Job]] = []
    for job in sorted(jobs, key=lambda j: j.window.width):
        if groups and job.window.width <= ratio * groups[-1][0].window.width:
            groups[-1].append(job)
        else:
            groups.append([job])
    return groups


class _StreamState(enum.Enum):
    OPEN = "open"  # push/finish allowed
    FINISHED = "finished"  # finish() returned; only aclose() is left
    CLOSED = "closed"  # aclose() called, or a push was cancelled or failed


class BatchingCodecDecoder(CodecDecoder):
    """CodecDecoder that decodes the windows of many concurrent streams in shared batches.

    Borrows ``codec`` (does not close it). Owns a worker thread, started on first use and
    stopped by :meth:`aclose`. ``schedule`` sets each stream's cadence (``codec_worker.schedule``).
    """

    def __init__(self, codec: NanoCodec, max_batch: int = 32, schedule: ScheduleLike = DEFAULT_SCHEDULE) -> None:
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
        self._stream: Optional[torch.cuda.Stream] = None  # CUDA only; created by the worker thread
        logger.debug(
            "batching codec decoder: max_batch=%d chunk schedule %s context=%d",
            max_batch,
            self.schedule,
            codec.receptive_field_frames,
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

    def open_stream(self) -> BatchedDecodeStream:
        if self._closed:
            raise CodecClosedError("codec decoder is closed; create a new one")
        state = StreamingDecodeState(self._codec.receptive_field_frames, self.schedule)
        return BatchedDecodeStream(self, next(self._ids), state)

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

    def _submit(self, stream_id: int, windows: list[DecodeWindow]) -> list[asyncio.Future[np.ndarray]]:
        loop = asyncio.get_running_loop()
        jobs = [_Job(stream_id, window, loop, loop.create_future()) for window in windows]
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
            for group in group_by_width(jobs):
                self._decode_group(group)
        logger.debug("codec decoder worker stopped")

    def _decode_group(self, jobs: list[_Job]) -> None:
        # 1) skip windows whose stream was closed or whose waiter went away
        jobs = [job for job in jobs if not job.dropped and not job.future.cancelled()]
        if not jobs:
            return
        # 2) decode in one call (on CUDA: on the decoder's own stream, see _cuda_stream)
        try:
            pieces = self._decode_counted(jobs)
        except Exception as exc:  # one bad batch fails its windows, not the worker
            if len(jobs) == 1:
                logger.exception("codec decode of 1 window failed")
                _deliver(jobs, error=_decode_error(exc))
            else:  # which window broke it? each alone: only the windows that fail again fail
                self._decode_each(jobs, exc)
            return
        # 3) hand each window's audio back to its loop
        _deliver(jobs, results=pieces)

    def _decode_counted(self, jobs: list[_Job]) -> list[np.ndarray]:
        """One decoder call for ``jobs``' windows, counted and reported to the observer."""
        started = time.perf_counter()
        pieces = self._decode_on_stream([job.window for job in jobs])
        self.batches_decoded += 1
        self.windows_decoded += len(jobs)
        if self.observer is not None:
            try:
                self.observer(DecodeBatchEvent(time.perf_counter() - started, len(jobs)))
            except Exception:  # monitoring never fails a decode
                logger.exception("codec decode observer failed (ignored)")
        return pieces

    def _decode_each(self, jobs: list[_Job], batch_error: Exception) -> None:
        """A group's decode failed: decode each of its windows alone, so one stream's bad window
        (or one that breaks the batch) fails that stream only; the others get their audio. One log
        line for the group, with the batch's error and how many windows failed again."""
        retried = failed = 0
        for job in jobs:
            if job.dropped or job.future.cancelled():  # closed meanwhile: nobody waits for it
                continue
            retried += 1
            try:
                pieces = self._decode_counted([job])
            except Exception as exc:
                failed += 1
                logger.debug("codec decode of stream %d's window alone failed", job.stream_id, exc_info=True)
                _deliver([job], error=_decode_error(exc))
            else:
                _deliver([job], results=pieces)
        logger.error("codec decode of %d windows failed (%s: %s); retried %d alone, %d failed again",
                     len(jobs), type(batch_error).__name__, batch_error, retried, failed)

    def _decode_on_stream(self, windows: list[DecodeWindow]) -> list[np.ndarray]:
        """decode_windows, on CUDA on a stream of its own, so the codec's kernels do not queue
        behind (or hold up) the engine's on the default stream. UNTESTED on a GPU so far.

        The stream first waits for the default stream (the weights and anything the caller queued
        there are ready), and decode_windows' copy of the audio to the host is issued on this stream
        and blocks until it is done, so the returned arrays are complete.
        """
        stream = self._cuda_stream()
        if stream is None:
            return decode_windows(self._codec, windows)
        stream.wait_stream(torch.cuda.current_stream(stream.device))
        with torch.cuda.stream(stream):
            pieces = decode_windows(self._codec, windows)  # ends in a blocking .cpu() on `stream`
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

    def __init__(self, decoder: BatchingCodecDecoder, stream_id: int, state: StreamingDecodeState) -> None:
        self.stream_id = stream_id
        self._decoder = decoder
        self._state = state
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
        return pcm

    async def aclose(self) -> None:
        """Drop buffered frames and queued windows; idempotent."""
        if self._status is _StreamState.CLOSED:
            return
        self._status = _StreamState.CLOSED
        self._state.discard()
        dropped = self._decoder._drop(self.stream_id)
        if dropped:
            logger.debug("decode stream %d closed, %d queued windows dropped", self.stream_id, dropped)

    def _check_open(self, action: str) -> None:
        if self._decoder.closed:
            raise CodecClosedError(f"cannot {action}: codec decoder is closed")
        if self._status is not _StreamState.OPEN:
            raise CodecClosedError(f"cannot {action}: decode stream {self.stream_id} is {self._status.value}")

    async def _decode(self, windows: list[DecodeWindow]) -> np.ndarray:
        if not windows:
            return _EMPTY
        futures = self._decoder._submit(self.stream_id, windows)
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
