"""vLLM custom logits processors that run Gepard's frame step (``vllm_sampling.frame_step``).

vLLM 0.32 has two model runners with different processor interfaces, so there are two thin
adapters around the same tensor function; ``processor_for(vllm_config)`` names the right one.

- ``GepardFrameSamplerV1``: the V1 runner (on CPU, where Model Runner V2 needs Triton, and by
  default on GPU too until the V2 adapter has run there: see ``vllm_runner``). It tracks
  the persistent batch through ``BatchUpdate`` and gives every request a *stable slot* for its
  lifetime (batch rows move when the batch is condensed; slots do not). The frame index is the
  length of the request's live output-token list.
- ``GepardFrameSamplerV2``: Model Runner V2 (vLLM's own default on GPU; opt-in here). The runner already keys
  requests by a persistent slot (``ctx.expanded_idx_mapping``); the frame index comes from the
  row's position. Per-slot knobs are staged on the host and flushed in ``apply_staged_writes``.
  This adapter cannot run on the CPU-only development machine; ``tests`` drive it directly with
  a fake runner state.

Preemption: a preempted request is re-prefilled from its prompt plus the handles it sampled, but
the frames behind those handles are gone, so it cannot continue. The engine is configured so that
preemption cannot happen (see ``vllm_backend``); if it happens anyway the processor answers
STOP_ERR and the request fails loudly instead of producing garbage. V1 detects it as a request
added with outputs already present, V2 as ``prefill_len > prompt_len``.

What the adapters share (``_FrameSampler``): the layout and the worker's ``SlotState``, the
admission check, how a request's knobs become slot values (``vllm_sampling.slot_knobs``) and the
frame step itself; they differ only in how they learn slots, frame indices and resumed requests.

Both adapters run inside vLLM's engine core, where an exception kills every request. Per-request
problems therefore never raise here: knobs are checked in the API process (``validate_params``),
and if the worker still cannot parse them the slot is marked failed and the request ends with
FAILED at its first frame (see ``vllm_sampling``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np
import torch

from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor
from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2LogitsProcessor

from engine.backends.vllm_layout import FrameParams, TokenLayout
from engine.backends.vllm_sampling import frame_step, slot_knobs, slot_state, split_logits

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.sampling_params import SamplingParams
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcRequestState

logger = logging.getLogger(__name__)


def layout_for(vllm_config: "VllmConfig") -> TokenLayout:
    return TokenLayout(num_slots=vllm_config.scheduler_config.max_num_seqs)


def processor_for(vllm_config: "VllmConfig") -> str:
    """FQCN of the adapter matching the model runner this config will use."""
    name = "GepardFrameSamplerV2" if vllm_config.use_v2_model_runner else "GepardFrameSamplerV1"
    return f"{__name__}:{name}"


def _frame_params(sampling_params: "SamplingParams") -> FrameParams | None:
    """The request's FrameParams in the worker; None (logged) when they cannot be used.

    ``validate_params`` already accepted them in the API process, so None means a vLLM that skipped
    the check: the request fails alone instead of the engine core.
    """
    try:
        return FrameParams.from_extra_args(sampling_params.extra_args)
    except ValueError as exc:
        logger.error("Gepard request with unusable sampling knobs ends with an error: %s", exc)
        return None


class _FrameSampler:
    """What both adapters share: layout, slot state, admission check and the frame step call."""

    layout: TokenLayout

    def _setup(self, vllm_config: "VllmConfig", device: torch.device) -> None:
        self.layout = layout_for(vllm_config)
        self.state = slot_state(self.layout, device)

    @classmethod
    def validate_params(cls, sampling_params: "SamplingParams") -> None:
        """Admission-time check (API process): the request carries valid FrameParams."""
        FrameParams.from_extra_args(sampling_params.extra_args)

    def _step(self, logits: torch.Tensor, slots: torch.Tensor, frames: torch.Tensor, penalise: bool,
              blocked: Optional[torch.Tensor]) -> torch.Tensor:
        """logits [N, V] of rows in ``slots`` at frame indices ``frames`` -> the logits vLLM samples."""
        heads, stop = split_logits(logits, self.layout)
        return frame_step(self.state, heads, stop, slots, frames, penalise, blocked)


@dataclass
class _Row:
    slot: int
    outputs: list[int]  # vLLM's live output-token list of the request (its length = frames so far)
    penalised: bool
    resumed: bool  # re-added with outputs: preempted (or skipped) and cannot resume


class GepardFrameSamplerV1(_FrameSampler, V1LogitsProcessor):
    """Adapter for the V1 model runner (CPU, and GPU by default)."""

    def __init__(self, vllm_config: "VllmConfig", device: torch.device, is_pin_memory: bool) -> None:
        self._setup(vllm_config, device)
        self.rows: dict[int, _Row] = {}
        self.free = list(range(self.layout.num_slots - 1, -1, -1))  # pop() hands out slot 0 first

    def is_argmax_invariant(self) -> bool:
        return False  # it decides the token: it must run on vLLM's greedy path too

    def _release(self, row: int) -> None:
        entry = self.rows.pop(row, None)
        if entry is not None:
            self.free.append(entry.slot)

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        # Order matters (vLLM's contract): removed, then added, then moved.
        for row in batch_update.removed:
            self._release(row)
        for row, params, _prompt, outputs in batch_update.added:
            self._release(row)  # a removal whose index was reused is not listed in `removed`
            fp = _frame_params(params)
            slot = self.free.pop()
            self.state.assign(slot, fp)
            self.rows[row] = _Row(slot, outputs, fp is not None and fp.penalised, resumed=len(outputs) > 0)
            if outputs:
                logger.error("Gepard request in slot %d re-entered the batch after %d frames (preempted); "
                             "it ends with an error", slot, len(outputs))
        for src, dst, direction in batch_update.moved:
            if direction is MoveDirectionality.SWAP:
                a, b = self.rows.pop(src, None), self.rows.pop(dst, None)
                if a is not None:
                    self.rows[dst] = a
                if b is not None:
                    self.rows[src] = b
            else:
                self._release(dst)  # condense() folds the removal of `dst` into this move
                moved = self.rows.pop(src, None)
                if moved is not None:
                    self.rows[dst] = moved
        if len(self.rows) != batch_update.batch_size:
            raise RuntimeError(f"Gepard slot bookkeeping out of sync: {len(self.rows)} tracked rows, "
                               f"batch of {batch_update.batch_size}")

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        n = logits.shape[0]
        if n == 0:
            return logits
        rows = [self.rows[i] for i in range(n)]
        device = logits.device
        slots = torch.tensor([r.slot for r in rows], dtype=torch.int64, device=device)
        frames = torch.tensor([len(r.outputs) for r in rows], dtype=torch.int64, device=device)
        blocked = None
        if any(r.resumed for r in rows):
            blocked = torch.tensor([r.resumed for r in rows], dtype=torch.bool, device=device)
        return self._step(logits, slots, frames, any(r.penalised for r in rows), blocked)


class GepardFrameSamplerV2(_FrameSampler, V2LogitsProcessor):
    """Adapter for Model Runner V2 (opt-in: ``GEPARD_VLLM_RUNNER=v2``). Not exercisable on CPU-only vLLM."""

    def __init__(self, vllm_config: "VllmConfig", req_states: "LogitsProcRequestState") -> None:
        self._setup(vllm_config, req_states.device)
        if req_states.max_num_reqs > self.layout.num_slots:
            raise RuntimeError(f"runner has {req_states.max_num_reqs} request slots but the Gepard layout only "
                               f"{self.layout.num_slots} handles")
        self.req_states = req_states
        s = self.layout.num_slots
        # Host copies of the per-slot knobs (the fields slot_knobs fills, with the device tensors'
        # dtypes): add_request writes here, apply_staged_writes flushes them in one copy each.
        self._host: dict[str, torch.Tensor] = {
            name: torch.empty(s, dtype=getattr(self.state, name).dtype).copy_(getattr(self.state, name).cpu())
            for name in slot_knobs(None)
        }
        self._penalised = np.zeros(s, dtype=bool)
        self._reset: list[int] = []

    def add_request(self, req_idx: int, sampling_params: "SamplingParams") -> bool:
        fp = _frame_params(sampling_params)
        for name, value in slot_knobs(fp).items():
            self._host[name][req_idx] = value
        self._penalised[req_idx] = fp is not None and fp.penalised
        self._reset.append(req_idx)
        return True

    def apply_staged_writes(self) -> None:
        if not self._reset:
            return
        for name, host in self._host.items():
            getattr(self.state, name).copy_(host, non_blocking=True)
        slots = torch.tensor(self._reset, dtype=torch.int64).to(self.state.device, non_blocking=True)
        self.state.history_frame.index_fill_(0, slots, -1)
        self._reset.clear()

    def apply(self, logits: torch.Tensor, ctx: "LogitsContext") -> torch.Tensor:
        slots = ctx.expanded_idx_mapping.long()
        prompt_len = self.req_states.prompt_len.gpu[slots].long()
        frames = ctx.pos.long() + 1 - prompt_len  # 0 at the SOS position
        blocked = self.req_states.prefill_len.gpu[slots].long() > prompt_len
        penalise = bool(self._penalised[ctx.idx_mapping_np].any())
        return self._step(logits, slots, frames, penalise, blocked)
