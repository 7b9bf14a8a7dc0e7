"""TorchEngine: the torch backend, running a generation loop in one worker thread.

The loop is BatchGenerator (the reference, engine.backends.torch_generator) or FastGenerator (the
fast path, engine.backends.torch_fast: static KV cache, CUDA graphs), chosen by
``TorchEngineConfig.path``: ``auto`` takes the fast path on CUDA and the reference elsewhere.

The asyncio side never blocks and never touches the device: a request is checked and tokenised on
the event loop (``plan``) and handed to the worker through a locked queue as token ids; the worker
embeds its prompt (``embed``) and adds it to the loop. (PyTorch's blocking copy to a CUDA device
waits for everything queued on the stream, on the reference path the worker's steps too; and the
embedding's own compute is the worker's, not the loop's.) Frames come back through per-request
mailboxes filled with ``loop.call_soon_threadsafe``. A mailbox merges
frames when the consumer lags (one pending chunk, not an unbounded queue of messages), and wakes its
consumer only at the boundaries of the request's ``delivery`` cadence (the codec's chunk schedule,
when the gateway asks) or at its end: one task wake-up per chunk of audio instead of per frame.
Cancelling or closing a ``generate`` iterator aborts the request; the worker drops it at the start
of its next step, so it stops within one step. An abort names the request it was made for (its
PlannedRequest), not just its id, and the id stays taken until the worker has let go of that
request: a new request that reuses the id at once waits for that (at most a step) and then runs
normally, instead of being hit by the abort or receiving the old request's frames.

A request that fails on its own (see ``torch_generator``: its prefill raised, it sampled an invalid
code, or the batched step it was part of failed) gets GenerationError; the worker keeps serving.
The engine is dead only when the device is lost or the batched step keeps failing, and
``check_health`` then says why.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Callable, Optional

import torch

from codec_worker.device_errors import device_lost, error_summary
from engine.backends.torch_fast import FastGenerator, choose_path
from engine.backends.torch_generator import BatchGenerator, PlannedRequest, PreparedRequest, StepOutput
from engine.device import dtype_name, pick_device, pick_dtype
from engine.errors import EngineDeadError, GenerationError, InvalidRequestError, OverloadedError
from engine.interface import TtsEngine
from engine.model.gepard import GepardModel
from engine.prompt import adaptive_max_frames, build_text_ids, uncond_text_ids
from engine.requests import (DeliveryCadence, EngineDescription, FinishReason, FrameChunk, ModelInfo, SynthesisRequest,
                             validated_text)
from engine.sampling import new_seed
from engine.stats import EngineStats, StepEvent, StepObserver, notify

logger = logging.getLogger(__name__)

# A worker whose last step did nothing (waiting requests that cannot start) sleeps until a request
# arrives, one is aborted or the engine closes; and, in case nothing of that comes although a step
# could now move, looks again after this many seconds
STALL_RECHECK_S = 0.5


@dataclass
class TorchEngineConfig:
    model: str | Path | None = None  # path or HF repo id; None: $GEPARD_MODEL or the default
    device: str = "auto"
    dtype: str = "auto"
    max_batch: int = 32  # requests decoded together
    max_queue: int = 256  # requests waiting beyond max_batch before OverloadedError
    max_frames_ceiling: int = 2000  # no request may ask for more (~93 s)
    # which generation loop: "reference" (BatchGenerator, the source of truth), "fast" (FastGenerator:
    # static KV cache, bucketed fixed-shape decode, CUDA graphs on CUDA), "auto": fast on CUDA only
    path: str = "auto"
    max_positions: int = 4096  # fast path: KV cache positions per slot (prompt + max_frames must fit)
    kv_slots: Optional[int] = None  # fast path: KV cache slots (None: max_batch; a CFG request takes two)
    cuda_graphs: bool = True  # fast path on CUDA: replay captured decode steps (False: run them eagerly)
    # fast path: the decode step and the prefill (inputs, layers, sampling) through torch.compile (Inductor:
    # Triton kernels on CUDA), fusing their small element-wise kernels. Off: on an H200 its batch-1 step
    # took 1.20 ms against 2.78, but compiling the larger buckets did not finish within a minute
    # (bench/gpu_session.sh)
    compile: bool = False
    # fast path: launch each decode step before reading the last one's results, so the host's
    # bookkeeping runs while the device computes (frames come one step later; a stopping request
    # costs one dropped frame). Off here; the server turns it on (GEPARD_TORCH_OVERLAP: faster at
    # every batch on an H200)
    overlap: bool = False
    # fast path on CUDA with graphs: the prefill replayed as CUDA graphs too, one per (prompts,
    # tokens) bucket, captured at first use. Off until a GPU has measured it
    prefill_graphs: bool = False
    # fast path: new requests prefilled together in one step (after the running ones' decode). A
    # burst of N new streams waits ceil(N / prefill_batch) steps for its last first frame; None:
    # 64 on CUDA, 8 on CPU (engine.backends.torch_fast.default_prefill_batch)
    prefill_batch: Optional[int] = None
    # fast path: each decoder layer's norms, rotary, attention gate and SwiGLU activation as one
    # Triton kernel each, a decode step's inputs as two, and the sampling and commit as two
    # (engine.backends.fused_ops), checked against the eager ops at start. None: on for CUDA unless
    # compiled (a layer launches 10 kernels instead of 70 in bf16)
    fused_kernels: Optional[bool] = None
    # fast path on CUDA: its stream's priority, "high" (above the codec's stream, so a step's small
    # kernels do not wait behind the codec's) or "normal" (engine.backends.cuda_graphs)
    stream_priority: str = "high"


@dataclass
class _Mailbox:
    """One request's frames on their way to its caller; wakes the caller at each boundary of the
    request's ``delivery`` cadence (every frame when it has none), at its end, or on an error."""

    loop: asyncio.AbstractEventLoop
    delivery: tuple[int, ...] = ()
    planned: Optional[PlannedRequest] = None  # what the worker knows the request by: an abort names it, not its id
    event: asyncio.Event = field(default_factory=asyncio.Event)
    frames: list[torch.Tensor] = field(default_factory=list)
    finish: Optional[FinishReason] = None
    error: Optional[BaseException] = None
    received: int = 0  # frames put so far
    cadence: DeliveryCadence = field(init=False)
    # set once the request is over for the worker (its finish or its failure arrived): until then
    # its id stays taken, even after its consumer left
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    on_end: Optional[Callable[[], None]] = None  # called when it ends (set once its consumer left)

    def __post_init__(self) -> None:
        self.cadence = DeliveryCadence(self.delivery)

    def put(self, out: StepOutput) -> None:  # runs on the event loop
        if self.ended.is_set():  # e.g. the engine closed and failed it while the worker ran a last step
            return
        if out.error is not None:
            self.fail(out.error)
            return
        if out.codes is not None:
            self.frames.append(out.codes)
            self.received += 1
        if out.finish_reason is not None:
            self.finish = out.finish_reason
        if self.finish is not None or self.cadence.due(self.received):
            self.event.set()
            self.cadence.advance(self.received)
        if self.finish is not None:
            self._end()

    def fail(self, exc: BaseException) -> None:
        if self.ended.is_set():
            return
        self.error = exc
        self.event.set()
        self._end()

    def _end(self) -> None:
        self.ended.set()
        if self.on_end is not None:
            self.on_end()


class TorchEngine(TtsEngine):
    def __init__(self, model: GepardModel, config: TorchEngineConfig | None = None) -> None:
        self.config = config or TorchEngineConfig()
        self.model = model
        self.path = choose_path(self.config.path, model.device)
        self._generator = self._make_generator(model)
        logger.info("torch backend: %s path on %s (%s)", self.path, model.device, model.dtype)
        self._lock = threading.Condition()
        self._incoming: list[PlannedRequest] = []  # handed over by the event loop, embedded by the worker
        self._embedding = 0  # requests the worker took from _incoming and is embedding now
        self._aborts: list[PlannedRequest] = []  # the requests to abort (objects: an id may be reused meanwhile)
        # request id -> its mailbox, from acceptance until the worker let go of the request
        self._mailboxes: dict[str, _Mailbox] = {}
        # the worker's own view: request id -> the request it holds (taken from _incoming, no final output yet)
        self._live: dict[str, PlannedRequest] = {}
        self._generated: dict[str, int] = {}  # frames produced per running request (worker thread writes)
        self._dead: Optional[BaseException] = None
        self._closed = False
        self._observer: Optional[StepObserver] = None
        self._steps = 0
        self._thread = threading.Thread(target=self._run, name="gepard-torch-engine", daemon=True)
        self._thread.start()
        self._info = model.config.model_info(str(model.model_dir or "gepard"), model.fingerprint)

    def _make_generator(self, model: GepardModel) -> BatchGenerator | FastGenerator:
        cfg = self.config
        if self.path != "fast":
            return BatchGenerator(model, max_batch=cfg.max_batch)
        if cfg.compile:
            try:
                return self._warm_fast_path(model, compiled=True)
            except Exception as exc:  # no C++ compiler, a Triton or Inductor failure: serve uncompiled
                if device_lost(exc):
                    raise
                logger.error("torch fast path: compiling the decode step and the prefill failed (%s); running them "
                             "uncompiled", error_summary(exc))
        return self._warm_fast_path(model, compiled=False)

    def _warm_fast_path(self, model: GepardModel, compiled: bool) -> FastGenerator:
        """A FastGenerator with every step shape captured (CUDA graphs) or compiled now, so that no
        request waits for a capture or a compile later."""
        cfg = self.config
        gen = FastGenerator(model, max_batch=cfg.max_batch, slots=cfg.kv_slots, max_positions=cfg.max_positions,
                            cuda_graphs=cfg.cuda_graphs, compiled=compiled, overlap=cfg.overlap,
                            prefill_graphs=cfg.prefill_graphs, prefill_batch=cfg.prefill_batch,
                            fused_kernels=cfg.fused_kernels, stream_priority=cfg.stream_priority)
        if compiled:
            started = time.perf_counter()
            count = gen.compile_all()
            logger.info("torch fast path: compiled the decode step and the prefill (%d shapes) in %.1f s", count,
                        time.perf_counter() - started)
        if gen.graphs is not None:
            started = time.perf_counter()
            count = gen.capture_all()
            if gen.graphs is not None:  # else a capture failed (logged): the decode steps run eagerly
                prefills = len(gen.prefill_graphs.graphs) if gen.prefill_graphs is not None else 0
                logger.info("torch fast path: captured %d decode-step graphs%s in %.1f s", count,
                            f" and {prefills} prefill graphs" if prefills else "", time.perf_counter() - started)
        return gen

    @classmethod
    def from_config(cls, config: TorchEngineConfig) -> "TorchEngine":
        device = pick_device(config.device)
        dtype = pick_dtype(device, config.dtype)
        model = GepardModel.from_pretrained(config.model, device=device, dtype=dtype)
        return cls(model, config)

    @property
    def model_info(self) -> ModelInfo:
        return self._info

    @property
    def description(self) -> EngineDescription:
        gen = self._generator
        fast = isinstance(gen, FastGenerator)
        return EngineDescription("torch", self.path, str(self.model.device), dtype_name(self.model.dtype),
                                 cuda_graphs=fast and gen.graphs is not None,
                                 prefill_graphs=fast and gen.prefill_graphs is not None,
                                 fused_kernels=fast and gen.fused_kernels)

    @property
    def cfg_unavailable(self) -> Optional[str]:
        return self._generator.cfg_unavailable if isinstance(self._generator, FastGenerator) else None

    # -- request preparation ----------------------------------------------------------------------
    def plan(self, request: SynthesisRequest) -> PlannedRequest:
        """Check ``request`` and build its prompt as token ids (InvalidRequestError names the bad
        field). Runs on the caller's thread, the event loop, so it does no device work (see the
        module's docstring)."""
        model, cfg, sp = self.model, self.model.config, request.sampling
        text = validated_text(request, self.config.max_frames_ceiling)
        prefix = request.speaker_prefix
        if prefix is not None:
            model.check_prefix(prefix)  # on the CPU, where the voice store keeps prefixes
        assert model.tokenizer is not None
        text_ids = build_text_ids(model.tokenizer.encode(text), cfg.special_tokens, cfg.text_repetition)
        uncond_ids = uncond_text_ids(cfg.special_tokens, sp.cfg_uncond_mode) if sp.uses_cfg else None
        max_frames = sp.max_frames or adaptive_max_frames(text, cfg.codec.exact_frame_rate_hz, self.config.max_frames_ceiling)
        seed = sp.seed if sp.seed is not None else new_seed()
        planned = PlannedRequest(request.request_id, text_ids, uncond_ids, prefix,
                                 model.null_prefix.shape[0] if prefix is None else prefix.shape[0],
                                 sp, seed & ((1 << 63) - 1), max_frames, submitted_at=time.monotonic())
        if isinstance(self._generator, FastGenerator):
            self._generator.check_fits(planned)  # too long for the static cache: refused before it starts
        return planned

    def embed(self, planned: PlannedRequest) -> PreparedRequest:
        """The planned prompt's embeddings on the model's device (the worker thread's job)."""
        with torch.no_grad():
            embeds = self.model.prompt_embeds(planned.text_ids, planned.speaker_prefix)
            uncond = None
            if planned.uncond_ids is not None:
                uncond = self.model.prompt_embeds(planned.uncond_ids, planned.speaker_prefix)
        return PreparedRequest(planned.request_id, embeds, uncond, planned.sampling, planned.seed, planned.max_frames,
                               submitted_at=planned.submitted_at)

    def prepare(self, request: SynthesisRequest) -> PreparedRequest:
        """``plan`` and ``embed`` in one call, on the caller's thread (tests and benches)."""
        return self.embed(self.plan(request))

    # -- TtsEngine --------------------------------------------------------------------------------
    async def generate(self, request: SynthesisRequest) -> AsyncIterator[FrameChunk]:
        self._check_open()
        rid = request.request_id
        while (old := self._mailboxes.get(rid)) is not None:
            if old.on_end is None:  # its consumer is still there
                raise InvalidRequestError(f"request id {rid!r} is already running")
            # cancelled, and the worker has not let go of it yet (it does within a step): wait,
            # so that the abort meant for it cannot reach this request
            await old.ended.wait()
            self._check_open()
        planned = self.plan(request)
        box = _Mailbox(asyncio.get_running_loop(), delivery=request.delivery, planned=planned)
        with self._lock:
            # died or closed since the check above: its failure notice went to the boxes it knew
            self._check_open()
            if self._queued() + self._generator.num_active >= self.config.max_batch + self.config.max_queue:
                raise OverloadedError(f"engine is at capacity ({self.config.max_batch} running, {self.config.max_queue} queued)")
            self._mailboxes[rid] = box
            self._incoming.append(planned)
            self._lock.notify()
        logger.info("request %s added (max_frames=%d)", rid, planned.max_frames)
        sent = 0
        try:
            while True:
                await box.event.wait()
                box.event.clear()
                if box.error is not None:
                    raise box.error
                frames, box.frames = box.frames, []
                finish = box.finish
                if frames or finish is not None:
                    codes = torch.stack(frames, dim=1) if frames else torch.zeros(self._info.num_channels, 0, dtype=torch.long)
                    chunk = FrameChunk(rid, codes, sent, finish)
                    sent += codes.shape[1]
                    if finish is not None:
                        logger.info("request %s finished: %s after %d frames", rid, finish.value, sent)
                    yield chunk
                if finish is not None:
                    return
        finally:
            # no await in here: a second cancel must not leave the id taken forever
            if box.ended.is_set():  # finished or failed: the worker is done with it, nothing to abort
                self._unregister(rid, box)
            else:  # the consumer left a live request: abort it; its id is free once the worker let go
                box.on_end = lambda: self._unregister(rid, box)
                self._abort(rid, box)

    async def abort(self, request_id: str) -> None:
        box = self._mailboxes.get(request_id)
        if box is not None and not box.ended.is_set():
            self._abort(request_id, box)

    def _abort(self, rid: str, box: _Mailbox) -> None:
        """Abort the request ``box`` belongs to (on the event loop): one not handed to the worker yet
        ends here; the worker drops one it holds at the start of its next step."""
        planned = box.planned
        assert planned is not None  # generate() gives each registered box its request
        with self._lock:
            waiting = len(self._incoming)
            self._incoming = [p for p in self._incoming if p is not planned]
            never_started = len(self._incoming) < waiting
            if not never_started:
                self._aborts.append(planned)
                self._lock.notify()
        if never_started:
            box.put(StepOutput(rid, None, FinishReason.ABORT))
        logger.info("request %s aborted", rid)

    def _unregister(self, rid: str, box: _Mailbox) -> None:
        if self._mailboxes.get(rid) is box:
            del self._mailboxes[rid]

    def _check_open(self) -> None:
        if self._dead is not None:
            raise EngineDeadError(f"torch engine stopped: {type(self._dead).__name__}: {self._dead}")
        if self._closed:
            raise EngineDeadError("torch engine is closed")
        if not self._thread.is_alive():
            raise EngineDeadError("torch engine stopped: its worker thread exited")

    async def check_health(self) -> None:
        self._check_open()

    def compress_reference(self, ref_codes: torch.Tensor) -> torch.Tensor:
        return self.model.compress(ref_codes)

    def default_prefix(self) -> torch.Tensor:
        return self.model.null_prefix.detach().float().cpu().clone()

    async def aclose(self) -> None:
        """Stop the worker; requests still open end with EngineDeadError, new ones are refused."""
        with self._lock:
            self._closed = True
            self._lock.notify()
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 10)
        self._fail_open(EngineDeadError("torch engine closed while the request was open"))

    # -- worker thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        gen = self._generator
        stalled = False  # the last step did nothing: its waiting requests cannot start until something changes
        try:
            while True:
                with self._lock:
                    while not (self._closed or self._incoming or self._aborts or (gen.has_work() and not stalled)):
                        # stalled, wait for an arrival, an abort or a close rather than spin; the
                        # timeout only guards against a wrong guess that nothing can move
                        if not self._lock.wait(timeout=STALL_RECHECK_S if stalled else None):
                            break
                    if self._closed:
                        return
                    for p in self._aborts:
                        # only the request it was made for: one that ended meanwhile is not live, and
                        # a new request under the same id never is before that one let go
                        if self._live.get(p.request_id) is p:
                            gen.abort(p.request_id)  # applied at the start of the next step
                    self._aborts.clear()
                    planned, self._incoming = self._incoming, []
                    self._embedding = len(planned)
                    for p in planned:
                        self._live[p.request_id] = p
                # outside the lock, so that the event loop never waits for device work to hand a request over
                failed = self._embed_into(gen, planned)
                if failed:
                    self._dispatch(failed)
                started = time.perf_counter()
                outputs = gen.step()  # per-request failures come back as outputs with an error
                duration = time.perf_counter() - started
                stalled = not outputs and not gen.last_batch_size
                self._dispatch(outputs)
                if gen.last_batch_size:  # a step that only dropped aborted requests computed nothing
                    self._steps += 1
                    notify(self._observer, StepEvent(duration, gen.last_batch_size, tuple(gen.last_queue_waits)))
        except BaseException as exc:  # device lost, or the batched step keeps failing: the loop must never die silently
            logger.exception("torch engine worker died")
            with self._lock:  # a request registers under the lock too: it sees _dead, or its box is told
                self._dead = exc
            self._fail_open(EngineDeadError(f"engine failed: {type(exc).__name__}: {exc}"))

    def _fail_open(self, err: EngineDeadError) -> None:
        """Tell every open request the engine is gone (called once ``_dead`` or ``_closed`` is set, so no
        request registers after the boxes are listed)."""
        with self._lock:
            boxes = list(self._mailboxes.values())
        for box in boxes:
            try:
                box.loop.call_soon_threadsafe(box.fail, err)
            except RuntimeError:  # its event loop closed meanwhile: nobody is listening
                pass

    def _embed_into(self, gen: BatchGenerator | FastGenerator, planned: list[PlannedRequest]) -> list[StepOutput]:
        """Embed each newly planned request and queue it on ``gen``; one whose prompt cannot be
        built fails alone (GenerationError), unless the device is lost."""
        failed = []
        for req in planned:
            try:
                gen.add(self.embed(req))
            except Exception as exc:
                if device_lost(exc):
                    raise
                message = f"request {req.request_id}: building its prompt failed: {type(exc).__name__}: {exc}"
                logger.error("%s", message)
                failed.append(StepOutput(req.request_id, None, error=GenerationError(message)))
            finally:
                self._embedding -= 1
        return failed

    def generated_frames(self, request_id: str) -> int:
        """Frames the worker has produced so far for a running request (0 once it is gone)."""
        return self._generated.get(request_id, 0)

    @property
    def num_running(self) -> int:
        return self._generator.num_active

    def stats(self) -> EngineStats:
        gen = self._generator  # read from another thread: each figure is one atomic read, good enough for monitoring
        return EngineStats(running=gen.num_active, waiting=self._queued(),
                           kv_cache_usage=gen.kv_cache_usage, preemptions=0, steps=self._steps)

    def set_step_observer(self, observer: Optional[StepObserver]) -> None:
        self._observer = observer

    @property
    def num_requests(self) -> int:
        # the asyncio side (mailboxes) or the worker (queued + running): a leak shows in either
        return max(len(self._mailboxes), self._generator.num_active + self._queued())

    def _queued(self) -> int:
        """Requests accepted and not running yet: handed over, being embedded, or waiting in the
        generator for a batch place (each an atomic read from the worker's side: good enough for
        a limit and for monitoring)."""
        return len(self._incoming) + self._embedding + len(self._generator.pending)

    def _dispatch(self, outputs: list[StepOutput]) -> None:
        """Hand a step's outputs to their mailboxes: one call into each event loop per step, not
        one per request (each cross-thread call wakes the loop: at 256 streams, 256 wake-ups cost
        the worker ~1.5 ms a step on a CPU core, as much as a whole decode step on a GPU)."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Mailbox, StepOutput]]] = {}
        for out in outputs:
            if out.codes is not None:
                self._generated[out.request_id] = self._generated.get(out.request_id, 0) + 1
            if out.finish_reason is not None or out.error is not None:
                # before the hand-over below: once its mailbox hears of the end, the id may be reused
                self._generated.pop(out.request_id, None)
                self._live.pop(out.request_id, None)
            box = self._mailboxes.get(out.request_id)
            if box is not None:
                by_loop.setdefault(box.loop, []).append((box, out))
        for loop, deliveries in by_loop.items():
            if loop.is_closed():
                continue
            try:
                loop.call_soon_threadsafe(_deliver, deliveries)
            except RuntimeError:  # its event loop closed meanwhile: nobody is listening
                pass


def _deliver(deliveries: list[tuple[_Mailbox, StepOutput]]) -> None:
    """On the event loop: one step's outputs into their mailboxes, in step order."""
    for box, out in deliveries:
        box.put(out)


__all__ = ["TorchEngine", "TorchEngineConfig", "GenerationError"]
