"""What the gateway adds on top of the engine: time to first audio and per-chunk overhead.

    python bench/gateway.py [--size tiny|full] [--concurrency 1,32] [--rounds 5]

One process holds one runtime (engine + codec + voice store) and serves it with uvicorn on
loopback. For each concurrency C, C streams of the same sentence run two ways, alternately:

    direct   SynthesisService.speak(): engine frames -> codec PCM, no protocol at all
    gateway  a WebSocket context per stream: JSON in, resampling to 24 kHz s16, base64 chunks out

    TTFA      request sent -> first audio (direct: first PCM array; gateway: first chunk message)
    overhead  (gateway stream time - direct stream time) / gateway chunks: what each chunk costs extra
    n         streams with audio, the samples behind the TTFA percentiles (interpolated, as in every
              bench script); a stream that ends without audio fails: it is left out of them, printed
              as "failed", and the exit status is 1

Both paths use the same engine in the same run, so the ratio isolates the gateway. The WebSocket
client runs in the same process and event loop, so its own parsing is counted as gateway cost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvicorn  # noqa: E402
import websockets  # noqa: E402

from api.app import DEFAULT_VOICE_ID, build_app, open_runtime  # noqa: E402
from api.server import uvicorn_config  # noqa: E402
from api.settings import Settings  # noqa: E402
from bench._common import machine, percentile, random_checkpoint  # noqa: E402
from engine.requests import SamplingParams  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the forest."
FORMAT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}

Stream = tuple[Optional[float], float, int]  # (first audio s, None without audio; stream s; chunks)


@dataclass(frozen=True)
class PathSummary:
    ttfa_p50_ms: float
    ttfa_p90_ms: float
    wall_s: float  # median stream time
    chunks: float  # median chunks per stream
    n: int  # streams with audio: the TTFA samples
    failed: int  # streams without audio: left out of TTFA (they have none), not scored as 0 ms


def summarize_path(streams: list[Stream]) -> PathSummary:
    """One path's figures over its streams. TTFA percentiles come from the streams that were heard,
    interpolated (so p90 >= p50); a stream with no audio is a failure, not the best TTFA."""
    ttfa = [first * 1000 for first, _, _ in streams if first is not None]
    p50, p90 = percentile(ttfa, 50), percentile(ttfa, 90)
    return PathSummary(math.nan if p50 is None else p50, math.nan if p90 is None else p90,
                       statistics.median(r[1] for r in streams), statistics.median(r[2] for r in streams),
                       len(ttfa), len(streams) - len(ttfa))


async def direct_stream(rt, i: int) -> Stream:
    svc = rt.service
    segment = svc.segment(TEXT, "en")
    sampling = SamplingParams(temperature=0.4, seed=i)
    prefix = (await svc.voice_prompt(DEFAULT_VOICE_ID)).prefix
    t0 = time.perf_counter()
    first, chunks = None, 0
    async with contextlib.aclosing(svc.speak(segment, prefix, sampling, f"direct-{uuid.uuid4()}")) as pcm_stream:
        async for _ in pcm_stream:
            first = first if first is not None else time.perf_counter() - t0
            chunks += 1
    return first, time.perf_counter() - t0, chunks


async def gateway_stream(url: str, i: int) -> Stream:
    async with websockets.connect(url + "/tts/websocket", max_size=1 << 22) as ws:
        cid = str(uuid.uuid4())
        msg = {"context_id": cid, "model_id": "sonic-3", "voice": {"mode": "id", "id": DEFAULT_VOICE_ID},
               "output_format": FORMAT, "transcript": TEXT, "continue": False, "seed": i, "temperature": 0.4}
        t0 = time.perf_counter()
        await ws.send(json.dumps(msg))
        first, chunks = None, 0
        async for raw in ws:
            event = json.loads(raw)
            if event["type"] == "chunk":
                first = first if first is not None else time.perf_counter() - t0
                chunks += 1
            elif event["type"] in ("done", "error"):
                if event["type"] == "error":
                    raise RuntimeError(event)
                break
        return first, time.perf_counter() - t0, chunks


async def main_async(args: argparse.Namespace) -> int:
    """Run every level; returns how many streams ended without audio (failures)."""
    ckpt = random_checkpoint(args.size)  # default counter: every stream stops after a fixed frame count
    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(model=str(ckpt), backend=args.backend, data_dir=Path(data_dir), port=args.port,
                            max_concurrent_generations=max(64, max(args.levels)), max_streams=max(64, max(args.levels)),
                            admit_max_saturation=0.0)  # every level runs all its streams: no load-aware refusals
        rt = await open_runtime(settings)
        # the production server configuration (WebSocket implementation, frame limits, pings, no deflate)
        server = uvicorn.Server(uvicorn_config(settings, build_app(settings, rt), host="127.0.0.1", port=args.port))
        serving = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.05)
        url = f"ws://127.0.0.1:{args.port}"
        print(f"machine: {machine()}\nmodel: {args.size} random checkpoint, backend {args.backend}")
        print(f"{'C':>3} {'path':>8} {'TTFA p50 ms':>12} {'TTFA p90 ms':>12} {'stream s':>9} {'chunks':>7} {'n':>4}")
        failed = 0
        try:
            for c in args.levels:
                await asyncio.gather(*[direct_stream(rt, i) for i in range(c)])  # warm-up
                await asyncio.gather(*[gateway_stream(url, i) for i in range(c)])
                stats: dict[str, list[Stream]] = {"direct": [], "gateway": []}
                for _ in range(args.rounds):
                    stats["direct"] += await asyncio.gather(*[direct_stream(rt, i) for i in range(c)])
                    stats["gateway"] += await asyncio.gather(*[gateway_stream(url, i) for i in range(c)])
                summary = {path: summarize_path(rows) for path, rows in stats.items()}
                for path, s in summary.items():
                    print(f"{c:3d} {path:>8} {s.ttfa_p50_ms:12.1f} {s.ttfa_p90_ms:12.1f} {s.wall_s:9.3f} {s.chunks:7.0f} "
                          f"{s.n:4d}{f'  FAILED: {s.failed} stream(s) without audio' if s.failed else ''}")
                    failed += s.failed
                d, g = summary["direct"], summary["gateway"]
                per_chunk = (g.wall_s - d.wall_s) / max(g.chunks, 1) * 1000
                print(f"{c:3d}    ratio TTFA gateway/direct = {g.ttfa_p50_ms / max(d.ttfa_p50_ms, 1e-9):.2f}, "
                      f"overhead per chunk = {per_chunk:.2f} ms")
        finally:
            server.should_exit = True
            await serving
            await rt.aclose()
    return failed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=("tiny", "full"), default="tiny")
    p.add_argument("--backend", choices=("torch", "vllm", "auto"), default="torch")
    p.add_argument("--concurrency", default="1,32")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--port", type=int, default=8765)
    args = p.parse_args()
    args.levels = [int(x) for x in args.concurrency.split(",")]
    failed = asyncio.run(main_async(args))
    if failed:
        raise SystemExit(f"bench/gateway.py: {failed} stream(s) ended without audio (rows marked FAILED)")


if __name__ == "__main__":
    main()
