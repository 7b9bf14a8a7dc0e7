"""What the API process and the vLLM worker agree on: Gepard's token layout and per-request knobs.

vLLM samples one token per step; Gepard produces one 32-channel frame per step. The frame is
sampled by our logits processor inside vLLM's sampler, and the *token* vLLM sees is only a handle.
vLLM's vocabulary (the logits width) is therefore tiny, ``V = 256 + S + 3`` for ``S`` slots
(``max_num_seqs``):

    [0, 256)          code ids: channel k, code c -> 8k + c. Never sampled; the processor gives the
                      32 codes of the frame finite values so they come out through logprobs.
    [256, 256 + S)    frame handles ``FRAME_BASE + slot``: the token a request samples each step.
                      Every request owns one slot for its lifetime; the model reads
                      ``last_codes[slot]`` when the handle is fed back (the frame feedback path).
    256 + S           STOP: the stop head fired (a stop token id, so vLLM ends the request).
    256 + S + 1       STOP_ERR: the request was re-prefilled after a preemption and cannot resume
                      (its previous frames are not in the token stream); it ends as an error.
    256 + S + 2       FAILED: the frame step failed this request alone: it sampled a code outside a
                      channel's levels (never fed back: past the last channel's embedding table it
                      would crash vLLM's engine core), or the worker could not use its knobs. The
                      request ends as an error; the engine core and the other requests go on.

Prompt text ids are sent shifted past ``V`` (``V + t``), so they never collide with handles; the
model's text embedding undoes the shift. With ``skip_tokenizer_init`` vLLM does not range-check
prompt ids, and the logits width stays small (V instead of the 248k text vocabulary).

Per-request knobs travel in ``SamplingParams.extra_args`` as ``FrameParams``; vLLM's own sampling
is pinned to greedy, so it picks whatever the processor chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from engine.requests import SAMPLING_BOUNDS

NUM_CHANNELS = 32
MAX_LEVEL = 8  # codes per channel are < 8 (levels [8, 7, 6, 6])
CODE_IDS = NUM_CHANNELS * MAX_LEVEL  # 256
# Frames the repetition penalty can look back on; a request may ask for at most this window.
MAX_REPETITION_WINDOW = 64
_EXTRA_KEY = "gepard"  # SamplingParams.extra_args[_EXTRA_KEY] holds FrameParams.to_extra_args()
ARCHITECTURE = "GepardForTTS"  # the name vLLM resolves through our plugin


@dataclass(frozen=True, slots=True)
class TokenLayout:
    """vLLM token ids for ``num_slots`` concurrent requests (see the module docstring)."""

    num_slots: int

    def __post_init__(self) -> None:
        if self.num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {self.num_slots}")

    @property
    def frame_base(self) -> int:
        return CODE_IDS

    @property
    def stop(self) -> int:
        return CODE_IDS + self.num_slots

    @property
    def stop_err(self) -> int:
        return CODE_IDS + self.num_slots + 1

    @property
    def failed(self) -> int:
        return CODE_IDS + self.num_slots + 2

    @property
    def stop_tokens(self) -> list[int]:
        """The tokens that end a request: STOP, STOP_ERR, FAILED."""
        return [self.stop, self.stop_err, self.failed]

    @property
    def vocab_size(self) -> int:
        """Width of the logits vLLM samples from."""
        return CODE_IDS + self.num_slots + 3

    @property
    def text_base(self) -> int:
        """Prompt text id ``t`` is sent to vLLM as ``text_base + t``."""
        return self.vocab_size

    @property
    def stop_column(self) -> int:
        """Column of the model's logits that carries the stop logit (the processor overwrites it)."""
        return CODE_IDS

    def is_frame(self, token_id: int) -> bool:
        return self.frame_base <= token_id < self.stop

    def text_ids(self, ids: Sequence[int]) -> list[int]:
        base = self.text_base
        return [base + int(t) for t in ids]

    def decode_frames(self, token_ids: Sequence[int], logprobs: Any) -> torch.Tensor:
        """Frames of one output delta: -> codes [32, n] int64, n = handle tokens in ``token_ids``.

        ``logprobs`` is the delta's logprobs (vLLM ``FlatLogprobs`` or a list of ``{id: Logprob}``),
        one position per token; a frame's 32 code ids ``8k + c`` are among its entries. STOP and
        STOP_ERR / FAILED positions carry no frame and are skipped. Raises ValueError when a frame is
        incomplete (the engine was not configured with 33 logprobs).
        """
        positions = [i for i, t in enumerate(token_ids) if self.is_frame(int(t))]
        codes = np.full((NUM_CHANNELS, len(positions)), -1, dtype=np.int64)
        if not positions:
            return torch.from_numpy(codes)
        if logprobs is None or len(logprobs) < len(token_ids):
            raise ValueError(f"expected logprobs for {len(token_ids)} tokens, got {0 if logprobs is None else len(logprobs)}")
        flat = hasattr(logprobs, "start_indices")
        all_ids = np.asarray(logprobs.token_ids, dtype=np.int64) if flat else None
        for col, pos in enumerate(positions):
            if flat:
                ids = all_ids[logprobs.start_indices[pos] : logprobs.end_indices[pos]]
            else:
                ids = np.fromiter(logprobs[pos].keys(), dtype=np.int64)
            ids = ids[ids < CODE_IDS]
            codes[ids // MAX_LEVEL, col] = ids % MAX_LEVEL
        if (codes < 0).any():
            missing = sorted({int(k) for k in np.nonzero(codes < 0)[0]})
            raise ValueError(f"frame without codes for channel(s) {missing[:8]}: the engine must return 33 logprobs per token")
        return torch.from_numpy(codes)


@dataclass(frozen=True, slots=True)
class FrameParams:
    """Per-request frame sampling knobs, as the logits processor reads them.

    temperature: 0 means greedy. top_k: 0 disables. seed: 63-bit counter-RNG seed.
    stop_threshold: stop when sigmoid(stop logit) > threshold (never at the first frame).
    repetition_penalty / repetition_window: 1.0 disables; the window is at most
    MAX_REPETITION_WINDOW frames (0 disables).
    Every knob is range-checked (``engine.requests.SAMPLING_BOUNDS``) here, in the API process
    (``validate_params``): a value that overflows a slot tensor must never reach the engine core.
    """

    temperature: float
    top_k: int
    seed: int
    stop_threshold: float
    repetition_penalty: float = 1.0
    repetition_window: int = 32

    def __post_init__(self) -> None:
        for name in ("temperature", "top_k", "seed", "stop_threshold", "repetition_penalty", "repetition_window"):
            problem = SAMPLING_BOUNDS[name].problem(getattr(self, name))
            if problem is not None:
                raise ValueError(f"{name} {problem}")
        if self.penalised and self.repetition_window > MAX_REPETITION_WINDOW:
            raise ValueError(f"repetition_window must be <= {MAX_REPETITION_WINDOW} on the vLLM backend, "
                             f"got {self.repetition_window}")

    @property
    def penalised(self) -> bool:
        """Whether the repetition penalty does anything for this request."""
        return self.repetition_penalty != 1.0 and self.repetition_window > 0

    def to_extra_args(self) -> dict[str, Any]:
        return {_EXTRA_KEY: [self.temperature, self.top_k, self.seed, self.stop_threshold,
                             self.repetition_penalty, self.repetition_window]}

    @classmethod
    def from_extra_args(cls, extra_args: Mapping[str, Any] | None) -> "FrameParams":
        """Parse ``SamplingParams.extra_args``; ValueError (naming the field) when absent or invalid."""
        raw = (extra_args or {}).get(_EXTRA_KEY)
        if not isinstance(raw, (list, tuple)) or len(raw) != 6:
            raise ValueError(f"Gepard requests need extra_args[{_EXTRA_KEY!r}] = FrameParams.to_extra_args(); got {raw!r}")
        temperature, top_k, seed, threshold, penalty, window = raw
        try:
            return cls(float(temperature), int(top_k), int(seed), float(threshold), float(penalty), int(window))
        except (TypeError, OverflowError) as exc:  # None, "x", float("inf") as an integer...
            raise ValueError(f"Gepard extra_args[{_EXTRA_KEY!r}] holds a value that is not a number in range: "
                             f"{raw!r} ({exc})") from None


def hf_overrides(layout: TokenLayout, rope_theta: float, partial_rotary_factor: float = 1.0) -> dict[str, Any]:
    """Config overrides that make vLLM load the published checkpoint as ``GepardForTTS``.

    The logits width becomes the layout's vocabulary, and ``rope_parameters`` is replaced whole
    (dict overrides are not merged), which drops the mRoPE keys so positions stay 1-D.
    """
    return {
        "architectures": [ARCHITECTURE],
        "vocab_size": layout.vocab_size,
        "rope_parameters": {"rope_type": "default", "rope_theta": float(rope_theta),
                            "partial_rotary_factor": float(partial_rotary_factor)},
    }
