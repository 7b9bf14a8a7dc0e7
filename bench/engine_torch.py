"""Torch backend throughput on random checkpoints: frames/s and real-time factor at several batch sizes.

    python bench/engine_torch.py [--sizes tiny,full] [--batches 1,8] [--frames 100]

Every request generates exactly ``--frames`` frames (the random checkpoints' counter stops them),
all submitted at once. Reported per (size, batch): aggregate frames/s, aggregate xRT (audio seconds
per wall second), per-stream RTF (wall / audio, lower is better) and time to first frame.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import machine, random_checkpoint  # noqa: E402
from engine.backends.torch_backend import TorchEngine, TorchEngineConfig  # noqa: E402
from engine.requests import SamplingParams, SynthesisRequest  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the forest."


async def run_batch(engine: TorchEngine, batch: int, frames: int) -> dict:
    spf = engine.model_info.samples_per_frame / engine.model_info.sample_rate_hz

    async def one(i: int) -> tuple[float, float, int]:
        t0 = time.perf_counter()
        first, n = None, 0
        req = SynthesisRequest(f"b{batch}-{i}-{time.monotonic_ns()}", TEXT, None, SamplingParams(temperature=0.4, max_frames=frames, seed=i))
        async for chunk in engine.generate(req):
            if first is None and chunk.num_frames:
                first = time.perf_counter() - t0
            n += chunk.num_frames
        return first or 0.0, time.perf_counter() - t0, n

    t0 = time.perf_counter()
    results = await asyncio.gather(*[one(i) for i in range(batch)])
    wall = time.perf_counter() - t0
    total = sum(r[2] for r in results)
    return {
        "frames_per_s": total / wall,
        "xrt": total * spf / wall,
        "rtf": statistics.median(r[1] / (r[2] * spf) for r in results),
        "ttff_ms": statistics.median(r[0] for r in results) * 1000,
    }


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="tiny,full")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--frames", type=int, default=100)
    args = p.parse_args()
    print(f"machine: {machine()}")
    print(f"{'size':>5} {'batch':>5} {'frames/s':>9} {'xRT':>7} {'RTF/stream':>10} {'TTFF ms':>8}")
    for size in args.sizes.split(","):
        ckpt = random_checkpoint(size, stop_after=0)
        engine = TorchEngine.from_config(TorchEngineConfig(model=ckpt, max_batch=64))
        await run_batch(engine, 1, 4)  # warm-up
        for batch in (int(b) for b in args.batches.split(",")):
            r = await run_batch(engine, batch, args.frames)
            print(f"{size:>5} {batch:>5} {r['frames_per_s']:9.1f} {r['xrt']:7.2f} {r['rtf']:10.3f} {r['ttff_ms']:8.1f}", flush=True)
        await engine.aclose()


if __name__ == "__main__":
    asyncio.run(main())
