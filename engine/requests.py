"""Plain-data messages between callers and a TtsEngine.

Nothing here knows HTTP or the wire protocol: the gateway converts its wire models into these.
Codes are always *unfolded*: 32 channels per frame, channel ``4*g + d`` holds digit ``d`` of
NanoCodec group ``g`` (levels ``[8, 7, 6, 6][d]``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional

import torch


class FinishReason(str, enum.Enum):
    STOP = "stop"  # the stop head fired
    LENGTH = "length"  # the frame cap (explicit or adaptive) was reached
    ABORT = "abort"  # the caller cancelled the request


class CfgUncondMode(str, enum.Enum):
    EMPTY_TEXT = "empty_text"  # unconditional branch sees [prefix | SOT EOT SOS]
    AUDIO_ONLY = "audio_only"  # unconditional branch sees [prefix | SOS]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-request sampling knobs (spec section 4).

    temperature: 0 means greedy (argmax) on every head.
    top_k: 0 disables the top-k mask; 1 is greedy.
    max_frames: hard cap on emitted frames; None picks the adaptive cap from the text length.
    seed: per-request seed; the same request with the same seed gives the same frames.
    cfg_scale: 1.0 disables classifier-free guidance (no second pass).
    cfg_frames: guide only the first N frames; None guides every frame.
    """

    temperature: float = 0.4
    top_k: int = 0
    repetition_penalty: float = 1.0
    repetition_window: int = 32
    seed: Optional[int] = None
    stop_threshold: float = 0.5
    max_frames: Optional[int] = None
    cfg_scale: float = 1.0
    cfg_frames: Optional[int] = None
    cfg_uncond_mode: CfgUncondMode = CfgUncondMode.EMPTY_TEXT

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 or self.top_k == 1

    @property
    def uses_cfg(self) -> bool:
        return self.cfg_scale != 1.0 and (self.cfg_frames is None or self.cfg_frames > 0)


@dataclass(frozen=True, slots=True)
class SynthesisRequest:
    """One utterance to synthesise.

    speaker_prefix: [K, hidden] float tensor placed before the text embeddings; None selects the
    model's learned ``null_prefix`` (the default voice).
    """

    request_id: str
    text: str
    speaker_prefix: Optional[torch.Tensor] = None
    sampling: SamplingParams = field(default_factory=SamplingParams)


def validated_text(request: SynthesisRequest, max_frames_ceiling: int) -> str:
    """Check a request's text and sampling knobs (both backends); returns the stripped text.

    Raises InvalidRequestError naming the field and the bad value.
    """
    from engine.errors import InvalidRequestError

    sp = request.sampling
    text = request.text.strip()
    if not text:
        raise InvalidRequestError("text is empty: Gepard cannot synthesise an empty transcript")
    checks = [
        (sp.temperature >= 0, f"temperature must be >= 0, got {sp.temperature}"),
        (sp.top_k >= 0, f"top_k must be >= 0, got {sp.top_k}"),
        (0.0 < sp.stop_threshold < 1.0, f"stop_threshold must be in (0, 1), got {sp.stop_threshold}"),
        (sp.repetition_penalty > 0, f"repetition_penalty must be > 0, got {sp.repetition_penalty}"),
        (sp.max_frames is None or 1 <= sp.max_frames <= max_frames_ceiling,
         f"max_frames must be in [1, {max_frames_ceiling}], got {sp.max_frames}"),
        (sp.cfg_frames is None or sp.cfg_frames >= 0, f"cfg_frames must be >= 0, got {sp.cfg_frames}"),
    ]
    for ok, message in checks:
        if not ok:
            raise InvalidRequestError(message)
    return text


@dataclass(frozen=True, slots=True)
class FrameChunk:
    """Frames produced since the previous chunk of the same request.

    codes: [32, T] int64 unfolded codes (T may be 0 on the final chunk).
    start_frame: index of the first frame of ``codes`` within the utterance.
    finish_reason: set on the last chunk of the request, None before.
    """

    request_id: str
    codes: torch.Tensor
    start_frame: int
    finish_reason: Optional[FinishReason] = None

    @property
    def num_frames(self) -> int:
        return int(self.codes.shape[-1])

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What callers need to know about the loaded model, without importing it."""

    name: str
    hidden_size: int
    prefix_length: int  # K, rows of a speaker prefix
    num_channels: int  # 32
    frame_rate_hz: float
    sample_rate_hz: int
    samples_per_frame: int
    fingerprint: str  # identifies the weights a speaker prefix was computed with
