"""The torch backend's fast decode path: ``FastGenerator``, a drop-in for ``BatchGenerator``.

Same contract as the reference loop (engine.backends.torch_generator, the source of truth): ``add``,
``abort``, ``step() -> [StepOutput]``, and the same frames for the same request, seed and knobs.
What differs is how a step runs:

- a ``StaticKVCache`` of ``slots`` x ``max_positions`` allocated once and never grown; a request
  takes the lowest free slot (two with CFG) and gives it back when it leaves;
- the decode step has a fixed shape per (batch bucket, span bucket): row i of the step is cache
  slot i, for the first B slots (B = 1, 2, 4, ... up to the slots: the smallest bucket holding
  every slot in use), so attention reads the cache as a view and the next power-of-two span of
  positions; rows of free slots are padding, which write only a scratch slot. When requests leave
  from low slots while others run on in high ones, the step would stay at the high slots' bucket:
  before a decode step, requests in slots at or past the bucket their number needs are moved into
  the free slots below it (``_compact``: one copy of their cached keys, values and sampling state),
  so the step's shape follows the number of rows, not the history of joins. On CUDA each shape
  is a captured graph, replayed; on CPU the same step runs eagerly (engine.backends.cuda_graphs);
  with ``compiled`` its parts go through torch.compile first (fast_step.compile_part), and with
  ``fused_kernels`` (the default on CUDA, uncompiled) each layer's norms, rotary, attention gate
  and SwiGLU activation run as one Triton kernel each (the queries' and keys' together), a
  decode step's inputs as two, and the sampling and commit as two (engine.backends.layer_ops);
- sampling (all 32 heads, the stop head, CFG, repetition penalty, the per-request noise streams)
  and each request's state (last frame, frame index, repetition window) live on the device, so the
  host only uploads row tables when the batch changes and waits once per step, for one copy of
  the new codes and stop flags (pinned and non-blocking on CUDA);
- new requests are prefilled as one padded batch (at most ``prefill_batch`` requests, by default
  64 on CUDA and 8 on CPU (``default_prefill_batch``), and ``prefill_tokens`` padded tokens) after
  the running requests' decode in the same step, so at most one prefill batch sits between two
  decode steps of a running stream; with
  ``prefill_graphs`` (CUDA graphs on) the batch is padded further, to power-of-two rows and tokens,
  and its shape's captured graph replays (padding rows write the scratch slot only);
- with ``overlap``, ``step()`` launches the next decode step before it reads the results of the
  one the last call launched, so on CUDA the host's bookkeeping (results to outputs, admission,
  the engine's dispatch) runs while the device computes. Frames are handed out one call later; a
  request is never launched past its frame cap, and one that stops has had one more frame
  launched, which is dropped (everything on the device runs in stream order, so a slot handed to
  a new request is reset after that frame's step has written it);
- more requests than slots wait in ``pending`` (FIFO) until slots free up; a request whose prompt
  plus frame cap does not fit ``max_positions``, or that needs more slots than there are (CFG with
  one slot), is refused by the engine before it starts (``check_fits``), and fails at admission
  when handed to the generator directly.

Failures are contained as in the reference loop: a request whose knobs no tensor can hold or
whose frame holds an invalid code fails alone (its slot scrubbed); a failed prefill batch fails
its requests; a failed decode step fails the running batch and clears the cache in place (the
captured graphs stay valid); ``MAX_FAILED_STEPS`` in a row, or a lost device, propagate. A CUDA
graph capture that fails (a refused capture, no memory for the graph's pool) costs the graphs, not
the requests: the decode steps, or the prefills, run eagerly from then on (one ERROR line).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from codec_worker.device_errors import device_lost, error_summary
from engine.backends.cuda_graphs import HostCopy, StepGraphs, TableUpload, is_cuda, new_engine_stream, on_stream
from engine.backends.fast_step import OUT_BAD, OUT_STOP, DeviceStep, HostRows, RowTables
from engine.backends.layer_ops import fuses_by_default
from engine.backends.static_cache import SlotAllocator, StaticKVCache, pick_bucket, power_buckets, to_device
from engine.backends.torch_generator import BatchLoop, PlannedRequest, PreparedRequest, StepOutput, _check_knobs
from engine.errors import InvalidRequestError
from engine.model.gepard import GepardModel
from engine.requests import MAX_FRAMES, FinishReason
from engine.sampling import describe_invalid_code

logger = logging.getLogger(__name__)

PATHS = ("auto", "reference", "fast")
SMALLEST_SPAN = 128  # attention spans are 128, 256, ... positions, then max_positions
SMALLEST_PREFILL = 16  # with prefill_graphs, prompts are padded to 16, 32, ... tokens, then max_positions


def choose_path(path: str, device: torch.device) -> str:
    """``auto`` is the fast path on CUDA and the reference loop elsewhere."""
    if path not in PATHS:
        raise ValueError(f"unknown torch path {path!r}; choose one of {', '.join(PATHS)}")
    if path == "auto":
        return "fast" if is_cuda(device) else "reference"
    return path


def slots_needed(req: PreparedRequest | PlannedRequest) -> int:
    """KV cache slots a request takes: one, and one more for its CFG branch."""
    return 1 + (req.uncond_len is not None)


def positions_needed(req: PreparedRequest | PlannedRequest) -> int:
    """Cache positions a request may use: its prompt plus its frame cap (CFG branch likewise)."""
    return max(req.prompt_len, req.uncond_len or 0) + req.max_frames


@dataclass(eq=False)  # compared by identity: the row tables hold exactly these objects
class _Running:
    req: PreparedRequest
    slot: int
    uncond_slot: int = -1  # -1: no CFG branch (any more)
    frames: int = 0  # frames handed out
    launched: int = 0  # frames whose steps were launched (ahead of ``frames`` while a step is in flight)
    length: int = 0  # host mirror of the cond slot's cached tokens
    uncond_length: int = 0


@dataclass
class _Launched:
    """A decode step on its way: its requests, the row of each in its results, its results' copy."""

    rows: list[_Running]
    at: list[int]
    out: HostCopy


@dataclass
class _PrefillInputs:
    """A captured prefill shape's inputs, written before each replay: prompts right-padded to the
    shape (embeds [R, T, H]), their lengths [R] and slots [R] (padding rows: 1 and the scratch slot)."""

    embeds: torch.Tensor
    lengths: torch.Tensor
    slots: torch.Tensor


def default_prefill_batch(device: torch.device) -> int:
    """New requests prefilled together in one step when the caller does not say. A burst of N new
    streams waits N / this many steps for its last first frame. On a GPU a prefill of a few
    thousand tokens is bound by its launches, not its arithmetic: on an H200 one of 8 prompts (57
    tokens each) took 20.5 ms against 20.0 for one, and at 256 streams started at once the first
    frame came 1.0 s late at p50 (the burst took 32 steps of 8 to start). 64 prompts are ~4 TFLOP,
    a few ms there; the token cap (``prefill_tokens``) still bounds the step. On a CPU the
    arithmetic is the cost, and a large prefill stalls every running stream's next frame."""
    return 64 if device.type == "cuda" else 8


class FastGenerator(BatchLoop):
    def __init__(self, model: GepardModel, max_batch: int = 32, slots: Optional[int] = None, max_positions: int = 4096,
                 prefill_batch: Optional[int] = None, prefill_tokens: int = 8192, cuda_graphs: bool = True,
                 compiled: bool = False, overlap: bool = False, prefill_graphs: bool = False,
                 fused_kernels: Optional[bool] = None, stream_priority: str = "high") -> None:
        super().__init__(max_batch)
        self.model = model
        self.slots = slots or max_batch
        self.max_positions = max_positions
        device = model.device
        self.prefill_batch = max(1, prefill_batch if prefill_batch is not None else default_prefill_batch(device))
        self.prefill_tokens = prefill_tokens
        self.cache = StaticKVCache.allocate(model.config.backbone, self.slots, max_positions, device, model.dtype)
        self.allocator = SlotAllocator(self.slots)
        self.device_step = DeviceStep(model, self.cache, max_frames=min(MAX_FRAMES, max_positions), compiled=compiled)
        self._fuse_kernels(fused_kernels, device, compiled)
        self.batch_buckets = power_buckets(self.slots)
        self.span_buckets = power_buckets(max_positions, smallest=min(SMALLEST_SPAN, max_positions))
        self.level_counts = list(model.config.audio_heads)
        self._tables: dict[int, RowTables] = {}
        self._upload = TableUpload(self.slots, device)
        self._prefill_upload = TableUpload(self.slots, device)  # a prefill's rows: one per slot it fills
        # two result buffers: with ``overlap`` one step's copy lands while the host reads the last one's
        self._decode_outs = (HostCopy(self.slots, 34, device), HostCopy(self.slots, 34, device))
        self._launches = 0
        self.overlap = overlap
        self._inflight: Optional[_Launched] = None  # overlap: the decode launched by the last step()
        self._prefill_out = HostCopy(self.slots, 34, device)
        self.stream_priority = stream_priority
        self.stream = new_engine_stream(device, stream_priority)  # CUDA, high: above the codec's (cuda_graphs)
        self.graphs = StepGraphs(device) if cuda_graphs and is_cuda(device) else None
        self.graphs_asked = self.graphs is not None  # so graphs None on CUDA later means a capture failed
        # the prefill as graphs too (CUDA graphs on), keyed by (prompts, tokens) padded to buckets:
        # eager, a lone prompt's prefill is ~1,300 kernel launches (20 ms on an H200, most of a
        # stream's time to first frame); every shape captured by capture_all (the engine's start), any
        # other at its first use
        self.prefill_graphs = (StepGraphs(device, what="the prefill of %d prompts of %d tokens")
                               if prefill_graphs and self.graphs is not None else None)
        self.prefill_token_buckets = power_buckets(max_positions, smallest=min(SMALLEST_PREFILL, max_positions))
        self._prefill_inputs: dict[tuple[int, int], _PrefillInputs] = {}
        self._prefill_embeds: Optional[torch.Tensor] = None  # flat; every shape's embeds are a view of it
        self._prefill_tables: dict[int, RowTables] = {}
        self._rows: list[_Running] = []  # the order of the requests in the uploaded row tables
        self._bucket = 0  # the bucket whose tables hold ``_rows`` (0: none uploaded / stale)
        self.last_shape: tuple[int, int] = (0, 0)  # (batch bucket, span) of the last decode step
        self.slot_moves = 0  # requests' slots moved down by ``_compact`` so far
        logger.info("torch fast path: %d KV slots x %d positions (%.2f GiB, %s), batch buckets %s, CUDA graphs %s, "
                    "compiled step %s, overlapped steps %s, prefill graphs %s, fused kernels %s", self.slots, max_positions,
                    self.cache.nbytes / 2**30, model.dtype, list(self.batch_buckets),
                    "on" if self.graphs is not None else "off", "on" if compiled else "off", "on" if overlap else "off",
                    "on" if self.prefill_graphs is not None else "off", "on" if self.fused_kernels else "off")

    def _fuse_kernels(self, wanted: Optional[bool], device: torch.device, compiled: bool) -> None:
        """The layers' norms, rotary, gate and SwiGLU activation as Triton kernels
        (``DeviceStep.fuse_kernels``): ``wanted`` None is the setting's auto (on for CUDA unless
        compiled). Here, before any graph capture. A kernel that cannot run, or that fails its
        check against the eager ops, is logged and the layers stay eager; a lost device
        (``device_lost``) raises, since the eager ops could not run on it either."""
        if not (fuses_by_default(device, compiled) if wanted is None else wanted):
            return
        try:
            self.device_step.fuse_kernels()
        except Exception as exc:  # noqa: BLE001 (any failure but a lost device: serve with the eager ops)
            if device_lost(exc):
                raise
            # the first line: a Triton compile error runs to pages of IR; its checks' messages are one line
            logger.warning("torch fast path: the layers' element-wise ops stay eager: %s", error_summary(exc))
        else:
            logger.info("torch fast path: each layer's norms, rotary, attention gate and SwiGLU activation, the "
                        "sampling and the commit of each step run as one Triton kernel each, a decode step's "
                        "inputs as two")

    @property
    def fused_kernels(self) -> bool:
        """Whether the layers run the fused kernels (``fused_kernels`` asked, and their check passed)."""
        return self.device_step.ops.fused

    # -- bookkeeping (the BatchGenerator surface TorchEngine uses) ---------------------------------
    @property
    def kv_cache_usage(self) -> float:
        """Slots in use / slots (0..1; see engine.stats)."""
        return self.allocator.used / self.slots

    def check_fits(self, req: PreparedRequest | PlannedRequest) -> None:
        """InvalidRequestError when the request could never fit the cache (before it starts)."""
        problem = self._never_fits(req)
        if problem is not None:
            raise InvalidRequestError(problem)
        need = positions_needed(req)
        if need > self.max_positions:
            raise InvalidRequestError(
                f"request needs {need} KV cache positions (prompt {max(req.prompt_len, req.uncond_len or 0)} + max_frames "
                f"{req.max_frames}) but the torch fast path's cache holds {self.max_positions} per request; "
                "lower max_frames or shorten the text")

    @property
    def cfg_unavailable(self) -> Optional[str]:
        """Why no CFG request can ever run here (None: one can): it takes two slots."""
        if self.slots >= 2:
            return None
        return f"a CFG request takes two KV cache slots and this torch fast path has {self.slots}"

    def _never_fits(self, req: PreparedRequest | PlannedRequest) -> Optional[str]:
        """Why ``req`` needs more slots than the cache has (None: it fits once enough are free): such
        a request would wait at the head of the queue forever, and every request behind it too."""
        if slots_needed(req) <= self.slots:
            return None
        return (f"classifier-free guidance (cfg_scale {req.sampling.cfg_scale}) needs two KV cache slots but this "
                f"engine's torch fast path has {self.slots}; raise its concurrency (max_batch / kv_slots) to 2 or "
                "more, or drop cfg_scale")

    def _release(self, st: _Running, scrub: bool = False) -> None:
        for slot in (st.slot, st.uncond_slot):
            if slot >= 0:
                if scrub:
                    self.cache.scrub(slot)
                self.allocator.give_back(slot)
        st.slot = st.uncond_slot = -1
        if self.active.get(st.req.request_id) is st:
            del self.active[st.req.request_id]
        self._bucket = 0

    # -- the step ------------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self) -> list[StepOutput]:
        outputs: list[StepOutput] = []
        self.last_queue_waits = []
        with on_stream(self.stream):
            # 1) aborts free their slots before anything else runs
            outputs.extend(self._apply_aborts())

            # 2) launch the running requests' decode step; 3) then one prefill batch behind it
            rows = self._decode_rows()
            if rows:
                self._compact()
            self.last_batch_size = len(rows)
            launched = self._guarded(outputs, lambda: self._launch_decode(rows)) if rows else None
            admitted = self._admit(outputs)
            prefilled = self._launch_prefill(admitted, outputs) if admitted else None

            # 4) the one wait of the step, then the host's bookkeeping: for the step just launched, or
            # with ``overlap`` for the one the last call launched, while the device runs this one
            if self.overlap:
                launched, self._inflight = self._inflight, launched
            if launched is not None:
                results = self._guarded(outputs, launched.out.wait)
                if results is not None:
                    outputs.extend(self._finish(launched.rows, launched.at, results, stop_checked=True))
                    self.failed_steps = 0
            if prefilled is not None:
                outputs.extend(self._finish(prefilled, list(range(len(prefilled))), self._prefill_out.wait(),
                                            stop_checked=False))
        self.last_batch_size = self.last_batch_size or len(admitted)
        return outputs

    def _guarded(self, outputs: list[StepOutput], fn):
        """Run a part of the batched decode; a failure no request can be blamed for fails the batch."""
        try:
            return fn()
        except Exception as exc:
            if device_lost(exc):
                raise
            outputs.extend(self._fail_batch(exc))
            return None

    def _reset_after_failed_step(self) -> None:
        self.active, self._rows, self._bucket, self._inflight = {}, [], 0, None
        self.allocator.reset()
        self.device_step.clear()  # in place: captured graphs keep pointing at the same tensors

    # -- decode --------------------------------------------------------------------------------------
    def tables(self, bucket: int, prefill: bool = False) -> RowTables:
        """The row tables of a decode bucket, or of a prefill shape's rows (kept apart: the decode
        tables keep the running batch's rows between steps)."""
        store = self._prefill_tables if prefill else self._tables
        t = store.get(bucket)
        if t is None:
            t = store[bucket] = RowTables.allocate(bucket, self.cache.scratch, self.model.device)
        return t

    def _host_rows(self, rows: list[_Running], bucket: int) -> HostRows:
        """Row i is slot i: a request's cond row at its slot, its CFG row at its second slot."""
        image = HostRows.padding(bucket, self.cache.scratch)
        for st in rows:
            i = st.slot
            image.slot[i] = image.feed[i] = i
            image.real[i] = image.commit[i] = True
            if st.uncond_slot >= 0:
                j = st.uncond_slot
                image.slot[j], image.feed[j], image.real[j] = j, i, True
                image.uncond[i] = j
                image.cfg_scale[i] = float(st.req.sampling.cfg_scale)
        return image

    def _decode_rows(self) -> list[_Running]:
        """The requests the next decode step is for: every running one that has frames left to
        launch (with ``overlap``, one whose in-flight step makes its last frame is not launched again;
        one whose in-flight step stops it is, and that frame is dropped). A CFG branch whose
        guidance is over (``cfg_frames``) leaves here, before the step that would use it."""
        rows = []
        for st in self.active.values():
            cfg_frames = st.req.sampling.cfg_frames
            if st.uncond_slot >= 0 and cfg_frames is not None and st.launched >= cfg_frames:
                self.allocator.give_back(st.uncond_slot)
                st.uncond_slot, self._bucket = -1, 0
            if st.launched < st.req.max_frames:
                rows.append(st)
        return rows

    def _compact(self) -> None:
        """Move the requests in slots at or past the bucket that the slots in use need into the
        lowest free slots, so the decode step runs at that bucket (row i is slot i: the bucket
        otherwise follows the highest slot in use). Frames do not change: a request's noise depends
        on its seed and frame index, not its slot. Everything on the device runs in stream order, so
        with ``overlap`` the copy reads the slots after the step in flight has written them (whose
        results are still read by the rows they were launched at)."""
        owners: dict[int, tuple[_Running, bool]] = {}  # slot -> (request, is its CFG slot)
        for st in self.active.values():
            owners[st.slot] = (st, False)
            if st.uncond_slot >= 0:
                owners[st.uncond_slot] = (st, True)
        if not owners:
            return
        limit = pick_bucket(self.batch_buckets, self.allocator.used)
        movers = sorted(slot for slot in owners if slot >= limit)
        if not movers:
            return
        # the lowest free slots; there are enough below ``limit``: it holds all the slots in use
        targets = [self.allocator.take() for _ in movers]
        assert max(targets) < limit, (targets, limit)
        positions = max(owners[s][0].uncond_length if owners[s][1] else owners[s][0].length for s in movers)
        self.device_step.move_slots(movers, targets, positions)
        for src, dst in zip(movers, targets):
            st, is_uncond = owners[src]
            if is_uncond:
                st.uncond_slot = dst
            else:
                st.slot = dst
            self.allocator.give_back(src)
        self.slot_moves += len(movers)
        self._bucket = 0  # the rows moved: new row tables
        logger.debug("compacted %d request slot(s) into the first %d", len(movers), limit)

    def _launch_decode(self, rows: list[_Running]) -> "_Launched":
        """Start the decode step of ``rows``; its results come through the returned ``_Launched``."""
        highest = max(max(st.slot, st.uncond_slot) for st in rows)
        bucket = pick_bucket(self.batch_buckets, highest + 1)
        tables = self.tables(bucket)
        if self._bucket != bucket or self._rows != rows:  # the batch changed: new row tables
            self._upload(tables, self._host_rows(rows, bucket))
            self._rows, self._bucket = rows, bucket
        longest = max(max(st.length, st.uncond_length) for st in rows)
        span = pick_bucket(self.span_buckets, longest + 1)

        def run() -> None:
            self.device_step.decode(tables, span)

        if self.graphs is not None and (bucket, span) not in self.graphs \
                and not self._captured(self.graphs, (bucket, span), run, tables, "decode steps"):
            self.graphs = None
        if self.graphs is not None:
            self.graphs.replay((bucket, span), run, tables)
        else:
            run()
        self.last_shape = (bucket, span)
        for st in rows:
            st.length += 1
            st.launched += 1
            if st.uncond_slot >= 0:
                st.uncond_length += 1
        out = self._decode_outs[self._launches % 2]
        self._launches += 1
        out.start(tables.out)
        return _Launched(rows, [st.slot for st in rows], out)

    # -- admission and prefill -----------------------------------------------------------------------
    def _admit(self, outputs: list[StepOutput]) -> list[_Running]:
        """Take pending requests (FIFO) that fit: free slots, max_batch, one prefill batch."""
        batch: list[_Running] = []
        longest = 0
        while self.pending and len(self.active) + len(batch) < self.max_batch and len(batch) < self.prefill_batch:
            req = self.pending[0]
            never = self._never_fits(req)  # the engine refuses these; a direct caller may not
            if never is not None:
                self.pending.pop(0)
                outputs.append(self._fail(_Running(req, slot=-1), never))
                continue
            need = slots_needed(req)
            if self.allocator.free < need:
                break  # wait for slots; the queue keeps its order
            length = max(req.prompt_len, req.uncond_len or 0)
            rows = sum(1 + (b.uncond_slot >= 0) for b in batch) + need
            if batch and rows * max(longest, length) > self.prefill_tokens:
                break
            self.pending.pop(0)
            if req.submitted_at:
                self.last_queue_waits.append(max(0.0, time.monotonic() - req.submitted_at))
            st = _Running(req, slot=-1)
            try:
                _check_knobs(req)
                if positions_needed(req) > self.max_positions:  # the engine refuses these; a direct caller may not
                    raise InvalidRequestError(f"needs {positions_needed(req)} KV cache positions, the cache holds "
                                              f"{self.max_positions}")
            except Exception as exc:
                outputs.append(self._fail(st, f"generation failed at prefill: {type(exc).__name__}: {exc}"))
                continue
            st.slot = self.allocator.take()
            if req.uncond_embeds is not None:
                st.uncond_slot = self.allocator.take()
            batch.append(st)
            longest = max(longest, length)
        return batch

    def _launch_prefill(self, batch: list[_Running], outputs: list[StepOutput]) -> Optional[list[_Running]]:
        try:
            self._prefill(batch)
        except Exception as exc:  # their prompts, knobs or memory: the prefill batch fails, the others go on
            if device_lost(exc):
                raise
            logger.exception("prefill of %d request(s) failed", len(batch))
            for st in batch:
                outputs.append(self._fail(st, f"generation failed at prefill: {type(exc).__name__}: {exc}"))
            return None
        for st in batch:
            self.active[st.req.request_id] = st
        self._bucket = 0
        return batch

    def _prefill(self, batch: list[_Running]) -> None:
        model, step = self.model, self.device_step
        sp_knobs = [(float(st.req.sampling.temperature), int(st.req.sampling.top_k), int(st.req.seed),
                     float(st.req.sampling.stop_threshold), float(st.req.sampling.repetition_penalty),
                     int(st.req.sampling.repetition_window)) for st in batch]
        step.state.admit([st.slot for st in batch], sp_knobs)
        prompts = [(st.slot, st.req.prompt_embeds) for st in batch]
        prompts += [(st.uncond_slot, st.req.uncond_embeds) for st in batch if st.uncond_slot >= 0]
        r, t = len(prompts), max(e.shape[0] for _, e in prompts)
        scratch = self.cache.scratch
        if self.prefill_graphs is not None:  # padded to a captured shape: padding rows fill the scratch slot
            r, t = pick_bucket(self.batch_buckets, r), pick_bucket(self.prefill_token_buckets, t)
            inputs = self._prefill_buffers(r, t)
            embeds = inputs.embeds
            embeds.zero_()
        else:
            embeds = torch.zeros(r, t, model.config.hidden_size, device=model.device, dtype=model.dtype)
        for i, (_, e) in enumerate(prompts):
            embeds[i, : e.shape[0]] = e
        padding = r - len(prompts)
        lengths = to_device([e.shape[0] for _, e in prompts] + [1] * padding, torch.int64, model.device)
        slots = to_device([s for s, _ in prompts] + [scratch] * padding, torch.int64, model.device)

        # frame 0 of each request is sampled from its prompt's row: rows as in a decode step (cond
        # rows, then CFG rows)
        tables = self.tables(r, prefill=True) if self.prefill_graphs is not None else RowTables.allocate(r, scratch, model.device)
        image = HostRows.padding(r, scratch)
        j = len(batch)
        for i, st in enumerate(batch):
            image.slot[i] = image.feed[i] = st.slot
            image.real[i] = image.commit[i] = True
            st.length, st.launched = st.req.prompt_embeds.shape[0], 1
            if st.uncond_slot >= 0:
                image.slot[j], image.feed[j], image.real[j] = st.uncond_slot, st.slot, True
                image.uncond[i], image.cfg_scale[i] = j, float(st.req.sampling.cfg_scale)
                st.uncond_length = st.req.uncond_embeds.shape[0]
                j += 1
        self._prefill_upload(tables, image)
        if self.prefill_graphs is not None:
            inputs.lengths.copy_(lengths)
            inputs.slots.copy_(slots)
            self._replay_prefill((r, t), inputs, tables)
        else:
            step.prefill(embeds, lengths, slots, tables)
        self._prefill_out.start(tables.out[: len(batch)])

    def _prefill_buffers(self, rows: int, tokens: int) -> "_PrefillInputs":
        inputs = self._prefill_inputs.get((rows, tokens))
        if inputs is None:
            model, device = self.model, self.model.device
            hidden = model.config.hidden_size
            # one buffer for every shape's prompts, sized for the largest: the prefills run one at a
            # time on the engine's stream, each writing its prompts just before it runs. Held per
            # shape, the ~55 shapes captured at start would hold ~0.4 GB in bf16 at full size, not 32 MB.
            if self._prefill_embeds is None or self._prefill_embeds.numel() < rows * tokens * hidden:
                largest = max(r * t for r, t in [*self.prefill_shapes(), (rows, tokens)])
                self._prefill_embeds = torch.zeros(largest * hidden, device=device, dtype=model.dtype)
            inputs = self._prefill_inputs[(rows, tokens)] = _PrefillInputs(
                self._prefill_embeds[: rows * tokens * hidden].view(rows, tokens, hidden),
                torch.ones(rows, dtype=torch.int64, device=device),
                torch.full((rows,), self.cache.scratch, dtype=torch.int64, device=device))
        return inputs

    def _replay_prefill(self, key: tuple[int, int], inputs: "_PrefillInputs", tables: RowTables) -> None:
        """The prefill of ``key``'s shape as a graph (captured now if ``capture_all`` did not)."""
        def run() -> None:
            self.device_step.prefill(inputs.embeds, inputs.lengths, inputs.slots, tables)

        if key not in self.prefill_graphs and not self._capture_prefill(key, inputs, tables):
            run()  # the capture failed (logged): this prefill, and every later one, runs eagerly
            return
        self.prefill_graphs.replay(key, run, tables)

    def _capture_prefill(self, key: tuple[int, int], inputs: "_PrefillInputs", tables: RowTables) -> bool:
        """Capture the prefill of ``key``'s shape over its buffers; False (and no prefill graphs
        from then on) when the capture failed. The warm-up run before a capture really executes, so
        for it every row is padding (slots: the scratch slot, lengths 1; StepGraphs pads the
        tables): it writes only the scratch slot. The buffers are as they were afterwards."""
        saved = inputs.slots.clone(), inputs.lengths.clone()
        inputs.slots.fill_(self.cache.scratch)
        inputs.lengths.fill_(1)
        try:
            captured = self._captured(self.prefill_graphs, key, lambda: self.device_step.prefill(
                inputs.embeds, inputs.lengths, inputs.slots, tables), tables, "prefills")
        finally:
            inputs.slots.copy_(saved[0])
            inputs.lengths.copy_(saved[1])
        if not captured:
            self.prefill_graphs = None
        return captured

    def prefill_shapes(self) -> list[tuple[int, int]]:
        """Every (prompts, tokens) shape a prefill can be padded to (``prefill_graphs``), smallest
        first: prompts a batch bucket up to the most one prefill holds (``prefill_batch``
        requests, two prompts each with CFG, one per slot), tokens a bucket up to the cache. A
        shape is left out when even the fewest prompts and tokens that pad to it cannot meet in one
        prefill: admission (``_admit``) adds a request to a batch only while prompts x longest
        prompt stay within ``prefill_tokens``, and the first request (one or two prompts) alone
        may be of any length."""
        most_prompts = min(2 * min(self.prefill_batch, self.max_batch), self.slots)
        shapes = []
        for i, rows in enumerate(self.batch_buckets):
            fewest_prompts = self.batch_buckets[i - 1] + 1 if i else 1
            if fewest_prompts > most_prompts:
                break
            for j, tokens in enumerate(self.prefill_token_buckets):
                shortest = self.prefill_token_buckets[j - 1] + 1 if j else 1
                if fewest_prompts > 2 and fewest_prompts * shortest > self.prefill_tokens:
                    break
                shapes.append((rows, tokens))
        return shapes

    def _captured(self, graphs: StepGraphs, key: tuple[int, int], step: Callable[[], None], tables: RowTables,
                  work: str) -> bool:
        """Capture ``key``'s shape into ``graphs``: whether it worked. A capture that fails without
        losing the device (``device_lost``: a refused capture does not, see ``capture_refused``; nor
        does running out of memory for the graph's pool) costs the graphs, not the requests: one
        ERROR line, and the caller runs ``work`` eagerly from then on, with the tables as they were.
        Eagerly, the same step runs without the graph's launch savings and memory pool."""
        try:
            graphs.capture(key, step, tables)
        except Exception as exc:
            if device_lost(exc):
                raise
            logger.error("torch fast path: capturing %s failed (%s); %s run eagerly from now on", graphs.what % key,
                         error_summary(exc), work)
            return False
        return True

    # -- results -------------------------------------------------------------------------------------
    def _finish(self, rows: list[_Running], at: list[int], results: torch.Tensor, stop_checked: bool) -> list[StepOutput]:
        """Each request's frame from ``results[at[i]]`` (decode: its slot's row; prefill: its place)."""
        outputs: list[StepOutput] = []
        # one clone, one unbind and one tolist for the batch (per-row tensor ops cost microseconds
        # each: indexing the rows one by one took twice the unbind's time at 256 rows)
        all_codes = results[:, :OUT_STOP].clone().unbind(0)
        flags = results[:, OUT_STOP:].tolist()
        for st, i in zip(rows, at):
            if self.active.get(st.req.request_id) is not st:
                continue  # ended meanwhile (a failed batch)
            stop, bad = flags[i][0], flags[i][OUT_BAD - OUT_STOP]
            if stop_checked and stop:  # stop head (cond branch): no frame at this position
                outputs.append(StepOutput(st.req.request_id, None, FinishReason.STOP))
                self._release(st)
                continue
            codes = all_codes[i]
            if bad:
                reason = describe_invalid_code(codes, self.level_counts)
                outputs.append(self._fail(st, f"{reason} at frame {st.frames}; the request was ended"))
                continue
            st.frames += 1
            if st.frames >= st.req.max_frames:
                outputs.append(StepOutput(st.req.request_id, codes, FinishReason.LENGTH))
                self._release(st)
            else:
                outputs.append(StepOutput(st.req.request_id, codes))
        return outputs

    # -- warm-up ---------------------------------------------------------------------------------------
    def compile_all(self) -> int:
        """Compile the decode step and the prefill now rather than at their first use (``compiled``).
        torch.compile specialises a size of 1 and a span equal to the whole cache, so one decode step
        per such shape class, on padding rows only, and a prefill of one prompt and of several, into
        the scratch slot only, compile everything: no request waits for a compile later. On CUDA,
        ``capture_all`` then captures the compiled decode step. Returns the number of warm-up runs
        (0 when not compiled); the cache and every slot's state are as before."""
        if self.active or self._inflight is not None:  # its warm-ups write the scratch slot's length
            raise RuntimeError("compile_all() runs before the first request")
        if not self.device_step.compiled:
            return 0
        step, scratch, device = self.device_step, self.cache.scratch, self.model.device
        shapes = {(bucket, span) for bucket in (self.batch_buckets[0], self.batch_buckets[-1])
                  for span in (self.span_buckets[0], self.span_buckets[-1])}
        prompts = self._warm_up_prompts()
        with on_stream(self.stream), torch.no_grad():
            for rows, tokens in prompts:
                step.prefill(torch.zeros(rows, tokens, self.model.config.hidden_size, device=device, dtype=self.model.dtype),
                             torch.full((rows,), tokens, dtype=torch.int64, device=device),
                             torch.full((rows,), scratch, dtype=torch.int64, device=device),
                             RowTables.allocate(rows, scratch, device))
            self.cache.lengths[scratch] = 0
            for bucket, span in sorted(shapes):
                step.decode(RowTables.allocate(bucket, scratch, device), span)  # every row padding
        return len(prompts) + len(shapes)

    def _warm_up_prompts(self) -> list[tuple[int, int]]:
        """(rows, tokens) of the prefills that compile the prefill: one prompt, then several. Their
        sizes differ from every size of the model and the cache, because torch.compile gives sizes
        that are equal when it traces one symbol, and would compile again for the first prefill
        whose sizes are not."""
        bb = self.model.config.backbone
        taken = {1, self.slots + 1, self.max_positions, self.model.config.hidden_size, bb.num_attention_heads,
                 bb.num_key_value_heads, bb.head_dim, bb.num_attention_heads * bb.head_dim,
                 bb.rotary_dim, bb.intermediate_size,
                 *self.device_step.weights[0].qkv.shape, *self.device_step.weights[0].gate_up.shape}
        rows = next(n for n in range(3, 1000) if n not in taken)
        tokens = next(n for n in range(min(37, self.max_positions - 1), 0, -1) if n not in taken | {rows})
        return [(1, tokens), (rows, tokens)]

    def capture_all(self, max_span: Optional[int] = None) -> int:
        """Capture every (bucket, span) graph of the decode step up to ``max_span``, and with
        ``prefill_graphs`` every prefill shape (``prefill_shapes``), now rather than at first use,
        where a capture would delay that request's first frame and every running stream's next
        (CUDA; a no-op on CPU). Returns the number of decode graphs held: 0 when a capture failed,
        and the decode step then runs eagerly (``_captured``); a failed prefill capture leaves the
        prefills eager."""
        if self.graphs is None:
            return 0
        with on_stream(self.stream), torch.no_grad():
            for key in self.prefill_shapes() if self.prefill_graphs is not None else ():
                if key not in self.prefill_graphs and not self._capture_prefill(
                        key, self._prefill_buffers(*key), self.tables(key[0], prefill=True)):
                    break
            for bucket in self.batch_buckets:
                tables = self.tables(bucket)
                self._bucket = 0
                for span in self.span_buckets:
                    if max_span is not None and span > max_span:
                        break
                    if (bucket, span) not in self.graphs and not self._captured(
                            self.graphs, (bucket, span), lambda: self.device_step.decode(tables, span), tables,
                            "decode steps"):
                        self.graphs = None
                        return 0
            torch.cuda.synchronize(self.model.device)
        return len(self.graphs.graphs)


__all__ = ["FastGenerator", "PATHS", "choose_path", "positions_needed", "slots_needed"]
