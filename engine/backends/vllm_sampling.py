"""Gepard's frame step inside vLLM's sampler: per-slot state plus one pure tensor function.

``frame_step`` is what both logits-processor adapters (vLLM's V1 and V2 model runners, see
``vllm_processors``) call once per engine step for the whole batch, with no Python loop over
requests. Per row it does exactly what the torch reference does (``torch_generator._sample`` and
the stop check in ``_decode``), using the shared functions of ``engine.sampling``:

    head logits [N, 32, 8] -> repetition penalty -> top-k -> / temperature -> Gumbel-max -> codes
    stop = sigmoid(stop logit) > threshold, never at frame 0 (the SOS position)

then it writes the frame where the model reads it back next step (``last_codes[slot]``) and into
the slot's repetition history, and returns the logits row vLLM samples from (see ``vllm_layout``):
0.0 at the chosen token (the slot's handle, STOP, STOP_ERR or FAILED), ``-1 - k`` at code id
``8k + c_k`` for each channel k, -inf elsewhere.

This runs inside vLLM's engine core: an exception here kills the engine core and every request
with it. So nothing in it may raise for a reason that belongs to one request: a frame with a code
outside its channel's levels is never stored (the row gets a harmless all-zero frame and ends
with FAILED), and a slot whose knobs the worker could not use (``SlotState.failed``) ends the same
way at its first frame.

The state lives on the model's device in fixed tensors indexed by slot (CUDA-graph friendly), one
``SlotState`` per worker process, shared by the model and the processor through ``slot_state()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from engine.backends.vllm_layout import CODE_IDS, MAX_LEVEL, MAX_REPETITION_WINDOW, NUM_CHANNELS, FrameParams, TokenLayout
from engine.sampling import invalid_codes, repetition_penalty, sample_codes, seen_mask, stop_decision


@dataclass
class SlotState:
    """Everything the frame step keeps per slot. Tensors are indexed by slot (``S`` rows).

    last_codes:  [S, 32] int64, the slot's latest frame (the model embeds it when the handle is fed)
    temperature, stop_threshold, penalty: [S] float32; top_k, seed, window: [S] int64
    history:       [S, W, 32] int64 recent frames, ring-indexed by frame index % W
    history_frame: [S, W] int64 the frame index each history entry holds (-1: empty)
    failed:      [S] bool, the slot's request must end with FAILED (its knobs were unusable)
    levels:      [32] int64 codes per channel; a sampled code must be < levels[k] (the model sets the
                 checkpoint's levels; MAX_LEVEL until then)
    """

    layout: TokenLayout
    last_codes: torch.Tensor
    temperature: torch.Tensor
    top_k: torch.Tensor
    seed: torch.Tensor
    stop_threshold: torch.Tensor
    penalty: torch.Tensor
    window: torch.Tensor
    history: torch.Tensor
    history_frame: torch.Tensor
    failed: torch.Tensor
    levels: torch.Tensor

    @classmethod
    def allocate(cls, layout: TokenLayout, device: torch.device, history: int = MAX_REPETITION_WINDOW) -> "SlotState":
        s = layout.num_slots
        f32 = dict(device=device, dtype=torch.float32)
        i64 = dict(device=device, dtype=torch.int64)
        return cls(
            layout=layout,
            last_codes=torch.zeros(s, NUM_CHANNELS, **i64),
            temperature=torch.zeros(s, **f32),
            top_k=torch.zeros(s, **i64),
            seed=torch.zeros(s, **i64),
            stop_threshold=torch.full((s,), 0.5, **f32),
            penalty=torch.ones(s, **f32),
            window=torch.zeros(s, **i64),
            history=torch.zeros(s, history, NUM_CHANNELS, **i64),
            history_frame=torch.full((s, history), -1, **i64),
            failed=torch.zeros(s, device=device, dtype=torch.bool),
            levels=torch.full((NUM_CHANNELS,), MAX_LEVEL, **i64),
        )

    @property
    def device(self) -> torch.device:
        return self.last_codes.device

    def assign(self, slot: int, params: Optional[FrameParams]) -> None:
        """Give ``slot`` to a new request (direct writes; the V2 adapter stages ``slot_knobs`` instead).

        ``params`` None: the request's knobs cannot be used; it gets harmless ones and ends with
        FAILED at its first frame (instead of an exception in the engine core).
        """
        for name, value in slot_knobs(params).items():
            getattr(self, name)[slot] = value
        self.history_frame[slot] = -1

    def assign_failed(self, slot: int) -> None:
        """Give ``slot`` to a request whose knobs cannot be used (``assign(slot, None)``)."""
        self.assign(slot, None)


#: Knobs given to a request whose own cannot be used (it ends with FAILED at its first frame).
HARMLESS_KNOBS = FrameParams(0.0, 0, 0, 0.5)


def slot_knobs(params: Optional[FrameParams]) -> dict[str, float | int | bool]:
    """The per-slot tensor values (SlotState field -> value) for a request; None: unusable knobs."""
    fp = HARMLESS_KNOBS if params is None else params
    return {"temperature": fp.temperature, "top_k": fp.top_k, "seed": fp.seed, "stop_threshold": fp.stop_threshold,
            "penalty": fp.repetition_penalty, "window": fp.repetition_window, "failed": params is None}


_STATE: Optional[SlotState] = None


def slot_state(layout: TokenLayout, device: torch.device | str) -> SlotState:
    """The worker's one SlotState, created by whichever of model and processor asks first."""
    global _STATE
    device = torch.device(device)
    if _STATE is None:
        _STATE = SlotState.allocate(layout, device)
    elif _STATE.layout != layout or _STATE.device.type != device.type:
        raise RuntimeError(f"Gepard slot state exists for {_STATE.layout} on {_STATE.device}; asked for {layout} on {device}")
    return _STATE


def reset_slot_state() -> None:
    """Forget the worker's SlotState (tests that build several layouts in one process)."""
    global _STATE
    _STATE = None


def split_logits(logits: torch.Tensor, layout: TokenLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's packed logits [N, V] -> head logits [N, 32, 8] (-inf padded), stop logit [N]."""
    heads = logits[:, :CODE_IDS].reshape(-1, NUM_CHANNELS, MAX_LEVEL)
    return heads, logits[:, layout.stop_column]


def frame_step(
    state: SlotState,
    head_logits: torch.Tensor,
    stop_logit: torch.Tensor,
    slots: torch.Tensor,
    frames: torch.Tensor,
    penalise: bool = True,
    blocked: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Sample one frame (and the stop decision) for each of N rows; returns logits [N, V] float32.

    head_logits [N, 32, 8] float32 with -inf where code >= L_k; stop_logit [N]; slots [N] int64
    (each row's slot); frames [N] int64 (index of the frame being sampled: 0 at the SOS position);
    penalise: False skips the repetition penalty for the whole batch (a host-side shortcut when no
    row uses it; rows with penalty 1.0 are unaffected either way); blocked [N] bool marks rows that
    must end with STOP_ERR. Rows that sampled a code outside [0, levels[k]) on some channel k, or
    whose slot is marked failed, end with FAILED and their frame is not stored.
    """
    layout = state.layout
    n = head_logits.shape[0]
    device = head_logits.device
    logits = head_logits.float()
    # 1) repetition penalty over the frames [frame - window, frame) of each row's own history
    if penalise:
        hist_frame = state.history_frame[slots]  # [N, W]
        lo = (frames - state.window[slots]).unsqueeze(1)
        valid = (hist_frame >= 0) & (hist_frame >= lo) & (hist_frame < frames.unsqueeze(1))
        history = torch.where(valid.unsqueeze(-1), state.history[slots], -1)  # [N, W, 32]
        logits = repetition_penalty(logits, seen_mask(history, logits.shape[2]), state.penalty[slots])
    # 2) sample all 32 channels (top-k, temperature, counter-based Gumbel noise)
    codes = sample_codes(logits, state.temperature[slots], state.top_k[slots], state.seed[slots], frames)  # [N, 32]
    # 3) a frame with a code outside its channel's levels is never fed back (the model would index
    #    past its embedding table) nor reported: the row ends with FAILED
    failed = invalid_codes(codes, state.levels) | state.failed[slots]
    codes = torch.where(failed.unsqueeze(1), 0, codes)
    # 4) the stop head is never evaluated at the SOS position (frame 0)
    stop = stop_decision(stop_logit, state.stop_threshold[slots]) & (frames > 0)
    # 5) write the frame where the model reads it next step, and into the history ring
    state.last_codes[slots] = codes
    if penalise:
        ring = frames.remainder(state.history.shape[1])
        state.history[slots, ring] = codes
        state.history_frame[slots, ring] = frames
    # 6) the token vLLM picks (greedy) and the 32 code ids it reports through logprobs
    token = torch.where(stop, layout.stop, layout.frame_base + slots)
    token = torch.where(failed, layout.failed, token)
    if blocked is not None:
        token = torch.where(blocked, layout.stop_err, token)
    out = torch.full((n, layout.vocab_size), float("-inf"), device=device, dtype=torch.float32)
    channel = torch.arange(NUM_CHANNELS, device=device)
    out.scatter_(1, channel * MAX_LEVEL + codes, (-1.0 - channel.float()).expand(n, -1).contiguous())
    out.scatter_(1, token.view(-1, 1), 0.0)
    return out
