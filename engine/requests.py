"""Plain-data messages between callers and a TtsEngine.

Nothing here knows HTTP or the wire protocol: the gateway converts its wire models into these.
Codes are always *unfolded*: 32 channels per frame, channel ``4*g + d`` holds digit ``d`` of
NanoCodec group ``g`` (levels ``[8, 7, 6, 6][d]``).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
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
    Accepted ranges: SAMPLING_BOUNDS (checked by ``validated_text``; nothing is checked here).
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
    model's learned ``null_prefix`` (the default voice); an empty [0, hidden] tensor means no
    prefix at all, the prompt is the text alone (the unconditioned voice: what the upstream
    reference runner does without a reference, spec 5.4).
    """

    request_id: str
    text: str
    speaker_prefix: Optional[torch.Tensor] = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    # How the caller takes frames: frames per delivery, growing, the last size repeating (a codec
    # chunk schedule). Both backends hold a request's frames until the next boundary or its end
    # instead of handing over every frame as it comes (DeliveryCadence); () asks for every frame.
    delivery: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Bound:
    """The accepted range of one numeric sampling knob: ``[lo, hi]``, an end open when ``*_open``.

    Every knob has an upper bound too: an unbounded value (top_k = 2**63, temperature = 1e300)
    overflows a tensor or turns into NaN inside the engine's batch step.
    """

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False

    def describe(self) -> str:
        """Interval notation: ``[0, 10]``, ``(0, 1)``."""
        lo, hi = (f"{v:g}" if isinstance(v, float) else _fmt(v) for v in (self.lo, self.hi))
        return f"{'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"

    def problem(self, value: object) -> Optional[str]:
        """None when ``value`` is accepted, else what is wrong: "must be in (0, 1), got 1.0"."""
        kind = "an integer" if self.integer else "a finite number"
        if isinstance(value, bool) or not isinstance(value, numbers.Integral if self.integer else numbers.Real):
            return f"must be {kind} in {self.describe()}, got {value!r}"
        if not self.integer and not math.isfinite(value):
            return f"must be {kind} in {self.describe()}, got {value!r}"
        below = value <= self.lo if self.lo_open else value < self.lo
        above = value >= self.hi if self.hi_open else value > self.hi
        if below or above:
            return f"must be in {self.describe()}, got {_fmt(value)}"
        return None


def _fmt(value: object) -> str:
    """A number for a message; huge integers short (2**63 - 1, 1e+300: int(1e300) has 301 digits)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and abs(int(value)) >= 10**16:
        n = abs(int(value))
        sign = "-" if int(value) < 0 else ""
        if n & (n - 1) == 0:
            return f"{sign}2**{n.bit_length() - 1}"
        if n & (n + 1) == 0:
            return f"{sign}(2**{n.bit_length()} - 1)" if sign else f"2**{n.bit_length()} - 1"
        if n < 10**308:
            return f"{float(value):.6g}"
        digits = str(n)  # past a float's range (a JSON integer of 400 digits): its size from its digits
        return f"{sign}{digits[0]}.{digits[1:6].rstrip('0') or '0'}e+{len(digits) - 1}"
    return repr(value)


MAX_FRAMES = 2000  # ~93 s of audio; engines may lower (never raise) it with max_frames_ceiling

#: What every entry point accepts (the wire, the settings defaults, both engines' request checks).
SAMPLING_BOUNDS: dict[str, Bound] = {
    "temperature": Bound(0.0, 10.0),  # 0 = greedy; past ~5 the frames are noise anyway
    "top_k": Bound(0, 1024, integer=True),  # 0 = off; channels have <= 8 codes, so > 8 changes nothing
    "repetition_penalty": Bound(0.0, 10.0, lo_open=True),  # 1 = off
    "repetition_window": Bound(0, MAX_FRAMES, integer=True),
    "seed": Bound(0, 2**63 - 1, integer=True),
    "stop_threshold": Bound(0.0, 1.0, lo_open=True, hi_open=True),  # 0 stops at once, 1 never stops
    "max_frames": Bound(1, MAX_FRAMES, integer=True),
    "cfg_scale": Bound(0.0, 20.0, lo_open=True),  # 1 = no guidance
    "cfg_frames": Bound(0, MAX_FRAMES, integer=True),
}


def sampling_problems(sp: SamplingParams, max_frames_ceiling: int = MAX_FRAMES) -> list[str]:
    """Every out-of-range knob of ``sp`` as "name must be ..., got ..." (empty when all are fine)."""
    problems = []
    for name, bound in SAMPLING_BOUNDS.items():
        value = getattr(sp, name)
        if value is None and name in ("seed", "max_frames", "cfg_frames"):
            continue  # None: random seed, adaptive cap, guide every frame
        if name == "max_frames":
            bound = dataclasses.replace(bound, hi=max_frames_ceiling)
        problem = bound.problem(value)
        if problem is not None:
            problems.append(f"{name} {problem}")
    if not isinstance(sp.cfg_uncond_mode, CfgUncondMode):
        modes = ", ".join(m.value for m in CfgUncondMode)
        problems.append(f"cfg_uncond_mode must be one of {modes}, got {sp.cfg_uncond_mode!r}")
    return problems


def validated_text(request: SynthesisRequest, max_frames_ceiling: int) -> str:
    """Check a request's text and sampling knobs (both backends); returns the stripped text.

    Raises InvalidRequestError naming the field, its accepted range and the bad value. The wire
    checks the same ranges; this is the engine's own guard for callers of the engine API.
    """
    from engine.errors import InvalidRequestError

    text = request.text.strip()
    if not text:
        raise InvalidRequestError("text is empty: Gepard cannot synthesise an empty transcript")
    problems = sampling_problems(request.sampling, max_frames_ceiling)
    delivery = request.delivery
    if not isinstance(delivery, tuple) or not all(type(n) is int and n >= 1 for n in delivery):
        # a size of 0 would never move the next delivery past the frames received
        problems.append(f"delivery must be a tuple of frame counts >= 1, got {delivery!r}")
    if problems:
        raise InvalidRequestError("; ".join(problems))
    return text


class DeliveryCadence:
    """Where a request's frames are handed to its caller: at the cumulative boundaries of its
    ``delivery`` sizes (the last size repeating), or at every frame when it has none. A chunk of
    audio needs all its frames, so the caller loses nothing by waiting for a boundary, and the
    handing over (a task wake-up, a codec push) happens once per chunk instead of once per frame."""

    __slots__ = ("sizes", "_passed", "_boundary")

    def __init__(self, sizes: tuple[int, ...] = ()) -> None:
        self.sizes = sizes
        self._passed = 0  # boundaries passed so far
        self._boundary = 0  # frames at which the next delivery is due
        self.advance(0)

    def due(self, received: int) -> bool:
        """Whether ``received`` frames reach the next boundary."""
        return received >= self._boundary

    def advance(self, received: int) -> None:
        """Move the next boundary past ``received`` frames (call after a delivery)."""
        if not self.sizes:
            self._boundary = received + 1
            return
        while self._boundary <= received:
            self._boundary += self.sizes[min(self._passed, len(self.sizes) - 1)]
            self._passed += 1


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
class EngineDescription:
    """What serves the model (for logs and monitoring): with GEPARD_BACKEND=auto the backend is the
    one that started, which may not be the one asked for first."""

    backend: str  # "vllm" | "torch"
    loop: str  # vLLM's model runner ("v1" | "v2"), or the torch backend's loop ("fast" | "reference")
    device: str  # "cpu", "cuda:0", ...
    dtype: str  # "float32", "bfloat16", ...
    # decode steps replayed as CUDA graphs now (vLLM: not enforce_eager on CUDA; the torch fast path:
    # captured at start; off where a capture failed and the steps run eagerly)
    cuda_graphs: bool = False
    # prefills (new requests' prompts) replayed as CUDA graphs too (vLLM: its piecewise or full graphs
    # for mixed batches; the torch fast path: GEPARD_TORCH_PREFILL_GRAPHS, off where a capture failed)
    prefill_graphs: bool = False
    fused_kernels: bool = False  # the torch fast path's Triton kernels, asked for and past their check


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
