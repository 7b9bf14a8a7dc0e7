"""Issue 10's GPU figures in one Markdown page, from the JSON a GPU session wrote.

    python bench/gpu_summary.py OUT_DIR        (writes OUT_DIR/summary.md and prints it)

Reads what bench/gpu_session.sh leaves in OUT_DIR, each file optional:
  gpu-torch.json / gpu-vllm.json   bench/pipeline.py: TTFA, RTF, xRT per concurrency (per backend)
  torch_fast_bf16.json             bench/torch_fast.py: step time against its physical floor, graphs on
  torch_fast_bf16_compiled.json    the same, the fast path's step through torch.compile, graphs on
  torch_fast_bf16_eager.json       the fast path with graphs off
  torch_codec_full.json            bench/torch_codec.py: the codec on the device
  gpu-torch-prefill-graphs.json    bench/pipeline.py again, one stream, its prefill as CUDA graphs
  gpu-torch-carry.json             bench/pipeline.py again, the codec carrying each stream's conv state
  gpu-torch-prefill8.json          and at 256 streams with 8 new requests prefilled a step (the default: 64)
  gpu-torch-normal-priority.json   and at 256 streams with the engine's CUDA stream at normal priority
  loop_cost_gpu.json               bench/loop_cost.py: the gateway's event loop on this machine
and sets the pipeline figures against the issue's targets for one H200-class GPU (one stream: first
audio <= 20 ms, RTF <= 0.02; 256 streams: p99 RTF < 1, TTFA p99 < 300 ms, aggregate xRT above the
published 203.9x). Only the default chunk schedule's rows count for the targets; the others are the
first-audio comparison. Each measured figure says how many samples it rests on (n): a burst of one
stream is one sample, so the one-stream targets pool every C=1 burst of the run (bench/gpu.sh runs
several) into a p50 of them; a level's figures rest on its streams with audio. Needs only the
standard library (and bench/_common.py's percentile): it runs anywhere the JSON is.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile  # noqa: E402

PUBLISHED_XRT_256 = 203.9  # Gepard's published aggregate at 256 streams (RTX PRO 6000)


@dataclass(frozen=True)
class Measured:
    value: float
    n: Optional[int]  # the samples it rests on; None: not recorded (a JSON from before bench/pipeline.py kept n)


@dataclass(frozen=True)
class Target:
    name: str
    wanted: str
    measure: Callable[[list[dict]], Optional[Measured]]  # from the main rows; None: not measured
    met: Callable[[float], bool]
    unit: str  # appended to the measured value as is (" ms", "x", "")


def _value(row: dict, key: str) -> Optional[float]:
    value = row.get(key)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _at(rows: list[dict], concurrency: int, key: str) -> Optional[Measured]:
    row = next((r for r in rows if r["concurrency"] == concurrency and not r.get("note")), None)
    value = None if row is None else _value(row, key)
    return None if value is None else Measured(value, row.get("n"))


def _one_stream(rows: list[dict], key: str) -> Optional[Measured]:
    """The p50 over every C=1 burst: each is one stream, so its p50 is its one sample (a burst
    without audio, n = 0, has none; an older JSON without n holds one whenever it has a value)."""
    values = [v for r in rows if r["concurrency"] == 1 and not r.get("note") and r.get("n", 1)
              for v in [_value(r, key)] if v is not None]
    p50 = percentile(values, 50)
    return None if p50 is None else Measured(p50, len(values))


TARGETS = (
    Target("one stream: time to first audio", "<= 20 ms", lambda rows: _one_stream(rows, "ttfa_p50_ms"),
           lambda v: v <= 20, " ms"),
    Target("one stream: RTF", "<= 0.02", lambda rows: _one_stream(rows, "rtf_p50"), lambda v: v <= 0.02, ""),
    Target("256 streams: p99 RTF", "< 1", lambda rows: _at(rows, 256, "rtf_p99"), lambda v: v < 1, ""),
    Target("256 streams: TTFA p99", "< 300 ms", lambda rows: _at(rows, 256, "ttfa_p99_ms"), lambda v: v < 300, " ms"),
    Target("256 streams: aggregate xRT", f"> {PUBLISHED_XRT_256}", lambda rows: _at(rows, 256, "xrt"),
           lambda v: v > PUBLISHED_XRT_256, "x"),
)


def main_rows(result: dict) -> list[dict]:
    """The rows of the run's first (default) chunk schedule, as bench/pipeline.py's headline counts them."""
    rows = result.get("rows") or []
    return [r for r in rows if r["schedule"] == rows[0]["schedule"]] if rows else []


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def target_table(result: dict) -> list[str]:
    rows = main_rows(result)
    lines = ["| target | wanted | measured | |", "|---|---|---:|---|"]
    for t in TARGETS:
        m = t.measure(rows)
        shown = "not measured" if m is None else f"{m.value:.4g}{t.unit}{_samples(m.n)}"
        verdict = "" if m is None else ("met" if t.met(m.value) else "**not met**")
        lines.append(f"| {t.name} | {t.wanted} | {shown} |" + (f" {verdict} |" if verdict else " |"))
    realtime = [r["concurrency"] for r in rows if not r.get("note") and r.get("rtf_p99") is not None and r["rtf_p99"] < 1]
    lines.append(f"| most streams with p99 RTF < 1 | (report) | {max(realtime) if realtime else 0} | |")
    return lines


def _samples(n: Optional[int]) -> str:
    """How many samples a figure rests on, as the targets table shows it."""
    if n is None:
        return " (n not recorded)"
    return " (n=1: a single sample)" if n == 1 else f" (n={n})"


def pipeline_table(result: dict) -> list[str]:
    lines = [f"{result.get('backend', '?')} backend ({result.get('runner', '?')}), {result.get('size', '?')} checkpoint, "
             f"{result.get('dtype', '?')}, {result.get('frames', '?')} frames per stream, codec "
             f"{result.get('codec_impl') or 'off'}; {result.get('machine', '')}", "",
             "| schedule | streams | n | xRT | RTF p50 / p99 | TTFA p50 / p99 ms | underrun p99 ms | step p50 ms "
             "| codec share | GPU GiB |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result.get("rows") or []:
        if r.get("note"):
            lines.append(f"| {r['schedule']} | {r['concurrency']} | | {r['note']} | | | | | | |")
            continue
        # n: the streams heard, the samples behind the percentiles (fewer than streams: some failed)
        lines.append(f"| {r['schedule']} | {r['concurrency']} | {_fmt(r.get('n'))} | {_fmt(r['xrt'])} | {_fmt(r['rtf_p50'], 3)} / "
                     f"{_fmt(r['rtf_p99'], 3)} | {_fmt(r['ttfa_p50_ms'])} / {_fmt(r['ttfa_p99_ms'])} | "
                     f"{_fmt(r['underrun_p99_ms'])} | {_fmt(r['step_p50_ms'], 2)} | {_fmt(r['codec_share'], 2)} | "
                     f"{_fmt(r.get('gpu_device_peak_gib'))} |")
    return lines


def _path(row: dict) -> str:
    """A bench/torch_fast.py path as the tables name it: with "(fused kernels)" when it ran them, and
    "(eager: a capture failed)" when it was to replay CUDA graphs and did not."""
    said = [*(["fused kernels"] if row.get("fused_kernels") else []),
            *(["eager: a capture failed"] if row.get("graphs") is False else [])]
    return f"{row['path']} ({'; '.join(said)})" if said else row["path"]


def step_table(*results: tuple[Optional[dict], str]) -> list[str]:
    """Rows of each (bench/torch_fast.py JSON, whether its fast path ran with graphs "on" / "off")."""
    lines = ["| path | graphs | requests | step p50 ms | host ms | read MB | floor ms | x floor | shape |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    listed: set[tuple[str, int]] = set()
    for result, label in results:
        for r in (result or {}).get("results", []):
            if r["path"] == "reference" and ("reference", r["batch"]) in listed:
                continue  # timed again beside the compiled path (for its frame check): listed once
            listed.add((r["path"], r["batch"]))
            on = "-" if r["path"] == "reference" else label
            floor = r.get("floor_ms")
            ratio = r["step_ms_p50"] / floor if floor else None
            lines.append(f"| {_path(r)} | {on} | {r['batch']} | {_fmt(r['step_ms_p50'], 2)} | "
                         f"{_fmt(r.get('host_ms_p50'), 2)} | {_fmt(r.get('read_mb'))} | "
                         f"{_fmt(floor, 3)} | {_fmt(ratio)} | {r.get('shape', '')} |")
    return lines


def prefill_table(*results: Optional[dict]) -> list[str]:
    """The prefill rows of each bench/torch_fast.py JSON (reference listed once): the engine's part of
    a lone stream's first audio before its decode steps."""
    lines = ["| path | prompts | tokens each | prefill p50 ms | p90 ms |", "|---|---:|---:|---:|---:|"]
    listed: set[tuple[str, int]] = set()
    for result in results:
        for r in (result or {}).get("prefills", []):
            if (r["path"], r["prompts"]) in listed:
                continue
            listed.add((r["path"], r["prompts"]))
            lines.append(f"| {_path(r)} | {r['prompts']} | {r['tokens']} | {_fmt(r['prefill_ms_p50'], 2)} | "
                         f"{_fmt(r['prefill_ms_p90'], 2)} |")
    return lines if listed else []


def codec_lines(codec: dict) -> list[str]:
    run = codec.get("run_dtype_vs_fp32") or {}
    lines = [f"{codec.get('device', '?')}, {codec.get('dtype', '?')}, {codec.get('size', '?')} codec: float32 on the device "
             f"vs CPU max abs diff {_fmt(codec.get('fp32_device_vs_cpu'), 6)}; run dtype vs float32 SNR "
             f"{_fmt(run.get('snr_db'))} dB; batched streams vs whole decodes {_fmt(codec.get('streaming_vs_whole'), 6)}", "",
             "| windows | frames each | ms per call | audio s per s |", "|---:|---:|---:|---:|"]
    for t in codec.get("timings", []):
        lines.append(f"| {t['batch']} | {t['width']} | {_fmt(t['ms'], 2)} | {_fmt(t['audio_s_per_s'])} |")
    if codec.get("compiled"):
        lines += ["", f"compiled (GEPARD_CODEC_COMPILE; compiled in {_fmt(codec.get('compile_s'))} s), one window:", "",
                  "| frames | eager ms | compiled ms | max abs diff |", "|---:|---:|---:|---:|"]
        for t in codec["compiled"]:
            lines.append(f"| {t['width']} | {_fmt(t['eager_ms'], 2)} | {_fmt(t['compiled_ms'], 2)} | "
                         f"{_fmt(t['max_abs_vs_eager'], 6)} |")
    if codec.get("streaming"):
        first = codec["streaming"][0]
        lines += ["", f"{first['streams']} streams x {first['frames']} frames, schedule {first['schedule']}, windowed "
                  "against carrying conv state (GEPARD_CODEC_CARRY_STATE):", "",
                  "| mode | decoder busy s | per audio s | calls | max abs diff vs whole |", "|---|---:|---:|---:|---:|"]
        for t in codec["streaming"]:
            lines.append(f"| {t['mode']} | {_fmt(t['decode_s'], 2)} | {_fmt(t['decode_s_per_audio_s'], 3)} | {t['calls']} | "
                         f"{_fmt(t['max_abs_vs_whole'], 6)} |")
    fused = codec.get("fused") or {}
    if fused.get("skipped"):
        lines += ["", f"fused activations (GEPARD_CODEC_FUSED_ACTIVATIONS): not run ({fused['skipped']})"]
    elif fused:
        lines += ["", f"fused activations (GEPARD_CODEC_FUSED_ACTIVATIONS; {fused.get('activations')} snake activations, "
                  f"one Triton kernel each): max abs diff vs the eager decoder {_fmt(fused.get('max_abs_vs_eager'), 6)}, "
                  f"vs float32 {_fmt(fused.get('max_abs_vs_fp32'), 6)}; eager decodes, ms per call:", "",
                  "| windows | frames each | eager activations | fused |", "|---:|---:|---:|---:|"]
        for t in fused.get("timings", []):
            lines.append(f"| {t['batch']} | {t['width']} | {_fmt(t['eager_ms'], 2)} | {_fmt(t['fused_ms'], 2)} |")
        row = fused.get("streaming")
        if row:
            state = (f"; their state read by one kernel per conv ({fused['state_convs']} convs)" if fused.get("state_convs")
                     else f"; their state read eagerly ({fused.get('state_fused_error', 'not fused')})")
            lines += ["", f"{row['streams']} streams carrying conv state, fused{state}: decoder busy {_fmt(row['decode_s'], 2)} s "
                      f"({_fmt(row['decode_s_per_audio_s'], 3)} per audio s), max abs diff vs whole "
                      f"{_fmt(row['max_abs_vs_whole'], 6)}"]
    return lines


def gateway_lines(loop: dict) -> list[str]:
    """The gateway served on this machine: its event loop's CPU per second of audio, and the
    aggregate xRT at which that one thread would never rest (one process's ceiling)."""
    lines = [f"{loop.get('machine', '?')}; `gepard serve` (backend {loop.get('backend', '?')}) under bench/loop_cost.py's "
             "agents on the same machine; ceiling = 1000 / loop ms per audio second, to set against the published "
             f"{PUBLISHED_XRT_256}x", "",
             "| agents | audio s | xRT | loop ms per audio s | loop ceiling | process ms per audio s |",
             "|---:|---:|---:|---:|---:|---:|"]
    for r in loop.get("results", []):
        loop_ms = r.get("loop_ms_per_audio_s")
        ceiling = 1000 / loop_ms if loop_ms else None
        lines.append(f"| {r.get('agents')} | {_fmt(r.get('audio_s'))} | {_fmt((r.get('load') or {}).get('xrt'), 2)} | "
                     f"{_fmt(loop_ms, 2)} | {f'{ceiling:.0f}x' if ceiling else '-'} | {_fmt(r.get('process_ms_per_audio_s'))} |")
    return lines


def run_settings(result: dict) -> str:
    """What the pipeline ran with, as its JSON recorded it: the codec's settings above all, which
    change between sessions (a key an older JSON lacks is left out)."""
    flags = [("codec_cuda_graphs", "codec CUDA graphs"), ("codec_carry_state", "codec carrying conv state"),
             ("codec_fused_activations", "codec fused activations"), ("torch_fused_kernels", "fused engine kernels"),
             ("engine_cuda_graphs", "engine CUDA graphs"),
             ("torch_overlap", "overlapped steps"),
             ("torch_prefill_graphs", "prefill graphs")]
    said = [f"{result.get('runner') or result.get('backend', '?')}, codec {result.get('codec_impl') or 'off'}"]
    for key, label in flags:
        if key in result:
            value = result[key]
            said.append(f"{label} {value if isinstance(value, str) else ('on' if value else 'off')}")
    if result.get("torch_prefill_batch"):  # the torch fast path's (None for vLLM)
        said.append(f"prefill batch {result['torch_prefill_batch']}")
    if result.get("torch_stream_priority"):
        said.append(f"engine stream priority {result['torch_stream_priority']}")
    return "ran with: " + "; ".join(said)


def _load(path: Path) -> Optional[dict]:
    return json.loads(path.read_text()) if path.is_file() else None


def summary(out_dir: Path) -> str:
    parts = ["# Gepard on a GPU: issue 10's figures", ""]
    for name, label in (("torch", "torch"), ("vllm", "vllm"), ("torch-prefill-graphs", "torch, prefill as CUDA graphs"),
                        ("torch-carry", "torch, codec carrying conv state"),
                        ("torch-prefill8", "torch, codec carrying conv state, 8 prefills a step"),
                        ("torch-normal-priority", "torch, codec carrying conv state, engine stream at normal priority")):
        result = _load(out_dir / f"gpu-{name}.json")
        if result is None:
            continue
        parts += [f"## {label}: targets", "", run_settings(result), "", *target_table(result), "",
                  f"## {label}: every level", "",
                  *pipeline_table(result), ""]
    steps = [(_load(out_dir / f"torch_fast_bf16{suffix}.json"), label)
             for suffix, label in (("", "on"), ("_compiled", "on"), ("_eager", "off"))]
    if any(result for result, _ in steps):
        peak = next(result for result, _ in steps if result).get("peak_gbps")
        parts += ["## engine step against its physical floor", "",
                  f"floor = the bytes a step must read at {_fmt(peak, 0)} GB/s peak bandwidth; path compiled = "
                  "the fast path with its step through torch.compile; unfused = with its layers' element-wise ops, "
                  "sampling and commit eager (GEPARD_TORCH_FUSED_KERNELS off); host = a step's time not spent waiting for "
                  "the device's results (near the step's time: the host bounds it)", "", *step_table(*steps), ""]
        prefills = prefill_table(*(result for result, _ in steps))
        if prefills:
            parts += ["## prefill (one prompt: the engine's part of first audio before its decode steps)", "",
                      *prefills, ""]
        checks = {name: ok for result, _ in steps for name, ok in ((result or {}).get("checks") or {}).items()}
        if checks:
            parts += ["frames against the reference loop (tiny checkpoint, float32): " + "; ".join(
                f"{name} {'equal' if ok else '**differ**'}" for name, ok in checks.items()), ""]
    codec = _load(out_dir / "torch_codec_full.json")
    if codec:
        parts += ["## codec on the device", "", *codec_lines(codec), ""]
    loop = _load(out_dir / "loop_cost_gpu.json")
    if loop:
        parts += ["## the gateway's event loop on this machine", "", *gateway_lines(loop), ""]
    if len(parts) == 2:
        parts.append(f"No results in {out_dir}.")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir", type=Path)
    args = p.parse_args(argv)
    text = summary(args.out_dir)
    (args.out_dir / "summary.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
