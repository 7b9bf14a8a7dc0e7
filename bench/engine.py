"""Engine throughput of either backend on random checkpoints: xRT, per-stream RTF, time to first frame.

    python bench/engine.py --backend vllm|torch [--sizes tiny,full] [--concurrency 1,8,32,64] [--frames 100]

For each size, one engine is started on a random checkpoint written with ``--stop-after 0`` (its stop
head never fires), so every stream generates exactly ``--frames`` frames. For each concurrency C, a
short warm-up burst of C streams runs first, then C streams are submitted at once and timed:

    xRT          generated audio seconds of all streams / wall seconds of the burst (higher is better)
    RTF p50/p90  per stream: seconds from submit to its last frame / audio seconds it got (< 1 keeps up)
    TTFF p50/p90 per stream: milliseconds from submit to its first frame (first-audio latency, minus codec)
    failed       streams that ended without a frame: left out of RTF and TTFF (they have neither),
                 printed, and the exit status is 1

Audio seconds are frames * 1024 / 22050. Nothing here decodes audio: this measures the engine only.
Percentiles interpolate between closest ranks (``bench._common.percentile``, as every bench script).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import machine, percentile, random_checkpoint  # noqa: E402
from engine.interface import TtsEngine  # noqa: E402
from engine.requests import SamplingParams, SynthesisRequest  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the forest."
PROMPT_ROOM = 256  # positions kept for the prompt (prefix + repeated text) when sizing vLLM's max_model_len


@dataclass
class Result:
    backend: str
    size: str
    concurrency: int
    frames: int
    wall_s: float
    frames_per_s: float
    xrt: float
    rtf_p50: float
    rtf_p90: float
    ttff_p50_ms: float
    ttff_p90_ms: float
    failed: int = 0  # streams without a frame, left out of RTF and TTFF


Stream = tuple[Optional[float], float, int]  # (ttff_s, None without a frame; total_s; frames)


def pct(values: list[float], q: float) -> float:
    """The shared interpolating percentile (q in 0-100); NaN (not measured) for no values."""
    value = percentile(values, q)
    return math.nan if value is None else value


def summarize(backend: str, size: str, concurrency: int, frames: int, wall: float, streams: list[Stream],
              spf: float) -> Result:
    """One burst's figures; ``spf``: audio seconds per frame. A stream with no frame fails: its TTFF
    is not 0 (the best score) and its RTF not total / 0; it is counted apart instead."""
    heard = [s for s in streams if s[0] is not None and s[2] > 0]
    rtf = [total / (n * spf) for _, total, n in heard]
    ttff = [first * 1000 for first, _, _ in heard]
    total_frames = sum(n for _, _, n in streams)
    return Result(backend, size, concurrency, frames, wall, total_frames / wall, total_frames * spf / wall,
                  pct(rtf, 50), pct(rtf, 90), pct(ttff, 50), pct(ttff, 90), failed=len(streams) - len(heard))


async def burst(engine: TtsEngine, concurrency: int, frames: int, tag: str) -> tuple[float, list[Stream]]:
    """Run ``concurrency`` streams at once; returns the wall time and (ttff_s, total_s, frames) per stream."""

    async def one(i: int) -> Stream:
        request = SynthesisRequest(f"{tag}-{i}", TEXT, None, SamplingParams(temperature=0.4, seed=i, max_frames=frames))
        t0 = time.perf_counter()
        first, n = None, 0
        async for chunk in engine.generate(request):
            if first is None and chunk.num_frames:
                first = time.perf_counter() - t0
            n += chunk.num_frames
        return first, time.perf_counter() - t0, n  # first None: no frame came

    t0 = time.perf_counter()
    streams = await asyncio.gather(*[one(i) for i in range(concurrency)])
    return time.perf_counter() - t0, list(streams)


async def start_engine(args: argparse.Namespace, checkpoint: Path, max_batch: int) -> TtsEngine:
    if args.backend == "vllm":
        from engine.backends.vllm_backend import VllmEngine, VllmEngineConfig

        config = VllmEngineConfig(model=checkpoint, device=args.device, dtype=args.dtype, max_batch=max_batch,
                                  max_model_len=args.frames + PROMPT_ROOM, enforce_eager=args.enforce_eager,
                                  gpu_memory_utilization=args.gpu_memory_utilization)
        return await VllmEngine.start(config)
    from engine.backends.torch_backend import TorchEngine, TorchEngineConfig

    config = TorchEngineConfig(model=checkpoint, device=args.device, dtype=args.dtype, max_batch=max_batch,
                               path=args.torch_path, max_positions=args.frames + PROMPT_ROOM)
    return await asyncio.get_running_loop().run_in_executor(None, TorchEngine.from_config, config)


async def run(args: argparse.Namespace) -> list[Result]:
    levels = [int(c) for c in args.concurrency.split(",")]
    results: list[Result] = []
    print(f"machine: {machine()}", flush=True)
    print(f"{'backend':>7} {'size':>5} {'C':>4} {'frames/s':>9} {'xRT':>8} {'RTF p50':>8} {'RTF p90':>8} {'TTFF p50':>9} {'TTFF p90':>9}  (ms)",
          flush=True)
    for size in args.sizes.split(","):
        checkpoint = random_checkpoint(size, stop_after=0)
        t0 = time.perf_counter()
        engine = await start_engine(args, checkpoint, max(levels))
        print(f"# {args.backend} engine for {size} started in {time.perf_counter() - t0:.1f} s", flush=True)
        spf = engine.model_info.samples_per_frame / engine.model_info.sample_rate_hz  # audio seconds per frame
        try:
            for c in levels:
                await burst(engine, c, min(4, args.frames), f"warm{c}")
                wall, streams = await burst(engine, c, args.frames, f"c{c}")
                r = summarize(args.backend, size, c, args.frames, wall, streams, spf)
                results.append(r)
                print(f"{r.backend:>7} {size:>5} {c:4d} {r.frames_per_s:9.1f} {r.xrt:8.2f} {r.rtf_p50:8.3f} {r.rtf_p90:8.3f} "
                      f"{r.ttff_p50_ms:9.1f} {r.ttff_p90_ms:9.1f}"
                      f"{f'  FAILED: {r.failed} stream(s) without a frame' if r.failed else ''}", flush=True)
        finally:
            await engine.aclose()
    return results


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("vllm", "torch"), default="vllm")
    p.add_argument("--sizes", default="tiny", help="comma list of random checkpoint sizes: tiny, full")
    p.add_argument("--concurrency", default="1,8,32,64", help="comma list of concurrent streams per burst")
    p.add_argument("--frames", type=int, default=100, help="frames per stream (21.5 frames = 1 s of audio)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", help="auto: bfloat16 on GPU, float32 on CPU")
    p.add_argument("--enforce-eager", action="store_true", default=None,
                   help="vLLM: no CUDA graphs / torch.compile (default: eager on CPU only)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--torch-path", choices=("auto", "reference", "fast"), default="auto",
                   help="torch backend's loop (auto: the fast path on CUDA, the reference loop on CPU)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    results = asyncio.run(run(args))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "results": [asdict(r) for r in results]}, indent=2))
    failed = sum(r.failed for r in results)
    if failed:
        raise SystemExit(f"bench/engine.py: {failed} stream(s) ended without a frame (rows marked FAILED)")


if __name__ == "__main__":  # vLLM spawns its engine processes: keep module import side-effect free
    main()
