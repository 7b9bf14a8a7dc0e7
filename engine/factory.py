"""Pick and start a backend: ``GEPARD_BACKEND=auto|vllm|torch``.

``auto`` uses vLLM when it imports and starts, else the torch backend (logged; an ERROR when vLLM
imported but did not start, with its reason). A checkpoint that cannot be used fails either way,
and so do backend-specific ``extra`` options, which only the backend they name takes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from engine.errors import CheckpointError, EngineError
from engine.interface import TtsEngine

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "vllm", "torch")


@dataclass
class EngineOptions:
    model: str | Path | None = None
    backend: str = "auto"
    device: str = "auto"
    dtype: str = "auto"
    max_batch: int = 64
    extra: dict = field(default_factory=dict)  # backend-specific knobs
    vllm_runner: str | None = None  # vLLM's model runner, "v1" | "v2"; None: v1 (engine.backends.vllm_runner)
    stall_timeout_s: float | None = None  # vLLM: no engine step this long with requests unfinished = dead (0: off)
    torch_path: str = "auto"  # the torch backend's loop: auto | reference | fast (engine.backends.torch_fast)
    torch_compile: bool = False  # the fast path's decode step and prefill through torch.compile (fast_step)
    torch_overlap: bool = False  # the fast path launches a step before reading the last (engine.backends.torch_fast)
    torch_prefill_graphs: bool = False  # the fast path's prefill as CUDA graphs too (engine.backends.torch_fast)
    torch_prefill_batch: Optional[int] = None  # the fast path's new requests prefilled together in one step (None: by device)
    torch_fused_kernels: Optional[bool] = None  # the fast path's element-wise ops as Triton kernels (None: on CUDA)
    torch_stream_priority: str = "high"  # the fast path's CUDA stream against the codec's: high | normal


async def create_engine(opts: EngineOptions) -> TtsEngine:
    if opts.backend not in BACKENDS:
        raise EngineError(f"unknown backend {opts.backend!r}; choose one of {', '.join(BACKENDS)}")
    if opts.backend in ("vllm", "auto"):
        try:
            from engine.backends.vllm_backend import VllmEngine  # noqa: F401  (import probes availability)
        except ImportError as exc:
            if opts.backend == "vllm":
                raise EngineError(f"backend 'vllm' requested but it cannot be imported: {exc}") from exc
            logger.info("vLLM backend unavailable (%s); using the torch backend", exc)
        else:
            try:
                return await VllmEngine.start(opts)
            except CheckpointError:
                raise  # the checkpoint itself: the torch backend would refuse it too
            except Exception as exc:  # noqa: BLE001 (whatever stopped vLLM, the torch backend may serve)
                if opts.backend == "vllm" or opts.extra:  # asked for vLLM, or for options only it takes
                    raise
                # on a GPU vLLM's adapter has not run yet while the torch backend's fast path has: a
                # server that starts on it is worth more than one that does not start at all
                logger.error("vLLM backend did not start (%s: %s); GEPARD_BACKEND=auto starts the torch backend "
                             "instead (GEPARD_BACKEND=vllm makes this fatal)", type(exc).__name__, exc)
    return await _start_torch(opts)


async def _start_torch(opts: EngineOptions) -> TtsEngine:
    import asyncio

    from engine.backends.torch_backend import TorchEngine, TorchEngineConfig

    cfg = TorchEngineConfig(model=opts.model, device=opts.device, dtype=opts.dtype, max_batch=opts.max_batch,
                            **{"path": opts.torch_path, "compile": opts.torch_compile, "overlap": opts.torch_overlap,
                               "prefill_graphs": opts.torch_prefill_graphs, "prefill_batch": opts.torch_prefill_batch,
                               "fused_kernels": opts.torch_fused_kernels, "stream_priority": opts.torch_stream_priority,
                               **opts.extra})
    # loading a 556M checkpoint takes seconds: keep the event loop free meanwhile
    return await asyncio.get_running_loop().run_in_executor(None, TorchEngine.from_config, cfg)
