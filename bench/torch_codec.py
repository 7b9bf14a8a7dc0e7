"""The torch NanoCodec decoder on a device: exactness checks and decode timings, without NeMo.

    python bench/torch_codec.py [--device auto|cpu|cuda] [--size tiny|full] [--compile 2,6] [--json OUT]

Writes a random decoder-only codec (codec_worker.torchcodec.random) and reports, each as one line:
  1) float32 on the device == float32 on the CPU (max abs diff; CUDA convs are not bit-exact);
  2) the run dtype (bfloat16 on CUDA) against float32 (max abs diff, and the SNR in dB);
  3) BatchingCodecDecoder on the device (on CUDA: its own CUDA stream), schedule 2,4,8,32, several
     concurrent streams == each utterance decoded whole (max abs diff);
  4) decode time per batch of windows (B windows of W frames: W = 25 context + the new frames),
     median of --reps, in the run dtype;
  4b) with --profile OUT: the PyTorch profiler's table of 3 eager decodes at the smallest and at
     the largest batch and width, sorted by device time (CPU time on CPU), written to OUT: what a
     decode's time goes to, kernel by kernel (cuDNN's convolutions and any layout transforms they
     add, the activations, the padding), at the launch-bound and at the compute-bound end;
  5) with --compile W,...: the decoder through torch.compile (GEPARD_CODEC_COMPILE) for one window of
     up to max(W) frames, its compile time, then per width W the decode time eager and compiled and
     their max abs diff. W = 2 is a stream's first window on the 2,4,8,32 schedule (no context yet),
     the decode in every stream's time to first audio; eager, a full-size decode launches ~1,100
     kernels whatever its width, so on a GPU a short window is bound by their launches;
  6) with --graphs (CUDA; instead of --compile): the decoder captured as CUDA graphs for every padded
     shape up to the largest batch and width (GEPARD_CODEC_CUDA_GRAPHS, as the gateway does), its
     capture time, then per batch and width the decode time eager (stage 4) and replayed, and the max
     abs diff between them (with --carry, the stateful decodes are captured too, up to 32 frames);
  7) with --carry N: N concurrent streams of --carry-frames frames each, pushed a frame at a time
     through BatchingCodecDecoder on the device's default schedule (CPU 4,16; GPU 2,4,8,32), first
     windowed (each chunk re-decodes 25 frames of context), then carrying each stream's conv state
     (GEPARD_CODEC_CARRY_STATE): the decoder's busy seconds per second of audio, the frames decoded,
     the wall time, and the max abs diff of each against the one-shot decode. Runs right after
     stage 4, eagerly (with --graphs the stateful decodes are captured afterwards);
  8) with --fused: a second decoder with each snake activation one Triton kernel
     (GEPARD_CODEC_FUSED_ACTIVATIONS; CUDA, or CPU under TRITON_INTERPRET=1): its max abs diff
     against the eager decoder in the run dtype and against float32, then stage 4's decodes again
     (ms per call, eager -> fused), and with --carry stage 7's streams carrying state, their state
     read and recorded by one Triton kernel per conv too (TorchNanoCodec.fuse_state, as the gateway
     does). Runs right after stage 7, eagerly.
Exit 1 when a check's difference is past its bound (float32: 1e-4 on the device, 1e-5 batched;
batched in bf16: one unit in the last place at full scale, 2^-7; fused activations against float32:
twice the eager decoder's difference, at least 1e-5), else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import machine  # noqa: E402
from codec_worker import fsq  # noqa: E402
from codec_worker.batching import BatchingCodecDecoder, DecodeBatchEvent  # noqa: E402
from codec_worker.schedule import default_schedule  # noqa: E402
from codec_worker.torchcodec import TorchNanoCodec, fused, load_torch_decoder  # noqa: E402
from codec_worker.torchcodec.random import write_random_decoder_codec  # noqa: E402


def codes(batch: int, frames: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, n, (batch, frames), generator=g) for n in fsq.channel_levels()], dim=1)


@contextlib.contextmanager
def no_tf32() -> Iterator[None]:
    """float32 convolutions and matrix products in full float32 precision on CUDA (no-op on CPU)."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


async def stream_all(codec: TorchNanoCodec, utterances: list[torch.Tensor]) -> list[np.ndarray]:
    async def one(decoder: BatchingCodecDecoder, c: torch.Tensor) -> np.ndarray:
        stream = decoder.open_stream()
        pieces = []
        for at in range(0, c.shape[1], 3):  # 3 frames per push, as an engine step batch might give
            pieces.append(await stream.push(c[:, at : at + 3]))
        pieces.append(await stream.finish())
        await stream.aclose()
        return np.concatenate(pieces)

    async with BatchingCodecDecoder(codec, max_batch=32, schedule="2,4,8,32") as decoder:
        return list(await asyncio.gather(*(one(decoder, c) for c in utterances)))


def time_decode(codec: TorchNanoCodec, device: torch.device, c: torch.Tensor, reps: int) -> float:
    """Median ms of ``reps`` decodes of ``c``, with the copy to host as decode_windows does."""
    times = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        codec.decode_codes(c).cpu()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def time_compiled(run: TorchNanoCodec, device: torch.device, widths: list[int], reps: int, out: dict, save,
                  backend: str = "inductor") -> None:
    """Stage 5: one window of each width, eager then compiled (compiled for one window of up to the widest)."""
    eager = {}
    for w in widths:  # eager first: compiling swaps the codec's decode path in place
        c = codes(1, w, seed=7000 + w)
        run.decode_codes(c)
        eager[w] = (time_decode(run, device, c, reps), run.decode_codes(c).cpu())
    t0 = time.perf_counter()
    shapes = run.compile(1, max(widths), backend=backend)
    out["compile_s"], out["compile_backend"] = time.perf_counter() - t0, backend
    print(f"5) compiled ({backend}) for 1 window of up to {max(widths)} frames ({shapes} shapes) in {out['compile_s']:.1f} s; "
          f"ms per call, median of {reps}:", flush=True)
    out["compiled"] = []
    for w in widths:
        c = codes(1, w, seed=7000 + w)
        ms = time_decode(run, device, c, reps)
        diff = float((run.decode_codes(c).cpu() - eager[w][1]).abs().max())
        out["compiled"].append({"batch": 1, "width": w, "eager_ms": eager[w][0], "compiled_ms": ms, "max_abs_vs_eager": diff})
        print(f"   B=1 W={w:3d}: eager {eager[w][0]:8.2f}  compiled {ms:8.2f}  max abs diff {diff:.3g}", flush=True)
        save()


def time_graphs(run: TorchNanoCodec, device: torch.device, batches: list[int], widths: list[int], reps: int, out: dict,
                save) -> None:
    """Stage 6: the decoder as CUDA graphs for every padded shape up to max(batches) x max(widths),
    against its eager decodes (stage 4's times; outputs taken before the capture)."""
    if device.type != "cuda":
        print("6) CUDA graphs: skipped (no CUDA device)", flush=True)
        return
    eager = {(b, w): run.decode_codes(codes(b, w, seed=b * 1000 + w)).cpu() for b in batches for w in widths}
    t0 = time.perf_counter()
    shapes = run.capture_graphs(max(batches), max(widths), max_chunk_frames=32 if run.state_cache is not None else 0)
    out["graphs_capture_s"] = time.perf_counter() - t0
    print(f"6) CUDA graphs ({shapes} shapes, captured in {out['graphs_capture_s']:.1f} s); ms per call, median of {reps}, "
          "eager -> replayed:", flush=True)
    eager_ms = {(t["batch"], t["width"]): t["ms"] for t in out["timings"]}
    out["graphs"] = []
    for b in batches:
        line = []
        for w in widths:
            c = codes(b, w, seed=b * 1000 + w)
            ms = time_decode(run, device, c, reps)
            diff = float((run.decode_codes(c).cpu() - eager[(b, w)]).abs().max())
            before = eager_ms.get((b, w))
            out["graphs"].append({"batch": b, "width": w, "eager_ms": before, "graphs_ms": ms, "max_abs_vs_eager": diff})
            line.append(f"W={w}: {before if before is not None else float('nan'):8.2f} -> {ms:7.2f} (diff {diff:.3g})")
        print(f"   B={b:4d}  " + "  ".join(line), flush=True)
        save()


def streamed_row(run: TorchNanoCodec, utterances: list[torch.Tensor], schedule, carried: bool, mode: str) -> dict:
    """The utterances pushed a frame at a time through one BatchingCodecDecoder at once: the
    decoder's busy time and calls, and the max abs diff of each stream against its one-shot decode."""
    busy: list[DecodeBatchEvent] = []

    async def go() -> tuple[list[np.ndarray], int]:
        async def one(decoder: BatchingCodecDecoder, c: torch.Tensor) -> np.ndarray:
            stream = decoder.open_stream()
            pieces = [await stream.push(c[:, at : at + 1]) for at in range(c.shape[1])]
            pieces.append(await stream.finish())
            await stream.aclose()
            return np.concatenate(pieces)

        async with BatchingCodecDecoder(run, max_batch=32, schedule=schedule, carry_state=carried) as decoder:
            decoder.observer = busy.append
            got = list(await asyncio.gather(*(one(decoder, c) for c in utterances)))
            return got, decoder.windowed_streams

    whole = [run.decode_codes(c.unsqueeze(0))[0].cpu().numpy() for c in utterances]
    t0 = time.perf_counter()
    got, windowed = asyncio.run(go())
    wall = time.perf_counter() - t0
    decode_s = sum(e.duration_s for e in busy)
    frames = utterances[0].shape[-1]
    audio_s = len(utterances) * frames * run.samples_per_frame / run.sample_rate_hz
    return {"mode": mode, "schedule": str(schedule), "streams": len(utterances), "frames": frames,
            "decode_s": decode_s, "decode_s_per_audio_s": decode_s / audio_s, "wall_s": wall, "calls": len(busy),
            "windowed_streams": windowed if carried else len(utterances),
            "max_abs_vs_whole": max(float(np.abs(a - b).max()) for a, b in zip(got, whole))}


def stream_utterances(streams: int, frames: int) -> list[torch.Tensor]:
    return [codes(1, frames, seed=500 + i)[0] for i in range(streams)]


def print_streamed(row: dict, bound: float) -> None:
    print(f"   {row['mode']:8s}: decoder busy {row['decode_s']:7.2f} s ({row['decode_s_per_audio_s']:.3f} s per audio s), "
          f"{row['calls']} calls, wall {row['wall_s']:6.2f} s, max abs diff vs whole {row['max_abs_vs_whole']:.3g} "
          f"({'ok' if row['max_abs_vs_whole'] <= bound else 'FAIL'})", flush=True)


def streaming_bound(dtype: torch.dtype) -> float:
    return 1e-5 if dtype == torch.float32 else torch.finfo(dtype).eps


def time_streaming(run: TorchNanoCodec, device: torch.device, streams: int, frames: int, out: dict, save) -> bool:
    """Stage 7: the same streams decoded windowed, then carrying state; whether both are exact."""
    schedule = default_schedule(device)
    utterances = stream_utterances(streams, frames)
    audio_s = streams * frames * run.samples_per_frame / run.sample_rate_hz
    bound = streaming_bound(run.dtype)
    print(f"7) {streams} streams x {frames} frames ({audio_s:.1f} s of audio), schedule {schedule}, pushed a frame at a time:",
          flush=True)
    out["streaming"], exact = [], True
    for carried in (False, True):
        row = streamed_row(run, utterances, schedule, carried, "carried" if carried else "windowed")
        exact &= row["max_abs_vs_whole"] <= bound
        out["streaming"].append(row)
        print_streamed(row, bound)
        save()
    windowed_row, carried_row = out["streaming"]
    print(f"   carrying state: {windowed_row['decode_s'] / max(carried_row['decode_s'], 1e-9):.2f}x less decoder time",
          flush=True)
    return exact


def time_fused(fast: TorchNanoCodec, run: TorchNanoCodec, want: torch.Tensor, sample: torch.Tensor, args: argparse.Namespace,
               out: dict, save) -> bool:
    """Stage 8: ``fast`` (the same decoder) with fused activations against ``run`` (eager, same dtype) and the float32
    CPU decode ``want`` of ``sample``; then stage 4's decodes and stage 7's carried streams on it.
    Whether it stays within its bound against float32."""
    device, dtype = run.device, run.dtype
    reason = fused.unavailable_reason(device)
    if reason:
        print(f"8) fused activations: skipped ({reason})", flush=True)
        out["fused"] = {"skipped": reason}
        return True
    t0 = time.perf_counter()
    count = fast.fuse_activations()
    got = fast.decode_codes(sample).cpu()
    vs_eager = float((got - run.decode_codes(sample).cpu()).abs().max())
    vs_fp32 = float((got - want).abs().max())
    bound = max(2 * out["run_dtype_vs_fp32"]["max_abs"], 1e-5)
    result = out["fused"] = {"activations": count, "check_s": time.perf_counter() - t0, "max_abs_vs_eager": vs_eager,
                             "max_abs_vs_fp32": vs_fp32, "bound_vs_fp32": bound, "timings": []}
    print(f"8) fused activations ({count}, checked and compiled in {result['check_s']:.1f} s): max abs diff vs eager "
          f"{vs_eager:.3g}, vs float32 {vs_fp32:.3g} ({'ok' if vs_fp32 <= bound else 'FAIL'}); ms per call, median of "
          f"{args.reps}, eager -> fused:", flush=True)
    eager_ms = {(t["batch"], t["width"]): t["ms"] for t in out["timings"]}
    for b in (int(x) for x in args.batches.split(",")):
        line = []
        for w in (int(x) for x in args.widths.split(",")):
            c = codes(b, w, seed=b * 1000 + w)
            try:
                fast.decode_codes(c)
                ms = time_decode(fast, device, c, args.reps)
            except torch.OutOfMemoryError:
                ms = float("nan")
                torch.cuda.empty_cache()
            before = eager_ms.get((b, w))
            result["timings"].append({"batch": b, "width": w, "eager_ms": before, "fused_ms": ms if ms == ms else None})
            line.append(f"W={w}: {before if before is not None else float('nan'):8.2f} -> {ms:7.2f}")
        print(f"   B={b:4d}  " + "  ".join(line), flush=True)
        save()
    if args.carry:
        fast.carry_state(args.carry)
        try:
            result["state_convs"] = fast.fuse_state()
        except Exception as exc:  # noqa: BLE001 (reported; the streams then carry their state eagerly)
            result["state_fused_error"] = f"{type(exc).__name__}: {exc}"
            print(f"   fused state refused ({result['state_fused_error']}): the streams read it eagerly", flush=True)
        row = result["streaming"] = streamed_row(fast, stream_utterances(args.carry, args.carry_frames),
                                                 default_schedule(device), True,
                                                 "carried, fused" + (" (state too)" if fast.fused_state else ""))
        print_streamed(row, streaming_bound(dtype))
        save()
    return vs_fp32 <= bound


def profile_decodes(run: TorchNanoCodec, device: torch.device, shapes: list[tuple[int, int]], out: Path) -> None:
    """Stage 4b: the profiler's table of 3 eager decodes of each (batch, width) in ``shapes``."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sort = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    tables = []
    for b, w in shapes:
        c = codes(b, w, seed=b * 1000 + w)
        run.decode_codes(c)  # warm-up: cuDNN picks its algorithms outside the profile
        sync(device)
        with profile(activities=activities) as prof:
            for _ in range(3):
                run.decode_codes(c)
            sync(device)
        tables.append(f"{run.dtype} codec, {b} window(s) of {w} frames, eager, 3 decodes\n"
                      + prof.key_averages().table(sort_by=sort, row_limit=30))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n\n".join(tables))
    print(f"4b) profile of {', '.join(f'B={b} W={w}' for b, w in shapes)} written to {out}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--size", choices=("tiny", "full"), default="full")
    p.add_argument("--batches", default="1,8,32,128", help="windows per decode call")
    p.add_argument("--widths", default="27,29,33,57", help="frames per window (25 context + 2, 4, 8, 32 new)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--compile", default="", metavar="W,...",
                   help="also time the compiled decoder on one window of each width (e.g. 2: a stream's first)")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile's backend for --compile")
    p.add_argument("--graphs", action="store_true",
                   help="also time the decoder as CUDA graphs (GEPARD_CODEC_CUDA_GRAPHS) at each batch and width")
    p.add_argument("--carry", type=int, default=0, metavar="N",
                   help="also stream N concurrent utterances windowed, then carrying conv state, and compare")
    p.add_argument("--carry-frames", type=int, default=120, help="frames per utterance for --carry")
    p.add_argument("--fused", action="store_true",
                   help="also decode with each snake activation one Triton kernel (GEPARD_CODEC_FUSED_ACTIVATIONS)")
    p.add_argument("--profile", type=Path, metavar="OUT",
                   help="write the profiler's table of eager decodes at the smallest and largest batch and width")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.graphs and args.compile:
        p.error("--graphs and --compile time one decoder each: run them separately")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    print(f"machine: {machine()}; device {device}, run dtype {dtype}, {args.size} codec", flush=True)
    out: dict = {"machine": machine(), "device": str(device), "dtype": str(dtype), "size": args.size, "timings": []}
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = write_random_decoder_codec(Path(tmp) / "codec.nemo", size=args.size)
        print(f"# random decoder-only codec written in {time.perf_counter() - t0:.1f} s", flush=True)
        cpu32 = load_torch_decoder(path, "cpu", torch.float32)
        dev32 = load_torch_decoder(path, device, torch.float32)
        run = load_torch_decoder(path, device, dtype)
        if args.carry:
            run.carry_state(args.carry)  # before --graphs: the stateful decodes are captured too
        fast = load_torch_decoder(path, device, dtype) if args.fused else None  # stage 8 fuses its activations
    def save() -> None:  # after every stage: a run cut short by its time cap keeps what it measured
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(out, indent=2))

    sample = codes(2, 8, seed=1)
    want = cpu32.decode_codes(sample)
    # 1) float32 on the device vs the CPU: with TF32 off, which cuDNN otherwise uses for float32
    # convolutions (10-bit mantissas: differences near the bound from rounding alone, not the port)
    with no_tf32():
        diff32 = float((dev32.decode_codes(sample).cpu() - want).abs().max())
    out["fp32_device_vs_cpu"] = diff32
    failed |= diff32 > 1e-4
    print(f"1) float32 {device} vs cpu: max abs diff {diff32:.3g} ({'ok' if diff32 <= 1e-4 else 'FAIL'})", flush=True)
    save()
    # 2) run dtype vs float32
    got = run.decode_codes(sample).cpu()
    err = float((got - want).abs().max())
    snr = float(10 * torch.log10(want.pow(2).mean() / (got - want).pow(2).mean().clamp_min(1e-20)))
    out["run_dtype_vs_fp32"] = {"max_abs": err, "snr_db": snr}
    print(f"2) {dtype} vs float32: max abs diff {err:.3g}, SNR {snr:.1f} dB", flush=True)
    save()
    # 3) batched streaming on the device == whole decode, same dtype
    utterances = [codes(1, n, seed=10 + n)[0] for n in (40, 17, 65, 5)]
    streamed = asyncio.run(stream_all(run, utterances))
    whole = [run.decode_codes(c.unsqueeze(0))[0].cpu().numpy() for c in utterances]
    diff_stream = max(float(np.abs(a - b).max()) for a, b in zip(streamed, whole))
    # the batch's decodes run other shapes than the whole one, for which cuDNN picks other
    # algorithms: in bf16 their rounding differs by up to a unit in the last place of audio at full
    # scale (eps: 2^-7; on an H200, 2026-12-04: 0.00195, one such unit at half scale). A seam that
    # is wrong differs by the order of the signal.
    bound = 1e-5 if dtype == torch.float32 else torch.finfo(dtype).eps
    failed |= diff_stream > bound
    out["streaming_vs_whole"] = diff_stream
    print(f"3) BatchingCodecDecoder (2,4,8,32{', own CUDA stream' if device.type == 'cuda' else ''}) vs whole: "
          f"max abs diff {diff_stream:.3g} ({'ok' if diff_stream <= bound else 'FAIL'})", flush=True)
    save()
    # 4) timings
    print(f"4) decode ms per call ({dtype}), median of {args.reps}:", flush=True)
    for b in (int(x) for x in args.batches.split(",")):
        line = []
        for w in (int(x) for x in args.widths.split(",")):
            c = codes(b, w, seed=b * 1000 + w)
            try:
                run.decode_codes(c)  # warm-up (cuDNN picks its algorithms)
                ms = time_decode(run, device, c, args.reps)
            except torch.OutOfMemoryError:
                ms = float("nan")
                torch.cuda.empty_cache()
            ok = ms == ms  # NaN: out of memory
            out["timings"].append({"batch": b, "width": w, "ms": ms if ok else None,
                                   "audio_s_per_s": b * (w - 25) * 1024 / 22050 / (ms / 1000) if ok else None})
            line.append(f"W={w}: {ms:8.2f}")
        print(f"   B={b:4d}  " + "  ".join(line), flush=True)
        save()
    if args.profile:
        batches, widths = [int(b) for b in args.batches.split(",")], [int(w) for w in args.widths.split(",")]
        shapes = sorted({(min(batches), min(widths)), (max(batches), max(widths))})
        try:
            profile_decodes(run, device, shapes, args.profile)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            print("4b) profile: out of memory", flush=True)
    if args.carry:  # before graphs and compiling: a slow compile must not starve it of its part's time
        failed |= not time_streaming(run, device, args.carry, args.carry_frames, out, save)
    if fast is not None:
        failed |= not time_fused(fast, run, want, sample, args, out, save)
    if args.graphs:
        time_graphs(run, device, [int(b) for b in args.batches.split(",")], [int(w) for w in args.widths.split(",")],
                    args.reps, out, save)
    if args.compile:
        time_compiled(run, device, [int(w) for w in args.compile.split(",")], args.reps, out, save, args.compile_backend)
    if device.type == "cuda":
        out["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        print(f"# peak torch memory {out['peak_gib']:.2f} GiB", flush=True)
    save()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
