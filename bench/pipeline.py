"""Engine + codec, as the gateway runs them: time to first audio (first PCM out of the codec), RTF and xRT.

    python bench/pipeline.py --backend torch|vllm [--size tiny|full] [--concurrency 1,32,128,256]
                             [--frames 200] [--chunk-schedule 2,4,8,16 [--chunk-schedule 4,16 ...]]
                             [--rounds 1] [--one-stream-rounds 5]
                             [--torch-path auto|reference|fast] [--vllm-runner v1|v2] [--budget-s 300]

One engine (``max_batch`` = the largest concurrency that fits, see below) on a random checkpoint
whose stop head never fires (``--stop-after 0``: every stream makes exactly ``--frames`` frames),
and its NanoCodec behind one ``BatchingCodecDecoder`` per chunk schedule. For each concurrency C
and each schedule (alternating, ``--rounds`` times, so a drifting machine biases none of them), a
warm-up burst and then C streams at once; each stream feeds the engine's frames to its decode
stream exactly as ``api.synthesis.SynthesisService.speak`` does:

    TTFA      submit -> first PCM out of the codec (not the first frame), per stream: p50 / p99
    TTFF      submit -> first frame out of the engine, p50 (TTFA - TTFF: the first chunk's wait + decode)
    RTF       per stream: submit -> last PCM, / the stream's audio seconds (< 1: faster than real time)
    xRT       all streams' audio seconds / the burst's wall seconds (aggregate real-time multiple)
    underrun  per stream: seconds a listener who starts playing at the first PCM waits at the seams
    step      engine step wall time p50 / p99 (torch: one batched step; vLLM: its model execution)
    codec     codec share: decode seconds / (decode + engine step seconds) during the burst
    mem       peak GPU memory in GiB: the device's used memory, sampled every 20 ms (all processes:
              vLLM's engine core too), and this process's torch allocator peak
    n         the streams with audio: the samples each per-stream percentile rests on. A stream
              that ends without audio fails: it is counted apart (``failed``), not given a TTFA or RTF

Percentiles interpolate between closest ranks (``bench._common.percentile``). One stream per burst
gives one sample per row, so the one-stream headline pools the C=1 rows of the default schedule:
``--one-stream-rounds`` (default ``--rounds``) runs more bursts at C=1 only, the cheapest level.

The codec (``--codec-impl``): NeMo's NanoCodec when ``nemo_toolkit`` imports, else the torch decoder
(``codec_worker.torchcodec``: the same audio from the same checkpoint, torch + PyYAML only), so a GPU
host with only PyTorch measures TTFA too. There the random checkpoint is written without NeMo's
codec and gets a random decoder-only one (``codec_worker.torchcodec.random``, seconds even at full
size). ``--codec no`` runs frames only (TTFA n/a, TTFF stands in). ``--check`` only reports what the
host has (CUDA, the modules the run needs, the codec) and exits 4 when a required module is missing.

Capacity: the engine is started for the largest concurrency; when that fails (KV cache or memory),
the largest level is dropped and it starts again, so 512/1024 run only "if memory allows".
Extra schedules (the 2nd ``--chunk-schedule`` on) run only at ``--compare-levels`` (default: 1 stream),
so comparing first-audio latency costs little. ``--budget-s`` bounds the whole run: a level whose predicted burst time (last wall x C / last C)
does not fit in what is left is skipped, and a burst still running at the budget is cancelled.
Results print as a table and go to ``--json``, rewritten after every row, so a run cut short (by
bench/gpu_session.sh's cap, with SIGINT) keeps every row it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import machine, percentile, random_checkpoint  # noqa: E402
from codec_worker.batching import BatchingCodecDecoder, DecodeBatchEvent  # noqa: E402
from codec_worker.schedule import DEFAULT_SCHEDULE, ChunkSchedule  # noqa: E402
from engine.interface import TtsEngine  # noqa: E402
from engine.requests import SamplingParams, SynthesisRequest  # noqa: E402
from engine.stats import StepEvent  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the forest."
PROMPT_ROOM = 256  # positions kept for the prompt when sizing the KV cache (vLLM max_model_len, torch max_positions)


@dataclass
class StreamResult:
    ttff_s: float  # submit -> first frame out of the engine
    ttfa_s: float
    total_s: float
    audio_s: float
    underrun_s: float


@dataclass
class Row:
    backend: str
    runner: str  # vLLM model runner (v1/v2) or the torch loop (reference/fast)
    size: str
    schedule: str
    concurrency: int
    frames: int
    wall_s: float
    xrt: float
    rtf_p50: float
    rtf_p99: float
    ttfa_p50_ms: float
    ttfa_p99_ms: float
    ttff_p50_ms: float
    underrun_p50_ms: float
    underrun_p99_ms: float
    step_p50_ms: float
    step_p99_ms: float
    steps: int
    codec_s: float
    codec_share: float
    gpu_device_peak_gib: Optional[float] = None
    gpu_torch_peak_gib: Optional[float] = None
    note: str = ""
    n: int = 0  # streams with audio: the samples behind the per-stream percentiles
    failed: int = 0  # streams that ended without audio (left out of the percentiles)


@dataclass
class Probe:
    """Engine steps and codec decodes seen during one burst (observers run on other threads)."""

    steps: list[float] = field(default_factory=list)
    codec: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_step(self, event: StepEvent) -> None:
        if event.batch_size:
            with self.lock:
                self.steps.append(event.duration_s)

    def on_decode(self, event: DecodeBatchEvent) -> None:
        with self.lock:
            self.codec.append(event.duration_s)


def pct(values: list[float], q: float) -> float:
    """The shared interpolating percentile (q in 0-100); NaN (not measured) for no values."""
    value = percentile(values, q)
    return math.nan if value is None else value


def underrun(arrivals: list[tuple[float, float]]) -> float:
    """Seconds a listener waits at the seams: playback starts at the first arrival, runs in real
    time, and stalls whenever the next piece (time, audio seconds) has not arrived yet."""
    if not arrivals:
        return 0.0
    start, played, stalled = arrivals[0][0], 0.0, 0.0
    for t, audio in arrivals:
        due = start + played + stalled  # when the listener runs out of what arrived before
        stalled += max(0.0, t - due)
        played += audio
    return stalled


async def one_stream(engine: TtsEngine, decoder: Optional[BatchingCodecDecoder], rid: str, seed: int, frames: int,
                     sample_rate_hz: int) -> StreamResult:
    if decoder is None:
        return await frames_only(engine, rid, seed, frames)
    stream = decoder.open_stream()
    # frames a codec chunk at a time, as SynthesisService.speak asks the engine for them
    request = SynthesisRequest(rid, TEXT, None, SamplingParams(temperature=0.4, seed=seed, max_frames=frames),
                               delivery=decoder.schedule.sizes)
    t0 = time.perf_counter()
    arrivals: list[tuple[float, float]] = []
    ttff = float("nan")
    try:
        async for chunk in engine.generate(request):
            if chunk.num_frames:
                if ttff != ttff:
                    ttff = time.perf_counter() - t0
                pcm = await stream.push(chunk.codes)
                if pcm.size:
                    arrivals.append((time.perf_counter() - t0, pcm.size / sample_rate_hz))
            if chunk.finished:
                pcm = await stream.finish()
                if pcm.size:
                    arrivals.append((time.perf_counter() - t0, pcm.size / sample_rate_hz))
    finally:
        await stream.aclose()
    audio = sum(a for _, a in arrivals)
    return StreamResult(ttff, arrivals[0][0] if arrivals else float("nan"), arrivals[-1][0] if arrivals else 0.0, audio,
                        underrun(arrivals))


async def frames_only(engine: TtsEngine, rid: str, seed: int, frames: int) -> StreamResult:
    """No codec: arrivals are the engine's frames (RTF and underrun of the engine alone), TTFA n/a."""
    info = engine.model_info
    request = SynthesisRequest(rid, TEXT, None, SamplingParams(temperature=0.4, seed=seed, max_frames=frames))
    t0 = time.perf_counter()
    arrivals: list[tuple[float, float]] = []
    async for chunk in engine.generate(request):
        if chunk.num_frames:
            arrivals.append((time.perf_counter() - t0, chunk.num_frames * info.samples_per_frame / info.sample_rate_hz))
    return StreamResult(arrivals[0][0] if arrivals else float("nan"), float("nan"),
                        arrivals[-1][0] if arrivals else 0.0, sum(a for _, a in arrivals), underrun(arrivals))


class GpuMemory:
    """Peak device memory in use (all processes), sampled on the event loop; None without CUDA."""

    def __init__(self) -> None:
        import torch

        self.torch = torch if torch.cuda.is_available() else None
        self.peak = 0
        self._task: Optional[asyncio.Task[None]] = None

    def __enter__(self) -> "GpuMemory":
        if self.torch is not None:
            self.torch.cuda.reset_peak_memory_stats()
            self._task = asyncio.get_running_loop().create_task(self._sample())
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._task is not None:
            self._task.cancel()
            self._sample_once()

    def _sample_once(self) -> None:
        free, total = self.torch.cuda.mem_get_info()
        self.peak = max(self.peak, total - free)

    async def _sample(self) -> None:
        while True:
            self._sample_once()
            await asyncio.sleep(0.02)

    def device_gib(self) -> Optional[float]:
        return None if self.torch is None else self.peak / 2**30

    def torch_gib(self) -> Optional[float]:
        return None if self.torch is None else self.torch.cuda.max_memory_allocated() / 2**30


async def burst(engine: TtsEngine, decoder: Optional[BatchingCodecDecoder], concurrency: int, frames: int, tag: str,
                timeout_s: Optional[float]) -> tuple[float, list[StreamResult], Probe, GpuMemory]:
    probe = Probe()
    engine.set_step_observer(probe.on_step)
    if decoder is not None:
        decoder.observer = probe.on_decode
    rate = engine.model_info.sample_rate_hz
    t0 = time.perf_counter()
    try:
        with GpuMemory() as memory:
            jobs = [one_stream(engine, decoder, f"{tag}-{i}", i, frames, rate) for i in range(concurrency)]
            async with asyncio.timeout(timeout_s):  # not wait_for: on 3.11 it can lose a cancel
                streams = await asyncio.gather(*jobs)
    finally:
        engine.set_step_observer(None)
        if decoder is not None:
            decoder.observer = None
    return time.perf_counter() - t0, list(streams), probe, memory


def runner_of(engine: TtsEngine) -> str:
    """vLLM: its model runner; torch: its loop (the attribute names are the backends' own)."""
    for name in ("model_runner", "path"):
        value = getattr(engine, name, None)
        if isinstance(value, str):
            return value
    config = getattr(engine, "config", None)
    return str(getattr(config, "path", "")) or "-"


async def start_engine(args: argparse.Namespace, checkpoint: Path, max_batch: int) -> TtsEngine:
    if args.backend == "vllm":
        from engine.backends.vllm_backend import VllmEngine, VllmEngineConfig

        return await VllmEngine.start(VllmEngineConfig(
            model=checkpoint, device=args.device, dtype=args.dtype, max_batch=max_batch,
            max_model_len=args.frames + PROMPT_ROOM, gpu_memory_utilization=args.gpu_memory_utilization,
            model_runner=args.vllm_runner))
    from engine.backends.torch_backend import TorchEngine, TorchEngineConfig

    config = TorchEngineConfig(model=checkpoint, device=args.device, dtype=args.dtype, max_batch=max_batch,
                               path=args.torch_path, max_positions=args.frames + PROMPT_ROOM, overlap=args.torch_overlap,
                               prefill_graphs=args.torch_prefill_graphs, prefill_batch=args.torch_prefill_batch,
                               stream_priority=args.torch_stream_priority,
                               fused_kernels=None if args.torch_fused_kernels == "auto" else args.torch_fused_kernels == "yes")
    return await asyncio.get_running_loop().run_in_executor(None, TorchEngine.from_config, config)


def prefill_batch(engine: TtsEngine) -> Optional[int]:
    """The new requests the torch fast path prefills together in one step (the setting, or its
    default for the device); None for an engine without a fast path."""
    generator = getattr(engine, "_generator", None)
    return getattr(generator, "prefill_batch", None)


async def start_for(args: argparse.Namespace, checkpoint: Path, levels: list[int]) -> tuple[TtsEngine, list[int]]:
    """Start the engine for the largest level that fits; drop levels that do not."""
    while True:
        try:
            return await start_engine(args, checkpoint, max(levels)), levels
        except Exception as exc:  # KV cache / out of memory: try the next level down
            if len(levels) == 1:
                raise
            print(f"# engine for {max(levels)} streams did not start ({type(exc).__name__}: {str(exc)[:200]}); "
                  f"dropping that level", flush=True)
            levels = levels[:-1]


REQUIRED = ("numpy", "safetensors", "tokenizers", "yaml")  # engine + torch codec decoder beside torch (pip: PyYAML)
CODEC_MODULE = "nemo.collections.tts.modules.audio_codec_modules"  # what building the NanoCodec imports


def codec_available() -> tuple[bool, str]:
    """Whether NeMo's codec modules import here (the codec needs them), and why not."""
    import importlib

    try:
        importlib.import_module(CODEC_MODULE)
    except Exception as exc:  # ImportError, or a NeMo dependency failing at import
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def check_host() -> int:
    """--check: what this host offers for the run; 4 when a required module is missing."""
    import importlib

    import torch

    cuda = torch.cuda.is_available()
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA "
          f"{torch.version.cuda if cuda else 'none'}: {torch.cuda.get_device_name(0) if cuda else 'no GPU visible'}")
    missing = []
    for name in REQUIRED:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append("PyYAML" if name == "yaml" else name)
    ok, why = codec_available()
    print(f"codec: {'NanoCodec through ' + CODEC_MODULE if ok else 'torch decoder (codec_worker.torchcodec, decode only; NeMo: ' + why[:160] + ')'}")
    if missing:
        print(f"missing module(s): {', '.join(missing)}; bring them as wheels (CPU wheels for this python: "
              f"pip download --only-binary=:all: --python-version {sys.version_info.major}.{sys.version_info.minor} "
              f"{' '.join(missing)}) and pip install them from a local directory", flush=True)
        return 4
    return 0


def prepare_checkpoint(args: argparse.Namespace, impl: Optional[str]) -> Path:
    """The checkpoint to run: --checkpoint (written there when absent, stop head never firing), or
    the bench cache's random one of --size. ``impl`` "nemo": with NeMo's random codec; "torch": a
    random decoder-only codec written without NeMo, unless the checkpoint already has a codec; None: none."""
    if args.checkpoint is None:
        if impl == "nemo":
            return random_checkpoint(args.size, stop_after=0)
        args.checkpoint = random_checkpoint_dir(args.size, impl)
    if not (args.checkpoint / "model.safetensors").exists():
        from engine.tiny import write_tiny_checkpoint

        print(f"# writing a {args.size} random checkpoint (stop head never fires{'' if impl == 'nemo' else ', no NeMo codec'}) "
              f"to {args.checkpoint} ...", flush=True)
        write_tiny_checkpoint(args.checkpoint, size=args.size, stop_after=0, with_codec=impl == "nemo")
    if impl == "torch":
        from engine.tiny import CODEC_FILE

        if not (args.checkpoint / CODEC_FILE).exists():
            from codec_worker.torchcodec.random import write_random_decoder_codec

            print(f"# writing a {args.size} random decoder-only codec (no NeMo) to {args.checkpoint / CODEC_FILE} ...",
                  flush=True)
            write_random_decoder_codec(args.checkpoint / CODEC_FILE, size=args.size)
    return args.checkpoint


def random_checkpoint_dir(size: str, impl: Optional[str] = None) -> Path:
    from bench._common import CACHE

    return CACHE / f"{size}-stop0-{'torchcodec' if impl == 'torch' else 'nocodec'}"


def load_codec(checkpoint: Path, args: argparse.Namespace, impl: str) -> Any:
    from codec_worker.nanocodec import load_codec as load
    from engine.device import pick_device, pick_dtype
    from engine.tiny import CODEC_FILE

    device = pick_device(args.device)
    return load(checkpoint / CODEC_FILE, device=device, dtype=pick_dtype(device, args.dtype), impl=impl)


def capture_codec_graphs(codec: Any, args: argparse.Namespace, max_window_frames: int, max_chunk_frames: int) -> str:
    """As the gateway does (GEPARD_CODEC_CUDA_GRAPHS, on by default): the torch decoder on CUDA
    captured for every decode its batching decoders make. "on (N shapes)" or "off"."""
    from codec_worker.nanocodec import capture_decoder_graphs

    if args.codec_graphs == "no" or codec.impl != "torch" or codec.device.type != "cuda":
        return "off"
    carried = max_chunk_frames if codec.state_cache is not None else 0
    if not capture_decoder_graphs(codec, args.codec_batch, max_window_frames, carried):
        return "off (capture failed: see the log)"
    return f"on ({len(codec.graph_shapes) + len(codec.state_graph_shapes)} shapes)"


def carrying_codec(codec: Any, checkpoint: Path, args: argparse.Namespace, streams: int) -> tuple[Any, bool]:
    """As the gateway does (GEPARD_CODEC_CARRY_STATE; auto: on CPU): the codec that decodes, given
    state slots for ``streams`` streams where it carries state (beside NeMo's codec, the torch
    decoder of the same checkpoint), and whether it does."""
    from codec_worker.nanocodec import stream_decoding_codec
    from engine.tiny import CODEC_FILE

    carry = None if args.codec_carry_state == "auto" else args.codec_carry_state == "yes"
    return stream_decoding_codec(codec, checkpoint / CODEC_FILE, "auto", graphs=args.codec_graphs != "no",
                                 carry_state=carry, compiled=False, slots=streams)


def fusing_codec(codec: Any, args: argparse.Namespace) -> bool:
    """As the gateway does (GEPARD_CODEC_FUSED_ACTIVATIONS; auto: on CUDA), before the graphs are
    captured: the torch decoder's snake activations as one Triton kernel each. Whether they are."""
    from codec_worker.nanocodec import fuse_decoder_activations

    fused = None if args.codec_fused_activations == "auto" else args.codec_fused_activations == "yes"
    return fuse_decoder_activations(codec, fused, compiled=False)


def use_codec(args: argparse.Namespace) -> Optional[str]:
    """The codec implementation to run ("nemo" or "torch"), or None for frames only (--codec no)."""
    if args.codec == "no":
        return None
    ok, why = codec_available()
    if args.codec_impl == "nemo" and not ok:
        raise SystemExit(f"bench/pipeline.py: --codec-impl nemo but NeMo's codec modules do not import here: {why}")
    impl = args.codec_impl if args.codec_impl != "auto" else ("nemo" if ok else "torch")
    if impl == "torch" and not ok:
        print(f"# no NeMo on this host ({why[:160]}): the torch decoder (decode only) makes the audio", flush=True)
    return impl


def summarise(args: argparse.Namespace, runner: str, schedule: ChunkSchedule | str, c: int, wall: float,
              streams: list[StreamResult], probe: Probe, memory: GpuMemory) -> Row:
    # A stream without audio has no first audio (NaN, which sorts anywhere) and an RTF of 0 (the
    # best): it fails, counted apart, and the percentiles rest on the streams that were heard.
    heard = [s for s in streams if s.audio_s > 0]
    ttfa = [s.ttfa_s * 1000 for s in heard if not math.isnan(s.ttfa_s)]  # all NaN without a codec
    rtf = [s.total_s / s.audio_s for s in heard]
    under = [s.underrun_s * 1000 for s in heard]
    codec_s, step_s = sum(probe.codec), sum(probe.steps)
    return Row(args.backend, runner, args.size, str(schedule), c, args.frames, wall,
               sum(s.audio_s for s in streams) / wall, pct(rtf, 50), pct(rtf, 99),
               pct(ttfa, 50), pct(ttfa, 99), pct([s.ttff_s * 1000 for s in heard], 50),
               pct(under, 50), pct(under, 99),
               pct(probe.steps, 50) * 1000, pct(probe.steps, 99) * 1000, len(probe.steps),
               codec_s, codec_s / max(codec_s + step_s, 1e-9), memory.device_gib(), memory.torch_gib(),
               n=len(heard), failed=len(streams) - len(heard))


# Below this many streams a burst's wall time grows about as the square root of the streams, beyond it
# about linearly: batching is nearly free until the device fills. Measured: on an H200 (2026-12-04,
# full size, bf16) 1 -> 128 streams took 7.5x the wall time and 128 -> 256 2x; on the 2-core CPU
# (torch, full) 1 -> 8 took 2.1x and 8 -> 32 2.4x.
SUBLINEAR_BELOW = 16


def predicted_burst_s(last_c: int, last_wall_s: float, c: int) -> float:
    """A burst of ``c`` streams' wall time from the last level's, with 20% to spare: the budget
    skips a level predicted not to finish. Linear from every level was far too cautious from one
    stream: on the H200 it predicted 102 s for 128 streams, which took 5."""
    exponent = 0.5 if last_c < SUBLINEAR_BELOW else 1.0
    return last_wall_s * (c / last_c) ** exponent * 1.2


def skipped(args: argparse.Namespace, runner: str, c: int, note: str) -> Row:
    nan = float("nan")
    return Row(args.backend, runner, args.size, "-", c, args.frames, wall_s=nan, xrt=nan, rtf_p50=nan, rtf_p99=nan,
               ttfa_p50_ms=nan, ttfa_p99_ms=nan, ttff_p50_ms=nan, underrun_p50_ms=nan, underrun_p99_ms=nan, step_p50_ms=nan,
               step_p99_ms=nan, steps=0, codec_s=0.0, codec_share=nan, note=note)


HEADER = (f"{'schedule':>12} {'C':>5} {'n':>5} {'xRT':>8} {'RTF p50':>8} {'RTF p99':>8} {'TTFA p50':>9} {'TTFA p99':>9} {'TTFF p50':>8} "
          f"{'under p99':>9} {'step p50':>8} {'step p99':>8} {'codec':>6} {'GPU GiB':>7}")


def fmt(r: Row) -> str:
    mem = "-" if r.gpu_device_peak_gib is None else f"{r.gpu_device_peak_gib:.1f}"
    notes = [f"FAILED: {r.failed} stream(s) without audio"] if r.failed else []
    notes += [r.note] if r.note else []
    return (f"{r.schedule:>12} {r.concurrency:5d} {r.n:5d} {r.xrt:8.2f} {r.rtf_p50:8.3f} {r.rtf_p99:8.3f} {r.ttfa_p50_ms:9.1f} "
            f"{r.ttfa_p99_ms:9.1f} {r.ttff_p50_ms:8.1f} {r.underrun_p99_ms:9.1f} {r.step_p50_ms:8.2f} {r.step_p99_ms:8.2f} "
            f"{r.codec_share:6.1%} {mem:>7}{''.join('  ' + note for note in notes)}")


def one_stream_figures(rows: list[Row]) -> Optional[dict[str, Any]]:
    """The one-stream figures from the C=1 rows given (one schedule): each such burst is one stream,
    so its p50 is its one sample, and the bursts pool into p50s over ``n`` samples."""
    solo = [r for r in rows if r.concurrency == 1]
    if not solo:
        return None
    heard = [r for r in solo if r.n]

    def p50(key: str) -> float:
        return pct([v for v in (getattr(r, key) for r in heard) if not math.isnan(v)], 50)

    return {"ttfa_ms": p50("ttfa_p50_ms"), "ttff_ms": p50("ttff_p50_ms"), "rtf": p50("rtf_p50"),
            "schedule": solo[0].schedule, "n": len(heard), "failed": sum(r.failed for r in solo)}


def headline(rows: list[Row]) -> dict[str, Any]:
    """The figures the issue's targets are stated in: one stream, and the most streams kept real time."""
    main = [r for r in rows if r.schedule == rows[0].schedule and not r.note] if rows else []
    realtime = [r.concurrency for r in main if r.rtf_p99 < 1.0 and not r.failed]
    return {"one_stream": one_stream_figures(main),
            "max_realtime_concurrency": max(realtime) if realtime else 0,
            "best_xrt": max((r.xrt for r in main), default=float("nan"))}


def result_doc(args: argparse.Namespace, host: str, runner: str, checkpoint: Path, impl: Optional[str],
               rows: list[Row]) -> dict[str, Any]:
    return {"machine": host, "backend": args.backend, "runner": runner, "size": args.size, "dtype": args.dtype,
            "frames": args.frames, "checkpoint": str(checkpoint), "codec": impl is not None, "codec_impl": impl,
            "codec_cuda_graphs": getattr(args, "codec_graphs_used", None),
            "codec_carry_state": getattr(args, "codec_carry_state_used", None),
            "codec_fused_activations": getattr(args, "codec_fused_used", None), "torch_overlap": args.torch_overlap,
            "torch_prefill_graphs": args.torch_prefill_graphs,
            "torch_prefill_batch": getattr(args, "torch_prefill_batch_used", args.torch_prefill_batch),
            "torch_stream_priority": args.torch_stream_priority if args.backend == "torch" else None,
            "torch_fused_kernels": getattr(args, "torch_fused_used", None),
            "engine_cuda_graphs": getattr(args, "engine_graphs_used", None), **headline(rows),
            "rows": [asdict(r) for r in rows]}


def save(path: Optional[Path], result: dict[str, Any]) -> None:
    """Write ``result`` to ``path`` (NaN, not measured, as null: strict JSON) through a temporary
    file: called after every row, so a run cut at its cap keeps the rows it measured, and a cut
    during the write keeps the previous whole file."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(_no_nan(result), indent=2))
    part.replace(path)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    deadline = time.monotonic() + args.budget_s if args.budget_s else None
    levels = sorted({int(c) for c in args.concurrency.split(",")})
    compare = {int(c) for c in args.compare_levels.split(",") if c.strip()}
    schedules = [DEFAULT_SCHEDULE if s == "default" else ChunkSchedule.parse(s) for s in (args.chunk_schedule or ["default"])]
    host = machine()
    print(f"machine: {host}", flush=True)
    impl = use_codec(args)
    checkpoint = prepare_checkpoint(args, impl)
    t0 = time.perf_counter()
    engine, levels = await start_for(args, checkpoint, levels)
    codec = load_codec(checkpoint, args, impl) if impl is not None else None
    args.codec_carry_state_used = args.codec_fused_used = False
    if codec is not None:  # every stream of the largest level holds a state slot
        codec, args.codec_carry_state_used = carrying_codec(codec, checkpoint, args, max(levels))
        args.codec_fused_used = fusing_codec(codec, args)
    runner = runner_of(engine)
    args.torch_fused_used = engine.description.fused_kernels  # asked, and past their check at start
    args.engine_graphs_used = engine.description.cuda_graphs  # off where a capture failed at start (logged)
    args.torch_prefill_batch_used = prefill_batch(engine)
    decoders: dict[str, Optional[BatchingCodecDecoder]] = {
        str(s): None if codec is None else BatchingCodecDecoder(codec, max_batch=args.codec_batch, schedule=s)
        for s in (schedules if codec is not None else schedules[:1])}
    graphs = args.codec_graphs_used = "off" if codec is None else capture_codec_graphs(
        codec, args, max(d.max_window_frames for d in decoders.values() if d is not None),
        max(d.max_chunk_frames for d in decoders.values() if d is not None))
    print(f"# {args.backend} engine ({runner}) on {checkpoint} ({args.size}, {args.dtype}) for up to {max(levels)} "
          f"streams, started in {time.perf_counter() - t0:.1f} s; {args.frames} frames per stream; codec "
          f"{impl or 'off'}{'' if impl != 'torch' else f', CUDA graphs {graphs}'}"
          f"{', carrying conv state' if args.codec_carry_state_used else ''}"
          f"{', fused activations' if args.codec_fused_used else ''}"
          f"{', overlapped steps' if args.torch_overlap else ''}{', prefill graphs' if args.torch_prefill_graphs else ''}"
          f"{', fused engine kernels' if args.torch_fused_used else ''}"
          f"{', engine CUDA graphs' if args.engine_graphs_used else ''}"
          f"{f', prefill batch {args.torch_prefill_batch_used}' if args.torch_prefill_batch_used else ''}"
          f"{', engine stream at normal priority' if args.torch_stream_priority == 'normal' else ''}",
          flush=True)
    print(f"#  (ms; xRT = audio s / wall s; codec = codec share of engine + codec time)\n{HEADER}", flush=True)
    rows: list[Row] = []
    save(args.json, result_doc(args, host, runner, checkpoint, impl, rows))  # no earlier run's rows stay there
    last: Optional[tuple[int, float]] = None  # (concurrency, wall of one burst)
    try:
        for c in levels:
            here = [s for s in decoders if s == str(schedules[0]) or c in compare]
            rounds = (args.one_stream_rounds or args.rounds) if c == 1 else args.rounds
            left = None if deadline is None else deadline - time.monotonic()
            predicted = None if last is None else predicted_burst_s(last[0], last[1], c) * rounds * len(here)
            if left is not None and predicted is not None and predicted > left:
                print(f"# C={c} skipped: ~{predicted:.0f} s predicted, {left:.0f} s of the budget left", flush=True)
                rows.append(skipped(args, runner, c, "skipped (time budget)"))
                save(args.json, result_doc(args, host, runner, checkpoint, impl, rows))
                break
            for r in range(rounds):
                for name in here:
                    decoder = decoders[name]
                    timeout = None if deadline is None else max(1.0, deadline - time.monotonic())
                    try:
                        await burst(engine, decoder, c, min(4, args.frames), f"w{c}-{r}", timeout)
                        wall, streams, probe, memory = await burst(engine, decoder, c, args.frames, f"c{c}-{r}", timeout)
                    except asyncio.TimeoutError:
                        print(f"# C={c}: cancelled at the time budget", flush=True)
                        deadline = time.monotonic()  # nothing more fits
                        break
                    row = summarise(args, runner, name if codec is not None else "no codec", c, wall, streams, probe,
                                    memory)
                    rows.append(row)
                    print(fmt(row), flush=True)
                    save(args.json, result_doc(args, host, runner, checkpoint, impl, rows))
                    if name == str(schedules[0]):
                        last = (c, wall)
                if deadline is not None and time.monotonic() >= deadline:
                    break
            if deadline is not None and time.monotonic() >= deadline:
                break
    finally:
        for decoder in decoders.values():
            if decoder is not None:
                await decoder.aclose()
        await engine.aclose()
    result = result_doc(args, host, runner, checkpoint, impl, rows)
    save(args.json, result)
    one = result["one_stream"]
    if one is not None:
        ttfa = "n/a (no codec)" if math.isnan(one["ttfa_ms"]) else f"{one['ttfa_ms']:.1f} ms"
        failed = f", {one['failed']} without audio (FAILED)" if one["failed"] else ""
        print(f"# one stream (p50 of {one['n']} burst(s){failed}): TTFA {ttfa}, first frame {one['ttff_ms']:.1f} ms, "
              f"RTF {one['rtf']:.4f}; most streams with p99 RTF < 1: {result['max_realtime_concurrency']}; "
              f"best xRT {result['best_xrt']:.1f}", flush=True)
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("vllm", "torch"), default="torch")
    p.add_argument("--size", choices=("tiny", "full"), default="tiny", help="random checkpoint size")
    p.add_argument("--checkpoint", type=Path,
                   help="checkpoint directory (a random one of --size is written there when it holds none)")
    p.add_argument("--concurrency", default="1,8", help="comma list of concurrent streams per burst")
    p.add_argument("--frames", type=int, default=100, help="frames per stream (21.5 frames = 1 s of audio)")
    p.add_argument("--chunk-schedule", action="append",
                   help=f"codec chunk schedule, e.g. 2,4,8,32, or 'default' ({DEFAULT_SCHEDULE}); repeat the flag to compare")
    p.add_argument("--compare-levels", default="1", help="concurrencies at which the 2nd+ schedules run too")
    p.add_argument("--rounds", type=int, default=1, help="bursts per schedule and level (alternating schedules)")
    p.add_argument("--one-stream-rounds", type=int, default=None,
                   help="bursts per schedule at C=1 (default --rounds): the one-stream figures pool them, one "
                        "sample per burst; C=1 is the cheapest level to repeat")
    p.add_argument("--codec", choices=("auto", "yes", "no"), default="auto",
                   help="no: frames only (TTFA n/a); auto/yes: decode audio with --codec-impl")
    p.add_argument("--codec-impl", choices=("auto", "nemo", "torch"), default="auto",
                   help="NanoCodec from NeMo's modules, or the torch decoder; auto: NeMo when it imports")
    p.add_argument("--codec-batch", type=int, default=32, help="codec decode windows per batch")
    p.add_argument("--codec-graphs", choices=("auto", "no"), default="auto",
                   help="auto: the torch decoder on CUDA as CUDA graphs, as the gateway runs it (GEPARD_CODEC_CUDA_GRAPHS)")
    p.add_argument("--codec-carry-state", choices=("auto", "yes", "no"), default="auto",
                   help="streams carry the torch decoder's conv state (GEPARD_CODEC_CARRY_STATE); auto: on CPU, as the gateway")
    p.add_argument("--codec-fused-activations", choices=("auto", "yes", "no"), default="auto",
                   help="the torch decoder's snake activations as one Triton kernel each "
                        "(GEPARD_CODEC_FUSED_ACTIVATIONS); auto: on CUDA, as the gateway")
    p.add_argument("--torch-overlap", action="store_true", help="torch fast path: overlapped steps (GEPARD_TORCH_OVERLAP)")
    p.add_argument("--torch-prefill-batch", type=int, default=None,
                   help="torch fast path: new requests prefilled together in one step (GEPARD_TORCH_PREFILL_BATCH); "
                        "default: the gateway's, 64 on CUDA and 8 on CPU")
    p.add_argument("--torch-stream-priority", choices=("high", "normal"), default="high",
                   help="torch fast path on CUDA: its stream's priority against the codec's (GEPARD_TORCH_STREAM_PRIORITY)")
    p.add_argument("--torch-fused-kernels", choices=("auto", "yes", "no"), default="auto",
                   help="torch fast path: each layer's norms, rotary, gate and SwiGLU activation as one Triton kernel "
                        "each (GEPARD_TORCH_FUSED_KERNELS); auto: on CUDA, as the gateway")
    p.add_argument("--torch-prefill-graphs", action="store_true",
                   help="torch fast path on CUDA: the prefill as CUDA graphs (GEPARD_TORCH_PREFILL_GRAPHS)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", help="auto: bfloat16 on GPU, float32 on CPU")
    p.add_argument("--torch-path", default="auto", help="torch backend loop: auto | reference | fast")
    p.add_argument("--vllm-runner", default=None, help="vLLM model runner: v1 | v2 (default v1)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--budget-s", type=float, default=None, help="stop escalating / cancel past this many seconds")
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--check", action="store_true", help="only report what this host offers; exit 4 if a module is missing")
    return p.parse_args(argv)


def _no_nan(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.check:
        raise SystemExit(check_host())
    result = asyncio.run(run(args))  # writes --json after every row
    if args.json:
        print(f"# results: {args.json}", flush=True)
    failed = sum(r["failed"] for r in result["rows"])
    if failed:
        raise SystemExit(f"bench/pipeline.py: {failed} stream(s) ended without audio (rows marked FAILED)")


if __name__ == "__main__":  # vLLM spawns its engine processes: keep module import side-effect free
    main()
