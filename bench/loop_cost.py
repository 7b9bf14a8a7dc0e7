"""The gateway's event-loop CPU per second of audio streamed: how much audio one process can carry.

    python bench/loop_cost.py [--size tiny|full | --checkpoint DIR] [--backend torch] [--agents 16] [--duration 20] \\
        [--config deflate:GEPARD_WS_COMPRESSION=true --config plain:GEPARD_WS_COMPRESSION=false] [--rounds 2] [--out FILE]

Everything the gateway does for a stream outside the engine and the codec runs on one thread,
uvicorn's event loop: reading and validating text, JSON, base64, WebSocket framing (and
permessage-deflate when it is on), admission, metrics, logs. The engine and the codec run in threads
of their own (vLLM's engine core in a process of its own), so a faster device speeds them up but
not the loop. ``1000 / (loop ms per audio second)`` is the aggregate xRT at which the loop would
never rest: the ceiling of one process whatever the GPU.

For each ``--config NAME:VAR=VALUE[,VAR=VALUE...]`` the script starts ``gepard serve`` on a random
checkpoint with those variables, warms it up, drives it with bench/loadgen.py's agents (whose
websockets client offers permessage-deflate, as the Cartesia SDK and pipecat do) and reads, over
the measured level:

    loop ms/audio s     CPU time of the server's main thread (/proc/PID/task/PID/stat)
    process ms/audio s  CPU time of the whole server process (/proc/PID/stat)
    out kB/audio s      bytes the process wrote (/proc/PID/io wchar: the WebSocket frames, and logs)
    audio s             gepard_audio_seconds_total from /metrics

Linux only (/proc). The agents run in this process, beside the server: on a small machine they take
CPU from it, which changes throughput but not the per-audio-second costs. A machine's speed can drift
by a fifth over hours (seen on a shared 2-core VM): compare configs run side by side, and use
``--rounds`` to interleave them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import loadgen  # noqa: E402
from bench._common import machine, random_checkpoint  # noqa: E402

DEFAULT_CONFIGS = ("deflate:GEPARD_WS_COMPRESSION=true", "plain:GEPARD_WS_COMPRESSION=false")
READY_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Config:
    name: str
    env: dict[str, str] = field(default_factory=dict)


def parse_config(text: str) -> Config:
    """``NAME:VAR=VALUE[,VAR=VALUE...]`` (``NAME`` alone: the defaults). A comma starts a new
    assignment only before ``GEPARD_``, so list values keep theirs (``GEPARD_CHUNK_SCHEDULE=2,4,8,32``)."""
    name, _, assignments = text.partition(":")
    if not name:
        raise ValueError(f"config {text!r}: expected NAME:VAR=VALUE[,VAR=VALUE...]")
    env: dict[str, str] = {}
    for item in filter(None, (a.strip() for a in re.split(r",(?=\s*GEPARD_)", assignments))):
        var, eq, value = item.partition("=")
        if not eq or not var.startswith("GEPARD_"):
            raise ValueError(f"config {text!r}: {item!r} is not GEPARD_VAR=VALUE")
        env[var] = value
    return Config(name, env)


def run_order(configs: Sequence[Config], rounds: int) -> list[Config]:
    """Every config once per round, rounds one after another (a, b, a, b): drift hits all alike."""
    return [config for _ in range(max(rounds, 1)) for config in configs]


@dataclass(frozen=True)
class Usage:
    """Counters of one server process at one moment."""

    loop_cpu_s: float
    process_cpu_s: float
    written_bytes: int
    audio_s: float

    def __sub__(self, other: "Usage") -> "Usage":
        return Usage(self.loop_cpu_s - other.loop_cpu_s, self.process_cpu_s - other.process_cpu_s,
                     self.written_bytes - other.written_bytes, self.audio_s - other.audio_s)


def cpu_seconds(stat: str, ticks_per_s: float) -> float:
    """utime + stime of a /proc/.../stat line (the name in parentheses may hold spaces and ')')."""
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / ticks_per_s  # fields 14 and 15 of proc(5)


def written_bytes(io: str) -> int:
    for line in io.splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise ValueError("no wchar line in /proc/PID/io")


def audio_seconds(metrics: str) -> float:
    """The sum of ``gepard_audio_seconds_total`` over its routes."""
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("gepard_audio_seconds_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def usage(pid: int, base_url: str, metrics_token: Optional[str]) -> Usage:
    ticks = os.sysconf("SC_CLK_TCK")
    proc = Path(f"/proc/{pid}")
    headers = {"Authorization": f"Bearer {metrics_token}"} if metrics_token else {}
    metrics = httpx.get(base_url + "/metrics", headers=headers, timeout=10).raise_for_status().text
    return Usage(cpu_seconds((proc / "task" / str(pid) / "stat").read_text(), ticks),
                 cpu_seconds((proc / "stat").read_text(), ticks),
                 written_bytes((proc / "io").read_text()), audio_seconds(metrics))


@dataclass
class Result:
    config: Config
    agents: int
    usage: Usage
    summary: dict

    @property
    def loop_ms_per_audio_s(self) -> float:
        return 1000 * self.usage.loop_cpu_s / self.usage.audio_s

    @property
    def process_ms_per_audio_s(self) -> float:
        return 1000 * self.usage.process_cpu_s / self.usage.audio_s

    @property
    def out_kb_per_audio_s(self) -> float:
        return self.usage.written_bytes / 1000 / self.usage.audio_s

    def row(self) -> str:
        return (f"{self.config.name:>12} {self.agents:6d} {self.usage.audio_s:8.1f} {self.summary['xrt']:6.2f} "
                f"{self.loop_ms_per_audio_s:12.2f} {1000 / self.loop_ms_per_audio_s:10.0f} "
                f"{self.process_ms_per_audio_s:14.1f} {self.out_kb_per_audio_s:10.1f}")


HEADER = (f"{'config':>12} {'agents':>6} {'audio s':>8} {'xRT':>6} {'loop ms/as':>12} {'loop max':>10} "
          f"{'process ms/as':>14} {'out kB/as':>10}")


class ServerProcess:
    """``gepard serve`` with the config's environment, on a free loopback port."""

    def __init__(self, model: Path, port: int, env: dict[str, str], log: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        full_env = {**os.environ, "GEPARD_LOG_LEVEL": "WARNING", **env}
        self.metrics_token = full_env.get("GEPARD_METRICS_TOKEN")
        self._log = log.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "api.cli", "serve", "--model", str(model),
                                      "--host", "127.0.0.1", "--port", str(port)],
                                     cwd=Path(__file__).resolve().parent.parent, env=full_env,
                                     stdout=self._log, stderr=subprocess.STDOUT)

    def log_tail(self, lines: int = 20) -> str:
        self._log.flush()
        return "\n".join(Path(self._log.name).read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gepard serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"gepard serve not ready after {READY_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load(url: str, agents: int, duration_s: float, ramp_s: float) -> dict:
    cfg = loadgen.LoadConfig(url=url, concurrency=[agents], duration_s=duration_s, ramp_s=ramp_s, grace_s=15.0)
    return asyncio.run(loadgen.run(cfg))[0].summary


def measure(config: Config, model: Path, agents: int, duration_s: float, ramp_s: float, log_dir: Path) -> Result:
    server = ServerProcess(model, free_port(), config.env, log_dir / f"{config.name}.log")
    try:
        server.wait_ready()
        load(server.url, 1, 2.0, 0.0)  # warm-up: first-request costs stay out of the figures
        before = usage(server.proc.pid, server.url, server.metrics_token)
        summary = load(server.url, agents, duration_s, ramp_s)
        spent = usage(server.proc.pid, server.url, server.metrics_token) - before
        if spent.audio_s <= 0:
            raise RuntimeError(f"config {config.name}: no audio was produced:\n{server.log_tail()}")
    finally:
        server.stop()
    return Result(config, agents, spent, summary)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=("tiny", "full"), default="tiny")
    p.add_argument("--checkpoint", type=Path,
                   help="serve this checkpoint instead of the bench cache's random one of --size (a GPU session "
                        "serves its gpu-full, whose codec is decoder-only: add GEPARD_CODEC_IMPL=torch to the config)")
    p.add_argument("--backend", choices=("torch", "vllm", "auto"), default="torch")
    p.add_argument("--agents", type=int, default=16)
    p.add_argument("--duration", type=float, default=20.0, help="seconds of load after the ramp")
    p.add_argument("--ramp", type=float, default=3.0)
    p.add_argument("--config", action="append", help=f"NAME:VAR=VALUE,... (repeatable; default {' '.join(DEFAULT_CONFIGS)})")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the configs this many times, interleaved (a, b, a, b): a machine's speed drifts over hours")
    p.add_argument("--out", type=Path, help="JSON results")
    args = p.parse_args(argv)
    try:
        args.configs = [parse_config(c) for c in (args.config or DEFAULT_CONFIGS)]
    except ValueError as exc:
        p.error(str(exc))
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if not Path("/proc/self/io").exists():
        sys.exit("bench/loop_cost.py needs Linux's /proc (thread CPU time and bytes written per process)")
    if args.checkpoint is not None and not (args.checkpoint / "model.safetensors").is_file():
        sys.exit(f"bench/loop_cost.py: --checkpoint {args.checkpoint}: no model.safetensors there")
    configs = args.configs
    model = args.checkpoint or random_checkpoint(args.size)
    described = f"checkpoint {args.checkpoint}" if args.checkpoint else f"{args.size} random checkpoint"
    print(f"machine: {machine()}\nmodel: {described}, backend {args.backend}, "
          f"{args.agents} agents, {args.ramp:g} s ramp + {args.duration:g} s")
    print(HEADER, flush=True)
    results = []
    with tempfile.TemporaryDirectory() as work:
        for config in run_order(configs, args.rounds):
            # each server gets a voice store of its own, out of the checkout, unless the config names one
            env = {"GEPARD_BACKEND": args.backend, "GEPARD_DATA_DIR": str(Path(work) / f"{config.name}-data"), **config.env}
            result = measure(Config(config.name, env), model, args.agents, args.duration, args.ramp, Path(work))
            results.append(result)
            print(result.row(), flush=True)
    print("loop ms/as: event-loop CPU ms per audio second; loop max: the xRT at which the loop never rests")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": machine(), "size": args.size, "backend": args.backend,
                                        "checkpoint": str(args.checkpoint) if args.checkpoint else None, "results": [
            {"config": asdict(r.config), "agents": r.agents, **asdict(r.usage),
             "loop_ms_per_audio_s": r.loop_ms_per_audio_s, "process_ms_per_audio_s": r.process_ms_per_audio_s,
             "out_kb_per_audio_s": r.out_kb_per_audio_s, "load": r.summary} for r in results]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
