"""Engine statistics for monitoring, free of any metrics library or HTTP.

Two shapes, because operators need both:

- ``EngineStats``: a snapshot of the scheduler now (running and waiting requests, KV-cache use,
  preemptions since start), read when someone asks (a ``/metrics`` scrape);
- ``StepEvent``: what one engine step did (its wall time, how many requests it advanced, the queue
  waits of the requests it scheduled for the first time), pushed to an observer as steps happen,
  so histograms see every step and not only the ones around a scrape.

Both backends implement ``TtsEngine.stats()`` and ``TtsEngine.set_step_observer()``. The observer
may be called from the engine's worker thread (torch) or its event loop (vLLM); it must be cheap
and thread-safe (Prometheus client objects are) and must not raise: an exception it raises is
logged and swallowed, never allowed to hurt generation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Optional

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineStats:
    """The engine's scheduler as of now (all zero when idle; ``preemptions`` only grows)."""

    running: int = 0  # requests being decoded
    waiting: int = 0  # requests submitted but not scheduled yet
    # Fraction of the KV cache in use, 0..1. vLLM: KV blocks in use / blocks (its own figure; the
    # cache is sized so max_batch full-length requests fit, see vllm_backend). torch: cache rows in
    # use / the most it may need, 2 x max_batch (a request holds one row, two while it uses CFG).
    # Not "rows allocated": that cache grows on demand and would read ~1 whenever it is right-sized.
    kv_cache_usage: float = 0.0
    preemptions: int = 0  # requests preempted since start (vLLM; always 0 for torch, which never preempts)
    steps: int = 0  # engine steps since start


@dataclass(frozen=True)
class StepEvent:
    """One engine step: a batched decode (and any prefills scheduled with it)."""

    duration_s: float  # wall time of the step (vLLM: between consecutive step reports, see vllm_backend)
    # requests in the step's batched decode (vLLM: requests scheduled in the step, prefills
    # included; torch: a step with no decode counts the requests it prefilled); 0: no step ran,
    # the event only carries queue waits or preemptions reported late
    batch_size: int
    queue_waits_s: tuple[float, ...] = ()  # requests first scheduled in this step: submission -> scheduling
    preempted: int = 0  # requests preempted in this step


StepObserver = Callable[[StepEvent], None]


def notify(observer: Optional[StepObserver], event: StepEvent) -> None:
    """Hand ``event`` to ``observer``; an observer failure is logged, never raised into the engine."""
    if observer is None:
        return
    try:
        observer(event)
    except Exception:
        logger.exception("engine step observer failed (ignored)")


__all__ = ["EngineStats", "StepEvent", "StepObserver", "notify"]
