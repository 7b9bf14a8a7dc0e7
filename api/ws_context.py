"""One context of a /tts/websocket connection (api/connection.py): its state, its text buffer,
and the worker task that speaks its jobs in order.

A context is a small state machine (``ContextState``) fed by the socket's reader loop, with one
worker task that runs its jobs in order:

    reader:  generation message -> ctx.on_input(): text into the context's TextBuffer, complete
             sentences and long clauses (or everything, on flush / continue:false /
             max_buffer_delay_ms=0; everything up to the word being typed, and before words
             read together such as "$5 million", when the buffer timer fires) become
             ``segment`` jobs, followed by ``flush_done`` or ``done`` jobs
    worker:  segment -> engine + codec -> ``chunk`` events, all of the segment's audio (each
             segment is one engine request and one codec stream, so it is resampled on its own and
             nothing of it waits for later text), then its ``timestamps`` and
             ``phoneme_timestamps`` (api/segment_timing.py);
             flush_done -> ``flush_done``; done -> exactly one ``done``
    cancel:  the worker task is cancelled (aborting the engine request) and nothing more is sent
             for that context, not even ``done`` (protocol 10)

Its stream place, its text limits and what ends it early (a client that stops reading, lapsed
credentials, the drain) belong to the socket: api/connection.py's docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np
from starlette.websockets import WebSocketDisconnect

from api.admission import StreamTicket
from api.audio import AudioSink, ContainerWriter, make_writer
from api.errors import ContextClosedError
from api.protocol.events import ChunkEvent, DoneEvent, FlushDoneEvent, ServerEvent, split_audio
from api.protocol.requests import WsGenerationRequest
from api.segment_timing import segment_timing_events, wants_timing
from api.synthesis import ContextDictionary, Segment, speaking_language
from api.text import TextBuffer
from api.text.markup import MarkupState

if TYPE_CHECKING:
    from api.connection import WsConnection

logger = logging.getLogger(__name__)

_SEGMENT_MAX_CHARS = 400  # a boundary-less buffer is cut here
_CLAUSE_MIN_CHARS = 60  # a ", ; :" ends a segment once it is this long (~4 s of speech)

# How long a cancel waits for its context's work to stop (the engine abort and the codec stream's
# close take milliseconds). The socket's reader waits inside the cancel, so a context stuck while
# stopping would hold up the input of every other context on the socket: past this the reader goes
# on, and the context is finished (its stream slot released) when its task does stop.
CANCEL_WAIT_S = 5.0


class ContextState(enum.Enum):
    OPEN = "open"  # accepting input
    CLOSING = "closing"  # got continue:false; finishing the queued work
    DONE = "done"  # sent done
    FAILED = "failed"  # sent an error (terminal for the client too)
    CANCELLED = "cancelled"  # cancelled by the client; sends nothing more


@dataclass(frozen=True)
class _Job:
    kind: str  # "segment" | "flush_done" | "done"
    flush_id: int
    text: str = ""
    ready_at: float = 0.0  # a segment: when its text was complete (perf_counter), so the server owes its audio


def _retrieve_outcome(task: asyncio.Task) -> None:
    """Mark a finished task's exception as seen: the context reported it already (or was cancelled)."""
    if not task.cancelled():
        task.exception()
    _drop_cancellation(task)


def _drop_cancellation(task: asyncio.Task) -> None:
    """Take a cancelled task's stored CancelledError. Its traceback holds the worker's frames, and
    they hold the context (its Opus encoder, two FFmpeg threads each): left stored, that cycle
    lives until the garbage collector runs, so a socket that cancels often piles up encoders."""
    if task.cancelled():
        with contextlib.suppress(asyncio.CancelledError):
            task.exception()


class WsContext:
    def __init__(self, conn: "WsConnection", first: WsGenerationRequest, ticket: Optional[StreamTicket] = None) -> None:
        self.conn = conn
        self.ticket = ticket
        self.timing = conn.service.stream_timing("ws")  # real-time factor and underrun (api/stream_timing.py)
        self.context_id = first.context_id
        self.request_id = f"{conn.connection_id}:{first.context_id}"
        self.config = first  # model, voice, format, language and flags are fixed by the first message
        self.state = ContextState.OPEN
        self.buffer = TextBuffer(clause_min_chars=_CLAUSE_MIN_CHARS, max_chars=_SEGMENT_MAX_CHARS)
        self.flush_id = 1
        self.jobs: asyncio.Queue[_Job] = asyncio.Queue()
        self.samples_in = 0  # codec-rate samples of the segments spoken so far (timestamp offsets)
        self.sampling = conn.service.sampling(first)
        self.volume = conn.service.volume(first)
        self.speed = conn.service.speed(first)  # fixed by the first message, as the volume is
        self.markup = MarkupState()  # what the transcript's <speed>/<volume> tags set, from segment to segment
        self._timer: Optional[asyncio.TimerHandle] = None
        self._kept_by_timer: Optional[str] = None  # the text the last timer cut left pending
        self._buffer_delay_s = first.max_buffer_delay_ms / 1000.0  # the latest message's, for the timer
        self._segments = 0
        # Time to first audio counts from when the first spoken segment's text was complete, not
        # from the context's opening: a client may open a context and send its words seconds later
        self._owed_since: Optional[float] = None
        self._first_audio_sent = False
        self._queued_chars = 0  # text in segment jobs not yet spoken
        self._late_input: Optional[ContextClosedError] = None  # input after continue:false, told at the end
        self._finished = False
        self._section: Optional[ContainerWriter] = None  # raw Opus: the open flush section's encoder (see _speak)
        self._job_running = False  # the worker is on a job (a segment being spoken, a flush or the end)
        self._hold_timer: Optional[asyncio.TimerHandle] = None  # gives the stream place back when idle
        self._dictionary: Optional[ContextDictionary] = None  # made at its first segment
        # what the text is read in: the request's language, or its voice's (api/synthesis.py
        # speaking_language), settled at the first segment
        self._language: Optional[str] = None
        self._language_settled = False
        self.task = asyncio.create_task(self._worker(), name=f"ws-context-{self.context_id}")
        # However the task ends, the context is finished (its stream place released): a task
        # cancelled before it first ran (a fail() or cancel() for a message the reader had already
        # queued behind the first) never reaches the worker's finally
        self.task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        _drop_cancellation(task)
        self.conn.context_finished(self)

    @property
    def working(self) -> bool:
        """Open or closing: counts against the socket's context limit and keeps a lapsed credential's
        socket open (its client may still close it and get its ``done``)."""
        return self.state in (ContextState.OPEN, ContextState.CLOSING)

    @property
    def busy(self) -> bool:
        """Working on something: text buffered, segments, flushes or its end queued, or one of them
        running (audio owed). Only a busy context holds off the socket's idle close; an open context
        that waits for more text does not."""
        # unfinished markup alone ("<break ti") is not work: it waits for the client, like an open context
        buffered = len(self.buffer) > 0 and not self.buffer.waits_for_markup
        return self.working and (buffered or not self.jobs.empty() or self._job_running)

    @property
    def holds_drain(self) -> bool:
        """Keeps a draining socket open: admitted (it may still speak here), or closing (its ``done``
        must go out). A context never admitted can speak nothing more on a draining server."""
        return self.working and (self.ticket is not None or self.state is ContextState.CLOSING)

    @property
    def unspoken_chars(self) -> int:
        """Text this context holds that is not spoken yet (buffered + queued segments)."""
        return len(self.buffer) + self._queued_chars

    # -- input (reader side, synchronous) ----------------------------------------------------------
    def on_input(self, msg: WsGenerationRequest) -> None:
        if self.state is ContextState.CLOSING:
            # Not spoken; the context still sends everything it accepted and then ends with this
            # error instead of done, so its one terminal event stays the last thing it sends.
            if self._late_input is None:
                self._late_input = ContextClosedError(self.context_id)
                logger.info("context %s: input after continue=false ignored; it will end with context_closed",
                            self.request_id)
            return
        if self.state is not ContextState.OPEN:
            raise ContextClosedError(self.context_id)
        self._stop_hold_timer()
        if msg.transcript:
            self.buffer.append(msg.transcript)
        if msg.flush:
            self._cut(force=True)
            self.jobs.put_nowait(_Job("flush_done", self.flush_id))
            self.flush_id += 1
        if not msg.continue_:
            self._cut(force=True)
            self.jobs.put_nowait(_Job("done", self.flush_id))
            self.state = ContextState.CLOSING
        elif msg.max_buffer_delay_ms == 0:
            # "custom buffering": every submission is generated as it comes, bar a tag still arriving
            self._cut(force=True, hold_markup=True)
        else:
            self._buffer_delay_s = msg.max_buffer_delay_ms / 1000.0
            self._cut(force=False)

    def _on_timer(self) -> None:
        self._timer = None
        if self.state is not ContextState.OPEN:
            return
        if self.buffer.pending == self._kept_by_timer:
            # nothing came to finish what the last timer kept back: the client is quiet, say it all
            self._cut(force=True, hold_markup=True)
        else:
            # the client paused: say what it sent, but not a word it may be half-way through ("fo")
            # nor words read together ("$5 million": api/text/segmentation.py)
            self._cut(force=False, whole_words=True)
        self._kept_by_timer = self.buffer.pending

    def _cut(self, force: bool, whole_words: bool = False, hold_markup: bool = False) -> None:
        """Queue the buffer's complete segments (``force``: all of it, bar a tag still arriving with
        ``hold_markup``; ``whole_words``: up to its last word) and time what is left: the buffer
        timer runs from the first text buffered since the last cut, with the client's latest
        max_buffer_delay_ms. A tag still arriving alone gets no timer: only its rest can finish it."""
        texts = self.buffer.take_whole_words() if whole_words else self.buffer.take_ready(force, hold_markup)
        for text in texts:
            if text.strip():
                self._queued_chars += len(text)
                self.jobs.put_nowait(_Job("segment", self.flush_id, text, ready_at=time.perf_counter()))
        if self._timer is not None and (texts or not len(self.buffer)):
            # what is left after a cut is newer text (or the word the timer kept): its own delay, from now
            self._timer.cancel()
            self._timer = None
        waiting = len(self.buffer) and not self.buffer.waits_for_markup
        if waiting and self._timer is None and self.state is ContextState.OPEN:
            self._timer = asyncio.get_running_loop().call_later(self._buffer_delay_s, self._on_timer)
        # input that made no work (a tag still arriving) leaves the context idle: its place is
        # held for context_hold_s only, as after its last job
        self._hold_place_while_idle()

    # -- stream place ----------------------------------------------------------------------------
    def _hold_place_while_idle(self) -> None:
        """An admitted context with nothing left to say keeps its stream place for ``context_hold_s``
        (an agent's next words rarely take longer), then gives it back: an open context that waits
        costs the engine nothing, and held places would refuse other clients' streams for as long as
        its socket is used. Its next text takes a place again (``WsConnection._admit_late``)."""
        if self.state is ContextState.OPEN and self.ticket is not None and not self.busy and self._hold_timer is None:
            self._hold_timer = asyncio.get_running_loop().call_later(self.conn.limits.context_hold_s,
                                                                     self._give_place_back)

    def _give_place_back(self) -> None:
        self._hold_timer = None
        if self.state is not ContextState.OPEN or self.ticket is None or self.busy:
            return
        self.ticket.release()
        self.ticket = None
        logger.info("context %s: nothing to say for %g s; its stream place is given back (its next text takes one)",
                    self.request_id, self.conn.limits.context_hold_s)
        self.conn.place_given_back()

    def _stop_hold_timer(self) -> None:
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None

    # -- lifecycle ---------------------------------------------------------------------------------
    async def cancel(self) -> None:
        self.state = ContextState.CANCELLED
        self._stop_hold_timer()
        if self._timer is not None:
            self._timer.cancel()
        task = self.task
        task.cancel()
        if task is not asyncio.current_task():
            done, _ = await asyncio.wait({task}, timeout=CANCEL_WAIT_S)
            if not done:
                # it started (a task never run stops at once), so its finally finishes the context
                logger.warning("context %s: still stopping %.0f s after its cancel; the socket goes on, and "
                               "its stream slot is released when it stops", self.request_id, CANCEL_WAIT_S)
                task.add_done_callback(_retrieve_outcome)
                return
            _retrieve_outcome(task)
        self.conn.context_finished(self)  # finished on return, whether or not the task's callback ran yet

    async def fail(self, exc: BaseException) -> None:
        """Send one error event for this context and stop its work."""
        if self.state in (ContextState.CANCELLED, ContextState.FAILED, ContextState.DONE):
            return
        self.state = ContextState.FAILED
        self._stop_hold_timer()
        if self._timer is not None:
            self._timer.cancel()
        if asyncio.current_task() is not self.task:
            self.task.cancel()
        await self.conn.send_error(exc, self.request_id, self.context_id)

    # -- worker ------------------------------------------------------------------------------------
    async def _worker(self) -> None:
        try:
            while True:
                job = await self.jobs.get()
                self._job_running = True
                try:
                    if job.kind == "segment":
                        try:
                            await self._speak(job)
                        finally:
                            self._queued_chars -= len(job.text)
                    elif job.kind == "flush_done":
                        await self._end_section(job.flush_id)
                        await self._send(FlushDoneEvent(flush_id=job.flush_id, context_id=self.context_id))
                    elif self._late_input is not None:  # done, but input came after continue=false
                        await self._end_section(job.flush_id)
                        await self.fail(self._late_input)
                        return
                    else:  # done
                        await self._end_section(job.flush_id)
                        self.state = ContextState.DONE
                        await self._send(DoneEvent(context_id=self.context_id))
                        logger.info("context %s done (%d segments)", self.request_id, self._segments)
                        return
                finally:
                    self._job_running = False
                self._hold_place_while_idle()
        except asyncio.CancelledError:
            raise
        except WebSocketDisconnect:
            return
        except Exception as exc:  # engine, voice or codec failure: this context only
            # logged once, by the error event's lookup (api.errors.describe_error): a mapped 5xx is
            # one WARNING line, anything unmapped (a bug) an ERROR with its traceback
            await self.fail(exc)
        finally:
            self.conn.context_finished(self)

    async def _speak(self, job: _Job) -> None:
        service = self.conn.service
        cfg = self.config
        # the dictionary is read per segment, so an update applies to the next one; its last copy is
        # spoken with while the store is unreachable, or once it is deleted (api/synthesis.py)
        if self._dictionary is None:
            self._dictionary = service.context_dictionary(cfg.pronunciation_dict_id, self.request_id)
        prons = await self._dictionary.current()
        # after the dictionary a segment must still fit GEPARD_MAX_TRANSCRIPT_CHARS (400 transcript_too_long)
        service.check_pronounced([job.text], prons, cfg.pronunciation_dict_id, what="sentence")
        # normalization: Cartesia documents it for bytes and SSE only, but it is fixed with the rest of
        # the context by its first message, and a client that sends it on a socket means it
        # the context's <speed>/<volume> state moves on here, segment after segment, in order
        prompt = await self.conn.prompt_for(cfg.voice_id)
        if not self._language_settled:  # at the first segment; fixed with the context, as its voice is
            self._language = speaking_language(cfg.effective_language, prompt.language)
            self._language_settled = True
        segment: Segment = service.segment(job.text, self._language, cfg.normalization, pronunciations=prons,
                                           markup=self.markup)
        if not segment.has_audio:  # whitespace, punctuation or emoji only (and no pause): nothing to send
            return
        if self._owed_since is None:
            self._owed_since = job.ready_at
        self._segments += 1
        pieces: list[np.ndarray] = []
        offset_s = self.samples_in / service.sample_rate_hz  # this segment's start in the context's audio
        t_ready = time.perf_counter()
        rid = f"{self.request_id}:{self._segments}"
        # One sink per segment: its resampler's look-ahead is released when the segment ends, so
        # the whole segment goes out under its own flush_id before any later flush_done. Raw Opus
        # (extension) keeps one encoder per flush section under the segments' sinks: the packets of
        # a section are one continuous Opus stream, its last partial frame sent when the section ends.
        section = self._section_writer() if cfg.output_format.is_opus_packets else None
        sink = AudioSink(cfg.output_format) if section is None else AudioSink.with_writer(
            section, cfg.output_format.sample_rate_hz, service.sample_rate_hz)
        # aclosing: a cancel landing outside the engine await (sending, encoding) still closes the
        # generator at once, which aborts the engine request and frees the codec stream.
        async with contextlib.aclosing(service.speak(segment, prompt.prefix, self.sampling, rid, self.volume,
                                                   timing=self.timing, speed=self.speed)) as audio:
            async for pcm in audio:
                if wants_timing(cfg):
                    pieces.append(pcm)
                units = await asyncio.to_thread(sink.push_units, pcm)
                t_ready = await self._send_audio(units, t_ready, job.flush_id)
        t_ready = await self._send_audio(await asyncio.to_thread(sink.finish_units, section is None), t_ready, job.flush_id)
        self.samples_in += sink.samples_in
        for event in await segment_timing_events(segment, pieces, service.sample_rate_hz, offset_s, cfg,
                                                 self.context_id, job.flush_id):
            await self._send(event)

    async def _send(self, event: ServerEvent) -> None:
        """Send one of this context's events. Nothing goes out once the context is cancelled
        (protocol 10), even where a cancel has not reached this task: its state says so first."""
        if self.state is ContextState.CANCELLED:
            raise asyncio.CancelledError()
        await self.conn.send(event)

    def _section_writer(self) -> ContainerWriter:
        if self._section is None:
            self._section = make_writer(self.config.output_format)
        return self._section

    async def _end_section(self, flush_id: int) -> None:
        """Raw Opus: the flush section's last packets, before its flush_done or the context's end."""
        writer, self._section = self._section, None
        if writer is not None:
            await self._send_audio(await asyncio.to_thread(writer.finish_units), time.perf_counter(), flush_id)

    async def _send_audio(self, units: list[bytes], since: float, flush_id: int) -> float:
        """Send audio pieces as chunk events; each piece is cut only at the format's unit (a sample;
        a raw Opus packet is never cut)."""
        if not units:
            return since
        now = time.perf_counter()
        if self.ticket is not None:
            self.ticket.mark_spoke()  # idempotent; a place taken again after an idle spell is fresh until then
        if not self._first_audio_sent:
            self._first_audio_sent = True
            if self.conn.metrics is not None and self._owed_since is not None:
                self.conn.metrics.first_audio.labels("ws").observe(now - self._owed_since)
        width = self.config.output_format.unit_bytes
        for piece in (p for unit in units for p in split_audio(unit, width, self.context_id)):
            await self._send(ChunkEvent(piece, step_time_ms=(now - since) * 1000.0, context_id=self.context_id, flush_id=flush_id))
        return time.perf_counter()
