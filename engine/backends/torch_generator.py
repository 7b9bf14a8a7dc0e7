"""The reference generation loop: continuous batching over a row-based KV cache, synchronous.

``BatchGenerator.step()`` advances every active request by one frame:

    1) drop aborted requests (their rows are freed before any more compute is spent on them)
    2) one batched decode step for the requests already running: feed each row its previous
       frame, check the stop head (cond branch only), sample the next frame from the rest
    3) prefill newly added requests one by one and sample their frame 0 (no stop check at SOS)

Failures are contained per request where they can be attributed: a request whose prefill raises,
or whose sampled frame holds a code outside its channel's levels (checked before the frame is fed
back: past the last channel's embedding table it would crash the next step), ends alone with
GenerationError in ``StepOutput.error`` and its cache rows are scrubbed. A failure of the batched
decode step cannot be pinned on one request: every request in that batch fails, the cache is
replaced by a fresh one and generation goes on with the requests still waiting. Only a lost device
(CUDA error) or ``MAX_FAILED_STEPS`` failed decode steps in a row propagate out of ``step()``.

Each request owns one cache row (two with CFG: the unconditional branch is a row of its own that
is fed the same frames and dropped after ``cfg_frames``). Active rows are kept compacted at the
front of the cache so a batch is a view. The loop is the behavioural source of truth the vLLM
backend is tested against.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from codec_worker.device_errors import device_lost
from engine.errors import EngineDeadError, EngineError, GenerationError
from engine.model.backbone import KVCache
from engine.model.gepard import GepardModel
from engine.requests import FinishReason, SamplingParams
from engine.sampling import (
    cfg_combine,
    describe_invalid_code,
    invalid_codes,
    repetition_penalty,
    sample_codes,
    seen_mask,
    stop_decision,
)

logger = logging.getLogger(__name__)

# Unattributable (batched decode) failures in a row after which the engine is declared dead: one is
# a request we could not pin down; several in a row, with fresh caches in between, is a broken engine.
MAX_FAILED_STEPS = 3
@dataclass(frozen=True)
class PlannedRequest:
    """A checked request whose prompt is still token ids: built on the caller's thread (the event
    loop) with no device work; the engine's worker embeds it into a PreparedRequest."""

    request_id: str
    text_ids: list[int]
    uncond_ids: Optional[list[int]]  # CFG's unconditional prompt, when CFG is on
    speaker_prefix: Optional[torch.Tensor]  # [K, H] on the CPU ([0, H]: no prefix); None: the model's null prefix
    prefix_len: int  # K: rows the prefix puts before the text
    sampling: SamplingParams
    seed: int
    max_frames: int
    submitted_at: float = 0.0  # time.monotonic() when the engine accepted it (0: unknown); for queue-wait stats

    @property
    def prompt_len(self) -> int:
        return self.prefix_len + len(self.text_ids)

    @property
    def uncond_len(self) -> Optional[int]:
        return None if self.uncond_ids is None else self.prefix_len + len(self.uncond_ids)


@dataclass
class PreparedRequest:
    """A request with its prompt built and every sampling choice resolved."""

    request_id: str
    prompt_embeds: torch.Tensor  # [P, H] on the model's device
    uncond_embeds: Optional[torch.Tensor]  # [P_u, H] when CFG is on
    sampling: SamplingParams
    seed: int
    max_frames: int
    submitted_at: float = 0.0  # time.monotonic() when the engine accepted it (0: unknown); for queue-wait stats

    @property
    def prompt_len(self) -> int:
        return int(self.prompt_embeds.shape[0])

    @property
    def uncond_len(self) -> Optional[int]:
        return None if self.uncond_embeds is None else int(self.uncond_embeds.shape[0])


@dataclass
class StepOutput:
    """What one step did for one request: a frame, its end, or its failure (``error``: the request
    is gone from the generator; the error is what its caller should raise)."""

    request_id: str
    codes: Optional[torch.Tensor]  # [32] int64 on CPU, the new frame (None if none this step)
    finish_reason: Optional[FinishReason] = None
    error: Optional[EngineError] = None


@dataclass
class _Active:
    req: PreparedRequest
    cond_row: int
    uncond_row: int = -1  # -1: no CFG branch (any more)
    frames: int = 0
    last_codes: Optional[torch.Tensor] = None  # [32] on device
    history: list[torch.Tensor] = field(default_factory=list)  # recent frames for the repetition penalty


def _check_knobs(req: PreparedRequest) -> None:
    """Build the tensors the batched step builds from this request's knobs, so that a knob no tensor
    can hold (an integer past int64, a non-number) fails its own request at admission instead of
    every request of a later batched step. (The engine checked the ranges already; this is for
    knobs that bypassed that check.)"""
    sp = req.sampling
    torch.tensor([sp.temperature, sp.stop_threshold, sp.cfg_scale, sp.repetition_penalty], dtype=torch.float32)
    torch.tensor([sp.top_k, req.seed, sp.repetition_window, req.max_frames], dtype=torch.int64)
    if sp.cfg_frames is not None:
        torch.tensor([sp.cfg_frames], dtype=torch.int64)


class BatchLoop:
    """What both torch loops share (this module's reference ``BatchGenerator`` and the fast path's
    ``FastGenerator``): the waiting queue, aborts at the start of a step, failing one request, and
    failing a whole batched step, after which the loop starts over with a clean cache
    (``_reset_after_failed_step``) and is dead after MAX_FAILED_STEPS in a row."""

    def __init__(self, max_batch: int) -> None:
        self.max_batch = max_batch
        self.active: dict[str, Any] = {}  # request id -> the loop's per-request state (has .req)
        self.pending: list[PreparedRequest] = []
        self.aborted: set[str] = set()
        self.failed_steps = 0  # batched decode steps failed in a row
        # what the last step() did, for engine stats: requests in its batched decode (or, in a step
        # with no decode, the requests it prefilled; never more than max_batch) and the queue waits
        # of the requests it scheduled for the first time
        self.last_batch_size = 0
        self.last_queue_waits: list[float] = []

    @property
    def num_active(self) -> int:
        return len(self.active)

    def has_work(self) -> bool:
        return bool(self.active or self.pending)

    def add(self, req: PreparedRequest) -> None:
        self.pending.append(req)

    def abort(self, request_id: str) -> None:
        self.aborted.add(request_id)

    def _release(self, st: Any, scrub: bool = False) -> None:
        raise NotImplementedError

    def _reset_after_failed_step(self) -> None:
        """Forget every running request and make the cache clean (its rows may hold partial writes or NaN)."""
        raise NotImplementedError

    def _apply_aborts(self) -> list[StepOutput]:
        """Free the slots of the requests aborted since the last step; one ABORT output each."""
        outputs = []
        for rid in list(self.aborted):
            self.pending = [p for p in self.pending if p.request_id != rid]
            st = self.active.get(rid)
            if st is not None:
                self._release(st)
            outputs.append(StepOutput(rid, None, FinishReason.ABORT))
        self.aborted.clear()
        return outputs

    def _fail(self, st: Any, message: str) -> StepOutput:
        """End one request with GenerationError (its cache scrubbed); the others go on."""
        self._release(st, scrub=True)
        logger.error("request %s failed: %s", st.req.request_id, message)
        return StepOutput(st.req.request_id, None, error=GenerationError(f"request {st.req.request_id}: {message}"))

    def _fail_batch(self, exc: Exception) -> list[StepOutput]:
        """The batched decode step raised: fail every request in it and start over with a clean cache.

        Raises EngineDeadError after MAX_FAILED_STEPS such failures in a row.
        """
        self.failed_steps += 1
        failed = list(self.active.values())
        logger.error("batched decode step failed (%d in a row); failing its %d request(s) and resetting the cache",
                     self.failed_steps, len(failed), exc_info=exc)
        self._reset_after_failed_step()
        if self.failed_steps >= MAX_FAILED_STEPS:
            raise EngineDeadError(f"{self.failed_steps} batched decode steps failed in a row, each with a clean "
                                  f"cache; last: {type(exc).__name__}: {exc}") from exc
        message = (f"the batched decode step failed ({type(exc).__name__}: {exc}); the {len(failed)} request(s) "
                   "in it were ended and the engine reset")
        return [StepOutput(st.req.request_id, None, error=GenerationError(f"request {st.req.request_id}: {message}"))
                for st in failed]


class BatchGenerator(BatchLoop):
    def __init__(self, model: GepardModel, max_batch: int = 64, initial_capacity: int = 512) -> None:
        super().__init__(max_batch)
        self.model = model
        cfg = model.config
        self.level_counts = list(cfg.audio_heads)
        self.levels = torch.tensor(self.level_counts)  # on CPU, where the sampled frames are checked
        self.initial_capacity = initial_capacity
        self.cache = self._fresh_cache()
        self.rows: list[tuple[_Active, bool]] = []  # row index -> (owner, is_uncond)

    def _fresh_cache(self) -> KVCache:
        return KVCache.allocate(self.model.config.backbone, rows=min(8, 2 * self.max_batch),
                                capacity=self.initial_capacity, device=self.model.device, dtype=self.model.dtype)

    # -- bookkeeping ----------------------------------------------------------------------------
    @property
    def kv_cache_usage(self) -> float:
        """Cache rows in use / the most rows the cache may need (0..1, see engine.stats)."""
        return min(1.0, len(self.rows) / (2 * self.max_batch))

    def _alloc_row(self, owner: _Active, uncond: bool) -> int:
        row = len(self.rows)
        if row >= self.cache.rows:
            self.cache.grow(rows=max(row + 1, 2 * self.cache.rows))
        self.rows.append((owner, uncond))
        self.cache.lengths[row] = 0
        return row

    def _free_row(self, row: int, scrub: bool = False) -> None:
        """Free ``row``, moving the last active row into it. ``scrub`` zeroes its keys/values first:
        a failed request may have left NaN there, and attention reads masked positions too
        (0 * NaN is NaN), so the next owner of the row would inherit it."""
        if scrub:
            for store in (self.cache.keys, self.cache.values):
                for t in store:
                    t[row].zero_()
        last = len(self.rows) - 1
        if row != last:
            self.cache.move_row(last, row)
            owner, uncond = self.rows[last]
            self.rows[row] = (owner, uncond)
            if uncond:
                owner.uncond_row = row
            else:
                owner.cond_row = row
        self.cache.lengths[last] = 0
        self.rows.pop()

    def _release(self, st: _Active, scrub: bool = False) -> None:
        # free the higher row first so the lower index stays valid; a request that failed half-way
        # through admission may own fewer rows than its indices say
        owned = [r for r in (st.cond_row, st.uncond_row) if 0 <= r < len(self.rows) and self.rows[r][0] is st]
        for row in sorted(owned, reverse=True):
            self._free_row(row, scrub)
        st.cond_row = st.uncond_row = -1
        if self.active.get(st.req.request_id) is st:
            del self.active[st.req.request_id]

    def _ensure_capacity(self, needed: int) -> None:
        if needed > self.cache.capacity:
            cap = self.cache.capacity
            while cap < needed:
                cap *= 2
            self.cache.grow(capacity=cap)

    # -- the step -------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self) -> list[StepOutput]:
        outputs: list[StepOutput] = []
        self.last_batch_size, self.last_queue_waits = len(self.active), []
        # 1) aborts
        outputs.extend(self._apply_aborts())

        # 2) decode step for running requests
        self.last_batch_size = len(self.active)
        if self.active:
            try:
                outputs.extend(self._decode())
                self.failed_steps = 0
            except Exception as exc:
                if device_lost(exc):
                    raise
                outputs.extend(self._fail_batch(exc))

        # 3) admit new requests
        admitted = 0
        while self.pending and len(self.active) < self.max_batch:
            req = self.pending.pop(0)
            st = _Active(req, cond_row=-1)
            admitted += 1
            if req.submitted_at:
                self.last_queue_waits.append(max(0.0, time.monotonic() - req.submitted_at))
            try:
                outputs.extend(self._prefill(st))
            except Exception as exc:  # this request's own prompt, knobs or memory: it alone fails
                if device_lost(exc):
                    raise
                logger.exception("prefill of request %s failed", req.request_id)
                outputs.append(self._fail(st, f"generation failed at prefill: {type(exc).__name__}: {exc}"))
        self.last_batch_size = self.last_batch_size or admitted
        return outputs

    def _reset_after_failed_step(self) -> None:
        self.rows, self.active = [], {}
        self.cache = self._fresh_cache()

    def _prefill(self, st: _Active) -> list[StepOutput]:
        req = st.req
        _check_knobs(req)
        st.cond_row = self._alloc_row(st, uncond=False)
        branches = [(st.cond_row, req.prompt_embeds)]
        if req.uncond_embeds is not None:
            st.uncond_row = self._alloc_row(st, uncond=True)
            branches.append((st.uncond_row, req.uncond_embeds))
        hidden = []
        for row, embeds in branches:
            self._ensure_capacity(embeds.shape[0] + 1)
            h = self.model.backbone(embeds.unsqueeze(0), self.cache, torch.tensor([row]), torch.zeros(1, dtype=torch.long))
            hidden.append(h[:, -1])
        self.active[req.request_id] = st
        codes = self._sample([st], hidden[0], hidden[1] if len(hidden) > 1 else None)
        return self._commit([st], codes)

    def _decode(self) -> list[StepOutput]:
        n = len(self.rows)
        self._ensure_capacity(int(self.cache.lengths[:n].max()) + 1)
        codes = torch.stack([owner.last_codes for owner, _ in self.rows])  # [n, 32]
        x = self.model.frame_embedder(codes).unsqueeze(1)  # [n, 1, H]
        hidden = self.model.backbone(x, self.cache, slice(0, n), self.cache.lengths[:n].clone())[:, 0]

        reqs = list(self.active.values())
        cond_idx = torch.tensor([st.cond_row for st in reqs])
        cond_h = hidden[cond_idx]
        # stop head (cond branch only) and the frame cap end requests before sampling
        thresholds = torch.tensor([st.req.sampling.stop_threshold for st in reqs], device=hidden.device)
        stops = stop_decision(self.model.heads.stop_logit(cond_h), thresholds).cpu()
        outputs: list[StepOutput] = []
        keep: list[int] = []
        for i, st in enumerate(reqs):
            if bool(stops[i]):
                outputs.append(StepOutput(st.req.request_id, None, FinishReason.STOP))
            else:
                keep.append(i)
        finished = [reqs[i] for i in range(len(reqs)) if i not in set(keep)]
        reqs = [reqs[i] for i in keep]
        if reqs:
            keep_t = torch.tensor(keep)
            cfg_states = [st for st in reqs if st.uncond_row >= 0]
            uncond_h = None
            if cfg_states:
                # rows without CFG use their cond hidden as "uncond"; cfg_combine with scale 1 is a no-op there
                uncond_idx = torch.tensor([st.uncond_row if st.uncond_row >= 0 else st.cond_row for st in reqs])
                uncond_h = hidden[uncond_idx]
            codes = self._sample(reqs, cond_h[keep_t], uncond_h)
            outputs.extend(self._commit(reqs, codes))
        for st in finished:
            self._release(st)
        return outputs

    def _sample(self, reqs: list[_Active], cond_h: torch.Tensor, uncond_h: Optional[torch.Tensor]) -> torch.Tensor:
        device = cond_h.device
        logits = self.model.heads.code_logits(cond_h)  # [B, 32, 8]
        if uncond_h is not None:
            scale = torch.tensor([st.req.sampling.cfg_scale if st.uncond_row >= 0 else 1.0 for st in reqs], device=device)
            logits = cfg_combine(logits, self.model.heads.code_logits(uncond_h), scale)
        penalties = torch.tensor([st.req.sampling.repetition_penalty for st in reqs], device=device)
        if bool((penalties != 1.0).any()):
            window = max(st.req.sampling.repetition_window for st in reqs)
            hist = torch.full((len(reqs), max(window, 1), logits.shape[1]), -1, dtype=torch.long, device=device)
            for i, st in enumerate(reqs):
                recent = st.history[-st.req.sampling.repetition_window:] if st.req.sampling.repetition_window > 0 else []
                if recent:
                    hist[i, : len(recent)] = torch.stack(recent)
            logits = repetition_penalty(logits, seen_mask(hist, logits.shape[2]), penalties)
        temperature = torch.tensor([st.req.sampling.temperature for st in reqs], device=device)
        top_k = torch.tensor([st.req.sampling.top_k for st in reqs], device=device)
        seeds = torch.tensor([st.req.seed for st in reqs], device=device)
        steps = torch.tensor([st.frames for st in reqs], device=device)
        return sample_codes(logits, temperature, top_k, seeds, steps)

    def _commit(self, reqs: list[_Active], codes: torch.Tensor) -> list[StepOutput]:
        outputs = []
        cpu_codes = codes.cpu()
        # a code outside its channel's levels must never be fed back (past the last channel's
        # embedding table it crashes the next batched step) nor reach the codec
        bad = invalid_codes(cpu_codes, self.levels).tolist()
        for i, st in enumerate(reqs):
            if bad[i]:
                reason = describe_invalid_code(cpu_codes[i], self.level_counts)
                outputs.append(self._fail(st, f"{reason} at frame {st.frames}; the request was ended"))
                continue
            st.last_codes = codes[i]
            st.frames += 1
            if st.req.sampling.repetition_penalty != 1.0:
                st.history.append(codes[i])
                del st.history[: -max(st.req.sampling.repetition_window, 1)]
            cfg_frames = st.req.sampling.cfg_frames
            if st.uncond_row >= 0 and cfg_frames is not None and st.frames >= cfg_frames:
                self._free_row(st.uncond_row)
                st.uncond_row = -1
            if st.frames >= st.req.max_frames:
                outputs.append(StepOutput(st.req.request_id, cpu_codes[i], FinishReason.LENGTH))
                self._release(st)
            else:
                outputs.append(StepOutput(st.req.request_id, cpu_codes[i]))
        return outputs
