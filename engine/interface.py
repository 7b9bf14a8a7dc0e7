"""The one async API the gateway uses, implemented by the torch and vLLM backends."""

from __future__ import annotations

import abc
from typing import AsyncIterator, Optional

import torch

from engine.requests import EngineDescription, FrameChunk, ModelInfo, SynthesisRequest
from engine.stats import EngineStats, StepObserver


class TtsEngine(abc.ABC):
    """Text + voice prompt -> a stream of audio-code frames.

    ``generate`` is an async generator: it yields FrameChunks as frames are sampled, the last one
    carrying ``finish_reason``. Closing the generator early (or cancelling the task iterating it)
    aborts the request and frees its resources, as does ``abort(request_id)``.
    """

    @property
    @abc.abstractmethod
    def model_info(self) -> ModelInfo: ...

    @property
    @abc.abstractmethod
    def description(self) -> EngineDescription:
        """The backend that serves, its loop, device and dtype."""

    @abc.abstractmethod
    def generate(self, request: SynthesisRequest) -> AsyncIterator[FrameChunk]: ...

    @abc.abstractmethod
    async def abort(self, request_id: str) -> None: ...

    @property
    def num_requests(self) -> int:
        """Requests the engine holds now, running or queued (0 when idle; a leak check)."""
        return 0

    @property
    def cfg_unavailable(self) -> Optional[str]:
        """Why classifier-free guidance cannot run here at all (every request using it is refused,
        400), or None when it can. In the engine's terms: the gateway names its settings."""
        return None

    def stats(self) -> EngineStats:
        """The scheduler now (running, waiting, KV-cache use, preemptions): see engine.stats."""
        return EngineStats()

    def set_step_observer(self, observer: Optional[StepObserver]) -> None:
        """Call ``observer`` with a StepEvent after every engine step (None: stop). A backend
        without per-step events ignores it."""

    @abc.abstractmethod
    async def check_health(self) -> None:
        """Raise EngineDeadError when the engine can no longer serve requests."""

    @abc.abstractmethod
    def compress_reference(self, ref_codes: torch.Tensor) -> torch.Tensor:
        """Reference codes [T, 32] -> speaker prefix [K, hidden] (float32, CPU)."""

    @abc.abstractmethod
    def default_prefix(self) -> torch.Tensor:
        """The model's learned default voice (``null_prefix``) [K, hidden], float32 on CPU."""

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    async def __aenter__(self) -> "TtsEngine":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
