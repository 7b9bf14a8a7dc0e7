"""What capping oneDNN's primitive cache costs the vLLM CPU engine, in speed and in the worker's memory.

    python bench/onednn_cache.py [--size tiny|full] [--caps 1024,256] [--rounds 2] [--concurrency 8]

On CPU, vLLM runs every linear layer through oneDNN matmul primitives built for one token count M.
Each new prefill length is a new M, so oneDNN's process-wide primitive cache (1024 entries unless
``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` says otherwise) grows the worker by about a megabyte per new
length until it is full. A smaller cap bounds that; what it can cost is re-building an evicted
primitive when a length comes back.

Each round starts one engine per cap in turn (A B A B: the machine is shared and noisy), with
``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` set for its processes, and runs, on a random checkpoint that
never stops (``--stop-after 0``):

    repeated   C streams of one text, started together: decode shapes only, all hot in any cache
    varied     C streams of C new prompt lengths, started ``--stagger-ms`` apart: prefills of new
               shapes land between decode steps
    cycle      ``--cycle`` prompt lengths, one frame each, twice in the same order; the second pass
               is timed. Too many lengths for a small cap to keep, few enough for the default one:
               the cap's worst case (every prefill re-builds its primitives)

frames/s is all frames of a burst over its wall time; TTFF is submit to first frame (the prefill);
RSS is the growth of vLLM's worker process over the run (psutil; its model and KV cache excluded).
Nothing decodes audio. Per cap, the medians over rounds and the range (min-max) are printed last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import machine, percentile, random_checkpoint  # noqa: E402
from engine.requests import SamplingParams, SynthesisRequest  # noqa: E402

CAPACITY_ENV = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
# Every word adds at least one token, so the first k words of this make k distinct prompt lengths.
WORDS = ("the quick brown fox jumps over a lazy dog while seven bright stars hum softly across an old "
         "quiet harbour and every sailor counts the waves until morning comes again").split()


@dataclass
class Run:
    cap: str
    round: int
    repeated_fps: float  # frames/s, C streams of one text
    varied_fps: float  # frames/s, C staggered streams of new lengths
    varied_ttff_p50_ms: float
    cycle_ttff_p50_ms: float  # prefill of a length seen one cycle ago
    rss_growth_mb: float


def text_of(words: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(words)) + "."


def worker_rss_mb() -> float:
    """Resident memory of vLLM's processes below this one (its worker runs the model and oneDNN)."""
    import psutil

    procs = [p for p in psutil.Process().children(recursive=True) if p.name().startswith("VLLM")]
    return sum(p.memory_info().rss for p in procs) / 2**20


async def stream(engine, rid: str, text: str, frames: int, delay_s: float = 0.0) -> tuple[float, int]:
    """(seconds to the first frame, frames) of one request."""
    await asyncio.sleep(delay_s)
    request = SynthesisRequest(rid, text, None, SamplingParams(temperature=0.0, max_frames=frames))
    t0, first, n = time.perf_counter(), None, 0
    async for chunk in engine.generate(request):
        if first is None and chunk.num_frames:
            first = time.perf_counter() - t0
        n += chunk.num_frames
    return (first if first is not None else float("nan")), n


async def one_run(args: argparse.Namespace, checkpoint: Path, cap: str, round_: int) -> Run:
    from engine.backends.vllm_backend import VllmEngine, VllmEngineConfig

    os.environ[CAPACITY_ENV] = cap  # inherited by the engine core and its worker when they spawn
    engine = await VllmEngine.start(VllmEngineConfig(model=checkpoint, max_batch=max(args.concurrency, 1),
                                                     max_model_len=args.max_model_len))
    try:
        c, f = args.concurrency, args.frames
        await asyncio.gather(*[stream(engine, f"w{i}", text_of(12), 2) for i in range(c)])  # decode shapes warm
        rss0 = worker_rss_mb()

        t0 = time.perf_counter()
        done = await asyncio.gather(*[stream(engine, f"r{i}", text_of(12), f) for i in range(c)])
        repeated_fps = sum(n for _, n in done) / (time.perf_counter() - t0)

        t0 = time.perf_counter()
        done = await asyncio.gather(*[stream(engine, f"v{i}", text_of(5 + 2 * i), f, i * args.stagger_ms / 1000)
                                      for i in range(c)])
        varied_fps = sum(n for _, n in done) / (time.perf_counter() - t0)
        varied_ttff = [t * 1000 for t, _ in done]

        lengths = [21 + i for i in range(args.cycle)]  # word counts none of the above used
        ttffs: list[float] = []
        for rep in range(2):
            for k in lengths:
                first, _ = await stream(engine, f"c{rep}-{k}", text_of(k), 1)
                if rep:
                    ttffs.append(first * 1000)
        growth = worker_rss_mb() - rss0
    finally:
        await engine.aclose()
    return Run(cap, round_, repeated_fps, varied_fps, _p50(varied_ttff), _p50(ttffs), growth)


def _p50(values: list[float]) -> float:
    value = percentile(values, 50)
    return float("nan") if value is None else value


FIELDS = ("repeated_fps", "varied_fps", "varied_ttff_p50_ms", "cycle_ttff_p50_ms", "rss_growth_mb")


def summary(runs: list[Run]) -> list[str]:
    """One line per cap: median [min-max] of every figure over its rounds."""
    lines = []
    for cap in dict.fromkeys(r.cap for r in runs):
        mine = [r for r in runs if r.cap == cap]
        cells = []
        for name in FIELDS:
            xs = [getattr(r, name) for r in mine]
            cells.append(f"{name} {statistics.median(xs):.1f} [{min(xs):.1f}-{max(xs):.1f}]")
        lines.append(f"cap {cap:>5} ({len(mine)} runs): " + ", ".join(cells))
    return lines


async def run(args: argparse.Namespace) -> list[Run]:
    caps = [c.strip() for c in args.caps.split(",")]
    checkpoint = random_checkpoint(args.size, stop_after=0)
    print(f"machine: {machine()}", flush=True)
    print(f"{'cap':>5} {'round':>5} {'rep f/s':>8} {'var f/s':>8} {'var TTFF':>9} {'cycle TTFF':>10} "
          f"{'RSS +MB':>8}  (ms)", flush=True)
    runs: list[Run] = []
    for round_ in range(args.rounds):
        for cap in caps:
            r = await one_run(args, checkpoint, cap, round_)
            runs.append(r)
            print(f"{r.cap:>5} {r.round:5d} {r.repeated_fps:8.1f} {r.varied_fps:8.1f} {r.varied_ttff_p50_ms:9.1f} "
                  f"{r.cycle_ttff_p50_ms:10.1f} {r.rss_growth_mb:8.1f}", flush=True)
    for line in summary(runs):
        print(line, flush=True)
    return runs


def main(argv: Optional[list[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="tiny", help="random checkpoint size: tiny or full")
    p.add_argument("--caps", default="1024,256",
                   help="comma list of ONEDNN_PRIMITIVE_CACHE_CAPACITY values (1024: oneDNN's default)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=8, help="streams per burst (also the engine's max_batch)")
    p.add_argument("--frames", type=int, default=40, help="frames per stream in the bursts")
    p.add_argument("--stagger-ms", type=float, default=50.0, help="gap between the varied burst's stream starts")
    p.add_argument("--cycle", type=int, default=120, help="prompt lengths in the cycle (more than a small cap keeps)")
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument("--json", type=Path, help="also write the runs here")
    args = p.parse_args(argv)
    runs = asyncio.run(run(args))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "runs": [asdict(r) for r in runs]}, indent=2))


if __name__ == "__main__":  # vLLM spawns its engine processes: keep module import side-effect free
    main()
