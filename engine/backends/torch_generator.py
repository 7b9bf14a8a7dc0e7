"""The reference generation loop: continuous batching over a row-based KV cache, synchronous.

``BatchGenerator.step()`` advances every active request by one frame:

    1) drop aborted requests (their rows are freed before any more compute is spent on them)
    2) one batched decode step for the requests already running: feed each row its previous
       frame, check the stop head (cond branch only), sample the next frame from the rest
    3) prefill newly added requests one by one and sample their frame 0 (no stop check at SOS)

Each request owns one cache row (two with CFG: the unconditional branch is a row of its own that
is fed the same frames and dropped after ``cfg_frames``). Active rows are kept compacted at the
front of the cache so a batch is a view. The loop is the behavioural source of truth the vLLM
backend is tested against.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Optional

import torch

from engine.model.backbone import KVCache
from engine.model.gepard import GepardModel
from engine.requests import FinishReason, SamplingParams
from engine.sampling import cfg_combine, repetition_penalty, sample_codes, seen_mask, stop_decision

logger = logging.getLogger(__name__)


@dataclass
class PreparedRequest:
    """A request with its prompt built and every sampling choice resolved."""

    request_id: str
    prompt_embeds: torch.Tensor  # [P, H] on the model's device
    uncond_embeds: Optional[torch.Tensor]  # [P_u, H] when CFG is on
    sampling: SamplingParams
    seed: int
    max_frames: int


@dataclass
class StepOutput:
    request_id: str
    codes: Optional[torch.Tensor]  # [32] int64 on CPU, the new frame (None if none this step)
    finish_reason: Optional[FinishReason] = None


@dataclass
class _Active:
    req: PreparedRequest
    cond_row: int
    uncond_row: int = -1  # -1: no CFG branch (any more)
    frames: int = 0
    last_codes: Optional[torch.Tensor] = None  # [32] on device
    history: list[torch.Tensor] = field(default_factory=list)  # recent frames for the repetition penalty


class BatchGenerator:
    def __init__(self, model: GepardModel, max_batch: int = 64, initial_capacity: int = 512) -> None:
        self.model = model
        self.max_batch = max_batch
        cfg = model.config
        self.levels = torch.tensor(cfg.audio_heads, device=model.device)
        self.cache = KVCache.allocate(cfg.backbone, rows=min(8, 2 * max_batch), capacity=initial_capacity,
                                      device=model.device, dtype=model.dtype)
        self.rows: list[tuple[_Active, bool]] = []  # row index -> (owner, is_uncond)
        self.active: dict[str, _Active] = {}
        self.pending: list[PreparedRequest] = []
        self.aborted: set[str] = set()

    # -- bookkeeping ----------------------------------------------------------------------------
    @property
    def num_active(self) -> int:
        return len(self.active)

    def has_work(self) -> bool:
        return bool(self.active or self.pending)

    def add(self, req: PreparedRequest) -> None:
        self.pending.append(req)

    def abort(self, request_id: str) -> None:
        self.aborted.add(request_id)

    def _alloc_row(self, owner: _Active, uncond: bool) -> int:
        row = len(self.rows)
        if row >= self.cache.rows:
            self.cache.grow(rows=max(row + 1, 2 * self.cache.rows))
        self.rows.append((owner, uncond))
        self.cache.lengths[row] = 0
        return row

    def _free_row(self, row: int) -> None:
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

    def _release(self, st: _Active) -> None:
        # free the higher row first so the lower index stays valid
        for row in sorted([r for r in (st.cond_row, st.uncond_row) if r >= 0], reverse=True):
            self._free_row(row)
        st.cond_row = st.uncond_row = -1
        self.active.pop(st.req.request_id, None)

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
        # 1) aborts
        for rid in list(self.aborted):
            self.pending = [p for p in self.pending if p.request_id != rid]
            st = self.active.get(rid)
            if st is not None:
                self._release(st)
            outputs.append(StepOutput(rid, None, FinishReason.ABORT))
        self.aborted.clear()

        # 2) decode step for running requests
        if self.active:
            outputs.extend(self._decode())

        # 3) admit new requests
        while self.pending and len(self.active) < self.max_batch:
            req = self.pending.pop(0)
            outputs.extend(self._prefill(req))
        return outputs

    def _prefill(self, req: PreparedRequest) -> list[StepOutput]:
        st = _Active(req, cond_row=-1)
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
        for i, st in enumerate(reqs):
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
