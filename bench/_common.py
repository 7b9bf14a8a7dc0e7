"""Shared helpers for the benchmark scripts: machine description, percentiles and random checkpoints
on disk. Only the standard library at import: the load generator and gpu_summary.py run where torch
is absent."""

from __future__ import annotations

import math
import os
import platform
from pathlib import Path
from typing import Iterable, Optional

CACHE = Path(os.environ.get("GEPARD_BENCH_DIR", Path(__file__).resolve().parent.parent / "models" / "bench"))


def percentile(values: Iterable[float], q: float) -> Optional[float]:
    """The q-th percentile (0-100) with linear interpolation between closest ranks (numpy's
    default); None for no values. Every bench script uses this one: a nearest-rank pick rounded
    half to even made the p50 of two samples their minimum, and an index truncated for p90 could
    fall below the interpolated p50."""
    xs = sorted(values)
    if not xs:
        return None
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within [0, 100], got {q}")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:  # imported here: the load generator is a plain client and may run where torch is absent
        import torch
    except ImportError:
        return f"{cpu}, {os.cpu_count()} cores, {_memory_gib()}"
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{cpu}, {os.cpu_count()} cores, {_memory_gib()}, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), {gpu}")


def _memory_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / (1 << 20):.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return "memory unknown"


def random_checkpoint(size: str, stop_after: int | None = None) -> Path:
    """Write (once) and return a random checkpoint of ``size`` for benchmarks."""
    from engine.tiny import write_tiny_checkpoint

    tag = f"{size}-stop{stop_after if stop_after is not None else 'default'}"
    out = CACHE / tag
    if not (out / "model.safetensors").exists():
        print(f"writing {size} random checkpoint to {out} ...", flush=True)
        write_tiny_checkpoint(out, size=size, stop_after=stop_after, with_codec=True)
    return out
