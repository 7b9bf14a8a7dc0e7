"""Engine step time of the torch backend's two loops: the reference loop vs the fast path.

    python bench/torch_fast.py [--size full] [--batch 1,8] [--steps 30]
                               [--paths reference,fast,unfused,compiled,overlap,compiled+overlap]
                               [--device auto] [--dtype auto] [--no-graphs] [--json OUT]
                               [--prefills 10] [--prefill-prompts 1,8] [--profile OUT.txt] [--check]
                               [--compile-backend inductor]

Drives the generators directly (no engine thread, no asyncio), on a random checkpoint whose stop
head never fires: B requests are prefilled, a few warm-up steps run (on CUDA this captures the
fast path's graphs), then ``--steps`` decode steps of the whole batch are timed one by one.
Reported per (path, batch): step time p50 / p90 in ms, frames/s (B / step time) and xRT (audio
seconds per wall second: frames/s * 1024 / 22050), and for the fast path the host's part of a step:
its time not spent blocked on the device's results (on CUDA the bookkeeping and the launches; where
it nears the step time, an overlapped step is bound by the host, not the device; on CPU the device
work runs on the host, so it is the whole step). A step is one new frame for every request. The
fast-path variants run with GEPARD_TORCH_FUSED_KERNELS' default (each layer's norms, rotary, gate and
SwiGLU activation one Triton kernel each on CUDA; a compiled step keeps them eager); ``unfused`` is
the fast path with those ops eager, what the fused kernels save.

The physical floor of a step, beside it: the bytes it must read at least (every weight a decode
step uses, once: 0.52 GB in bf16 at full size, since the 254M-parameter text embedding table is
only read by prompts; plus each request's cached keys and values) over the GPU's peak memory
bandwidth (by its name, or ``--hbm-gbps``; 0.11 ms at batch 1 on an H200). "x floor" says how far
the step is from it. It also checks on the way that both paths produce the same frames for greedy
requests (float32: expected equal; bf16: reported).

Then the prefill, per path: the step that prefills 1 (and then 8, or each of ``--prefill-prompts``)
new requests in an otherwise idle generator, to their first frames on the host, p50 / p90 of
``--prefills`` runs after two untimed ones. With one prompt, that is the engine's part of a lone
stream's time to first audio before its decode steps; on a GPU an eager prefill is bound by its
~1,300 kernel launches, not its arithmetic, so more prompts cost little until compute binds: where
that happens sets GEPARD_TORCH_PREFILL_BATCH (a burst of N streams takes N / that many steps to
start).

``--check`` (no pytest needed, for a bare GPU host): on the tiny checkpoint in float32, requests
with every kind of knob (greedy, seeded, top-k + repetition penalty, CFG) joining a running batch
must get the same frames from the reference loop, the fast path run eagerly and the fast path
replaying CUDA graphs; exits 1 when they differ. A timed run with other fast-path variants in
``--paths`` (compiled, overlap, compiled+overlap) runs the same check for them, with graphs, after
its timings (a compiled variant compiles again for the tiny checkpoint's dtype and sizes, so under a
time cap the timings come first), and reports it (printed, and under "checks" in the JSON). ``--profile`` writes the PyTorch profiler's table
of one fast-path step at the largest batch (CPU and CUDA time per op). ``--compile-backend``
names torch.compile's backend for the compiled paths: Inductor (the default, and what the engine
uses), or eager for a CPU stand-in run that traces the same graphs without generating kernels.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Optional
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from bench._common import CACHE, machine  # noqa: E402
from engine.backends import fast_step  # noqa: E402
from engine.backends.torch_backend import TorchEngine, TorchEngineConfig  # noqa: E402
from engine.backends.torch_fast import FastGenerator  # noqa: E402
from engine.backends.torch_generator import BatchGenerator  # noqa: E402
from engine.device import pick_device, pick_dtype  # noqa: E402
from engine.model.gepard import GepardModel  # noqa: E402
from engine.requests import SamplingParams, SynthesisRequest  # noqa: E402

# the fast path's variants: its step eager or through torch.compile, its steps serial or overlapped,
# its prefill replayed as CUDA graphs (decode as "fast"; with graphs off, the same as "fast")
FAST_PATHS = {"fast": {}, "compiled": {"compiled": True}, "overlap": {"overlap": True},
              "compiled+overlap": {"compiled": True, "overlap": True}, "prefill-graphs": {"prefill_graphs": True},
              "unfused": {"fused_kernels": False}}
TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the forest."


@dataclass
class Result:
    path: str
    batch: int
    steps: int
    step_ms_p50: float
    step_ms_p90: float
    frames_per_s: float
    xrt: float
    shape: str  # fast path: (batch bucket, span) of the timed steps
    read_mb: float  # bytes one step must read at least: the weights it uses once, each row's cached keys/values
    floor_ms: Optional[float]  # read_mb at the GPU's peak memory bandwidth (None: bandwidth unknown)
    rows: int  # the fewest requests a timed step decoded (== batch: every timed step ran the whole batch)
    fused_kernels: Optional[bool] = None  # fast path: whether it ran the fused kernels (asked and checked)
    host_ms_p50: Optional[float] = None  # fast path: a step's time not spent waiting for the device's results
    graphs: Optional[bool] = None  # CUDA graphs asked for: whether its steps replayed them (False: a capture failed)


@dataclass
class PrefillResult:
    path: str
    prompts: int  # prompts prefilled at once, in an otherwise idle generator
    tokens: int  # each prompt's length
    repeats: int
    prefill_ms_p50: float  # the step that prefills them and samples their first frames, to the frames on the host
    prefill_ms_p90: float
    fused_kernels: Optional[bool] = None
    graphs: Optional[bool] = None  # prefill graphs asked for: whether its prefills replayed them


# Peak memory bandwidth (GB/s) by GPU name, from the vendors' data sheets; --hbm-gbps overrides.
PEAK_GBPS = {"H200": 4800, "H100 SXM": 3350, "H100 PCIe": 2000, "H100 NVL": 3900, "H100": 3350, "B200": 8000,
             "A100-SXM4-80GB": 2039, "A100": 1555, "L40S": 864, "RTX PRO 6000": 1792, "RTX 5090": 1792,
             "RTX 4090": 1008}


def peak_gbps(device: torch.device, override: Optional[float]) -> Optional[float]:
    if override:
        return override
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((gbps for key, gbps in PEAK_GBPS.items() if key in name), None)


def step_read_bytes(model: GepardModel, rows: int, positions: int) -> int:
    """The least one decode step of ``rows`` requests reads from memory: every weight it uses,
    once (the backbone's layers, the frame embedder, the heads; not the text embedding table, the
    voice compressor or the null prefix, which only prompts use), plus each row's cached keys and
    values at ``positions`` positions. The physical floor of the step is this over bandwidth."""
    unused = ("backbone.embed_tokens.", "ref_compressor.", "null_prefix")
    weights = sum(p.numel() * p.element_size() for name, p in model.named_parameters() if not name.startswith(unused))
    bb = model.config.backbone
    kv_per_position = 2 * bb.num_hidden_layers * bb.num_key_value_heads * bb.head_dim * torch.empty(0, dtype=model.dtype).element_size()
    return weights + rows * positions * kv_per_position


def engine_checkpoint(size: str) -> Path:
    """A random checkpoint whose stop head never fires, without the codec (this measures the
    engine only, and the codec's dependencies need not be installed)."""
    from engine.tiny import write_tiny_checkpoint

    out = CACHE / f"{size}-stop0-engine"
    if not (out / "model.safetensors").exists():
        print(f"writing {size} random checkpoint to {out} ...", flush=True)
        write_tiny_checkpoint(out, size=size, stop_after=0, with_codec=False)
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def p50_p90(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(times), ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def prompt_tokens(engine: TorchEngine, sp: SamplingParams) -> int:
    """The prompt length of TEXT (no voice prefix), as the engine builds it."""
    return engine.prepare(SynthesisRequest("probe", TEXT, None, sp)).prompt_embeds.shape[0]


def whole_batch_generator(model: GepardModel, batch: int, prompt: int, **kw) -> FastGenerator:
    """A fast path that prefills a whole batch of ``prompt``-token prompts in its first step, as the
    reference loop does: with the server's prefill limits (8 prompts a step) a batch of 256 would
    still be filling up, its first requests ending, while the steps are timed or profiled."""
    return FastGenerator(model, max_batch=batch, prefill_batch=batch, prefill_tokens=batch * prompt, **kw)


def time_device_waits(gen: FastGenerator) -> list[float]:
    """Where the seconds go that each of ``gen``'s waits for a step's results on the host blocks
    (one list, appended to as they happen): the step's time less these is the host's."""
    spent: list[float] = []
    for out in (*gen._decode_outs, gen._prefill_out):  # the generator's one wait per step and per prefill
        def timed(wait=out.wait) -> torch.Tensor:
            started = time.perf_counter()
            try:
                return wait()
            finally:
                spent.append(time.perf_counter() - started)
        out.wait = timed
    return spent


def time_path(path: str, model: GepardModel, engine: TorchEngine, batch: int, steps: int, graphs: bool,
              greedy: bool, gbps: Optional[float] = None) -> tuple[Result, dict[str, torch.Tensor]]:
    total = 4 + steps
    sp = SamplingParams(temperature=0.0) if greedy else SamplingParams(temperature=0.4)
    prompt = prompt_tokens(engine, sp)
    if path in FAST_PATHS:
        # compiled: the warm-up steps below compile the shapes the timed steps use (the spans stay
        # below the whole cache, which would be a graph of its own), so no compile_all() here
        gen = whole_batch_generator(model, batch, prompt, max_positions=256 + total, cuda_graphs=graphs,
                                    **FAST_PATHS[path])
    else:
        gen = BatchGenerator(model, max_batch=batch)
    for i in range(batch):
        req = engine.prepare(SynthesisRequest(f"{path}-{i}", TEXT, None, dataclasses.replace(sp, seed=i, max_frames=total)))
        gen.add(req)
    frames: dict[str, list[torch.Tensor]] = {}
    times: list[float] = []

    def collect(outs) -> None:
        for o in outs:
            if o.codes is not None:
                frames.setdefault(o.request_id.rsplit("-", 1)[1], []).append(o.codes)

    collect(gen.step())  # prefill
    for _ in range(3):  # warm-up decode steps (graph capture on CUDA)
        collect(gen.step())
    sync(model.device)
    rows = batch
    waits = time_device_waits(gen) if path in FAST_PATHS else []
    hosts: list[float] = []
    for _ in range(steps):
        waited = sum(waits)
        t0 = time.perf_counter()
        collect(gen.step())  # each step ends with its results on the host: no extra sync needed
        times.append(time.perf_counter() - t0)
        hosts.append(times[-1] - (sum(waits) - waited))
        rows = min(rows, gen.last_batch_size)
    shape = str(getattr(gen, "last_shape", "")) if path in FAST_PATHS else ""  # of the timed steps, not the drain's
    fused = getattr(gen, "fused_kernels", None)
    replayed = graphs_ran(gen, "graphs")
    while gen.has_work():
        collect(gen.step())
    p50, p90 = p50_p90(times)
    fps = batch / p50
    spf = model.config.codec.samples_per_frame / model.config.codec.sample_rate
    read = step_read_bytes(model, batch, prompt + 4 + steps // 2)  # the mean cached length over the timed steps
    floor_ms = read / (gbps * 1e9) * 1000 if gbps else None
    host_ms = statistics.median(hosts) * 1000 if path in FAST_PATHS else None
    return (Result(path, batch, steps, p50 * 1000, p90 * 1000, fps, fps * spf, shape, read / 1e6, floor_ms, rows, fused,
                   host_ms, replayed),
            {k: torch.stack(v, 1) for k, v in frames.items()})


def time_prefill(path: str, model: GepardModel, engine: TorchEngine, prompts: int, repeats: int,
                 graphs: bool) -> PrefillResult:
    """The step that prefills ``prompts`` new requests while nothing else runs, to their first
    frames on the host: the engine's share of a lone stream's time to first audio. Two untimed
    prefills first (on CUDA they compile, with ``compiled``); each request ends at its first frame."""
    if path in FAST_PATHS:
        gen = FastGenerator(model, max_batch=max(8, prompts), max_positions=512, prefill_batch=prompts,
                            cuda_graphs=graphs, **FAST_PATHS[path])
    else:
        gen = BatchGenerator(model, max_batch=max(8, prompts))
    sp = SamplingParams(temperature=0.0, max_frames=1)
    times = []
    for i in range(2 + repeats):
        for j in range(prompts):
            gen.add(engine.prepare(SynthesisRequest(f"prefill-{i}-{j}", TEXT, None, sp)))
        sync(model.device)
        t0 = time.perf_counter()
        outs = gen.step()
        if i >= 2:
            times.append(time.perf_counter() - t0)
        assert len(outs) == prompts and not gen.has_work(), "a prefill step should end every request at frame 1"
    tokens = engine.prepare(SynthesisRequest("probe", TEXT, None, sp)).prompt_embeds.shape[0]
    p50, p90 = p50_p90(times)
    return PrefillResult(path, prompts, tokens, repeats, p50 * 1000, p90 * 1000, getattr(gen, "fused_kernels", None),
                         graphs_ran(gen, "prefill_graphs") if FAST_PATHS.get(path, {}).get("prefill_graphs") else None)


def graphs_ran(gen: FastGenerator | BatchGenerator, which: str) -> Optional[bool]:
    """Whether ``gen``'s ``which`` graphs ("graphs": the decode step's, "prefill_graphs") replayed:
    None where CUDA graphs were not asked for (the reference loop, --no-graphs, a CPU), False where
    a capture failed and the fast path ran that work eagerly instead (its ERROR line is in the log)."""
    if not getattr(gen, "graphs_asked", False):
        return None
    return getattr(gen, which) is not None


def check(device: torch.device, variants: tuple[str, ...] = ("fast",)) -> dict[str, bool]:
    """Frame identity against the reference loop on the tiny checkpoint (float32): the fast path run
    eagerly, then each of ``variants`` (FAST_PATHS) with CUDA graphs; whether each equals it."""
    model = GepardModel.from_pretrained(engine_checkpoint_tiny(), device=device, dtype=torch.float32)
    engine = TorchEngine(model, TorchEngineConfig(max_batch=1, path="reference"))
    knobs = [SamplingParams(temperature=0.0), SamplingParams(temperature=1.0, seed=1),
             SamplingParams(temperature=0.9, seed=2, top_k=3, repetition_penalty=2.0, repetition_window=5),
             SamplingParams(temperature=1.0, seed=3, cfg_scale=2.5, cfg_frames=6), SamplingParams(temperature=0.0, cfg_scale=3.0)]
    texts = ["Hello there.", "The quick brown fox jumps over the lazy dog.", "One.", "Hola, ¿cómo estás?"]
    try:
        reqs = [engine.prepare(SynthesisRequest(f"k{i}", texts[i % 4], None, dataclasses.replace(sp, max_frames=40)))
                for i, sp in enumerate(knobs)]
    finally:
        import asyncio

        asyncio.run(engine.aclose())
    loops = {"reference": BatchGenerator(model, max_batch=8),
             "fast eager": FastGenerator(model, max_batch=8, max_positions=256, cuda_graphs=False, fused_kernels=False)}
    loops.update({f"{v} graphs": FastGenerator(model, max_batch=8, max_positions=256, **FAST_PATHS[v]) for v in variants})
    frames = {}
    for name, gen in loops.items():
        got: dict[str, list[torch.Tensor]] = {r.request_id: [] for r in reqs}
        for step in range(200):
            if step in (0, 3):  # two joins: the second lands in a running batch
                for r in (reqs[:3] if step == 0 else reqs[3:]):
                    gen.add(r)
            for o in gen.step():
                if o.codes is not None:
                    got[o.request_id].append(o.codes)
            if step > 3 and not gen.has_work():
                break
        frames[name] = {k: torch.stack(v, 1) for k, v in got.items()}
    verdicts = {}
    for name in list(loops)[1:]:
        verdicts[name] = all(torch.equal(frames["reference"][k], frames[name][k]) for k in frames["reference"])
        fused = " (fused kernels)" if getattr(loops[name], "fused_kernels", False) else ""
        print(f"# check ({device}, float32): {name}{fused} {'equals' if verdicts[name] else 'DIFFERS FROM'} the reference "
              "loop", flush=True)
    for name, gen in loops.items():
        if graphs_ran(gen, "graphs") is False:  # its frames were checked all the same, eager
            print(f"# check: {name} ran eagerly: a CUDA graph capture failed (its ERROR line is above)", flush=True)
    graphs = sum(len(gen.graphs.graphs) for gen in loops.values() if getattr(gen, "graphs", None) is not None)
    print(f"# check: {graphs} CUDA graphs replayed", flush=True)
    return verdicts


def engine_checkpoint_tiny() -> Path:
    from engine.tiny import write_tiny_checkpoint

    out = CACHE / "tiny-engine"
    if not (out / "model.safetensors").exists():
        write_tiny_checkpoint(out, size="tiny", seed=0, with_codec=False)
    return out


def profile_step(model: GepardModel, engine: TorchEngine, batch: int, graphs: bool, out: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    sp = SamplingParams(temperature=0.4, max_frames=100)
    gen = whole_batch_generator(model, batch, prompt_tokens(engine, sp), max_positions=512, cuda_graphs=graphs)
    for i in range(batch):
        gen.add(engine.prepare(SynthesisRequest(f"p{i}", TEXT, None, dataclasses.replace(sp, seed=i))))
    for _ in range(5):
        gen.step()
    if gen.last_batch_size != batch:
        raise RuntimeError(f"profile: the steps decode {gen.last_batch_size} requests, not the batch of {batch}")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if model.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(3):
            gen.step()
    sort = "cuda_time_total" if model.device.type == "cuda" else "cpu_time_total"
    out.write_text(f"fast path, batch {batch}, shape {gen.last_shape}, CUDA graphs {gen.graphs is not None}, 3 steps\n"
                   + prof.key_averages().table(sort_by=sort, row_limit=40))
    print(f"# profile of batch {batch} written to {out}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="full", help="random checkpoint size: tiny or full")
    p.add_argument("--batch", default="1,8", help="comma list of batch sizes")
    p.add_argument("--steps", type=int, default=30, help="timed decode steps per batch size")
    p.add_argument("--paths", default="reference,fast",
                   help="comma list of reference, fast, compiled (the fast path with its decode step through "
                        "torch.compile), overlap (each step launched before the last one's results are read), "
                        "compiled+overlap, prefill-graphs (the prefill replayed as CUDA graphs), unfused (the "
                        "layers' element-wise ops eager: fast, overlap and prefill-graphs use GEPARD_TORCH_FUSED_KERNELS' "
                        "default, on on CUDA)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", help="auto: bfloat16 on GPU, float32 on CPU")
    p.add_argument("--no-graphs", action="store_true", help="fast path: run the step eagerly on CUDA too")
    p.add_argument("--sampled", action="store_true", help="temperature 0.4 instead of greedy")
    p.add_argument("--json", type=Path)
    p.add_argument("--profile", type=Path, help="write the profiler table of fast-path steps at the largest batch")
    p.add_argument("--check", action="store_true", help="only check frame identity (tiny, float32); exit 1 if not")
    p.add_argument("--hbm-gbps", type=float, help="the GPU's peak memory bandwidth, GB/s (default: by its name)")
    p.add_argument("--prefills", type=int, default=10, metavar="N",
                   help="timed prefills of each --prefill-prompts count per path, after the steps (0: none)")
    p.add_argument("--prefill-prompts", default="1,8", metavar="N,...",
                   help="prompts prefilled together in the timed prefills (GEPARD_TORCH_PREFILL_BATCH's scale)")
    p.add_argument("--compile-backend", default="inductor",
                   help="torch.compile backend of the compiled paths (eager: the same graphs, no kernels)")
    p.add_argument("--checkpoint", type=Path, help="a random checkpoint of --size whose stop head never fires "
                   "(e.g. bench/pipeline.py's), instead of writing one")
    args = p.parse_args(argv)
    unknown = [path for path in args.paths.split(",") if path != "reference" and path not in FAST_PATHS]
    if unknown:
        p.error(f"unknown path(s) {', '.join(unknown)}; choose from reference, {', '.join(FAST_PATHS)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = pick_device(args.device)
    dtype = pick_dtype(device, args.dtype)
    fast_step.COMPILE_BACKEND = args.compile_backend
    if args.check:
        sys.exit(0 if all(check(device).values()) else 1)
    # variants no GPU has run yet: their frames against the reference loop's, after the timings
    # (reported; float32 on the tiny checkpoint, where the eager fast path is expected equal; compiled
    # kernels may round differently on a GPU, so a difference there is worth reading, not a verdict)
    variants = tuple(p for p in args.paths.split(",") if p not in ("reference", "fast"))
    checks: dict[str, bool] = {}
    checkpoint = args.checkpoint or engine_checkpoint(args.size)
    model = GepardModel.from_pretrained(checkpoint, device=device, dtype=dtype)
    engine = TorchEngine(model, TorchEngineConfig(max_batch=1, path="reference"))  # its prepare() only
    gbps = peak_gbps(device, args.hbm_gbps)
    print(f"machine: {machine()}\ncheckpoint: {args.size} ({dtype}, {device}); peak memory bandwidth "
          f"{f'{gbps:.0f} GB/s' if gbps else 'unknown (--hbm-gbps)'}", flush=True)
    print(f"{'path':>16} {'B':>4} {'step p50':>9} {'step p90':>9} {'frames/s':>9} {'xRT':>7} {'read MB':>8} "
          f"{'floor':>7} {'x floor':>7} {'host':>7}  shape (times in ms)", flush=True)
    results, same, prefills = [], {}, []

    def save() -> None:  # after every row: a run cut short by its time cap keeps what it measured
        if args.json:
            args.json.write_text(json.dumps({"machine": machine(), "size": args.size, "dtype": str(dtype),
                                             "device": str(device), "peak_gbps": gbps, "frames_equal": same,
                                             "checks": checks, "compile_backend": args.compile_backend, "results": [asdict(r) for r in results],
                                             "prefills": [asdict(r) for r in prefills]}, indent=2))

    save()
    try:
        for batch in (int(b) for b in args.batch.split(",")):
            codes = {}
            for path in args.paths.split(","):
                r, codes[path] = time_path(path, model, engine, batch, args.steps, not args.no_graphs, not args.sampled,
                                           gbps)
                results.append(r)
                save()
                floor = f"{r.floor_ms:7.3f} {r.step_ms_p50 / r.floor_ms:7.1f}" if r.floor_ms else f"{'-':>7} {'-':>7}"
                host = f"{r.host_ms_p50:7.2f}" if r.host_ms_p50 is not None else f"{'-':>7}"
                print(f"{r.path:>16} {r.batch:4d} {r.step_ms_p50:9.2f} {r.step_ms_p90:9.2f} {r.frames_per_s:9.1f} "
                      f"{r.xrt:7.2f} {r.read_mb:8.1f} {floor} {host}  {r.shape}"
                      f"{' fused kernels' if r.fused_kernels else ''}", flush=True)
                if r.rows != r.batch:
                    print(f"# {r.path} at batch {r.batch}: a timed step decoded only {r.rows} requests", flush=True)
            if "reference" in codes and len(codes) > 1:
                ref = codes["reference"]
                same[batch] = all(torch.equal(ref[k], c[k]) for c in codes.values() for k in ref)
                others = " and ".join(p for p in codes if p != "reference")
                verdict = "equal" if same[batch] else "DIFFER" if dtype == torch.float32 else (
                    f"differ ({dtype}: the paths run other matrix-product shapes, whose rounding differs, and a "
                    "greedy choice between near-equal logits flips; frame identity is checked in float32)")
                print(f"# batch {batch}: reference and {others} frames {verdict}", flush=True)
                save()
        if args.prefills > 0:
            print(f"{'path':>16} {'prompts':>7} {'tokens':>6} {'prefill p50':>11} {'prefill p90':>11}  (ms, to the "
                  "first frames on the host)", flush=True)
            # overlapping steps changes nothing in a prefill: overlap is timed as fast, compiled+overlap as compiled
            prefill_paths = dict.fromkeys("fast" if p == "overlap" else p.removesuffix("+overlap")
                                          for p in args.paths.split(","))
            for prompts in (int(n) for n in args.prefill_prompts.split(",")):
                for path in prefill_paths:
                    r = time_prefill(path, model, engine, prompts, args.prefills, not args.no_graphs)
                    prefills.append(r)
                    save()
                    print(f"{r.path:>16} {r.prompts:7d} {r.tokens:6d} {r.prefill_ms_p50:11.2f} {r.prefill_ms_p90:11.2f}"
                          f"{'  fused kernels' if r.fused_kernels else ''}",
                          flush=True)
        if args.profile:
            profile_step(model, engine, max(int(b) for b in args.batch.split(",")), not args.no_graphs, args.profile)
        if variants:
            checks.update(check(device, variants))
            save()
    finally:
        import asyncio

        asyncio.run(engine.aclose())


if __name__ == "__main__":
    main()
