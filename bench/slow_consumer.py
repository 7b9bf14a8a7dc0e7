"""Server memory and generation slots while clients stop reading (issue 9, backpressure).

    python bench/slow_consumer.py [--clients 20] [--duration 60] [--send-timeout 10] [--url ws://... [--pid PID]]

Starts ``gepard serve`` on the tiny random checkpoint (torch backend, CPU) as its own process
unless ``--url`` names a running server, then opens ``--clients`` WebSocket connections whose
receive buffer is 4 KiB and which never read. Each keeps sending long texts on fresh contexts
(48 kHz float32 output, the largest audio per character) for ``--duration`` seconds. Every second
it samples the server's RSS (from /proc: the server it started, or with ``--url`` the local process
``--pid`` names; without either memory is not measured) and the generation slots in use
(``gepard_generations_in_flight`` from /metrics). A server that buffers audio for clients that do
not read grows without bound; one that applies backpressure stays flat and frees the slots after
its send timeout.
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
import uuid
from pathlib import Path
from typing import Optional
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

from bench._common import machine, random_checkpoint  # noqa: E402

FORMAT = {"container": "raw", "encoding": "pcm_f32le", "sample_rate": 48000}
TEXT = " ".join(f"This is sentence number {i} of a long answer." for i in range(40))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss(pid: Optional[int]) -> Optional[float]:
    """The server's RSS in MiB; None when no process of it is known here (--url without --pid)."""
    return None if pid is None else rss_mib(pid)


def _mib(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.0f}"


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    return float(match.group(1)) if match else float("nan")


async def voice_id(http_url: str) -> str:
    async with httpx.AsyncClient(timeout=10) as client:
        voices = (await client.get(http_url + "/voices")).json()
    items = voices.get("data", voices) if isinstance(voices, dict) else voices
    return items[0]["id"]


async def silent_client(ws_url: str, voice: str, stop_at: float) -> int:
    """Send long texts on new contexts until ``stop_at``, never reading; returns contexts opened."""
    host, port = urlparse(ws_url).hostname, urlparse(ws_url).port
    opened = 0
    while time.monotonic() < stop_at:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, port))
        sock.setblocking(False)
        try:
            async with connect(ws_url + "/tts/websocket", sock=sock, max_queue=1, close_timeout=1) as ws:
                while time.monotonic() < stop_at:
                    msg = {"context_id": str(uuid.uuid4()), "model_id": "sonic-3", "transcript": TEXT[:1800],
                           "voice": voice, "output_format": FORMAT, "continue": False}
                    async with asyncio.timeout(5):  # not wait_for: on 3.11 it can lose a cancel
                        await ws.send(json.dumps(msg))
                    opened += 1
                    await asyncio.sleep(0.5)
        except Exception:  # closed by the server for not reading: reconnect, as a careless client would
            await asyncio.sleep(0.5)
        finally:
            sock.close()
    return opened


async def run(args: argparse.Namespace) -> None:
    server = None
    if args.url:
        ws_url, pid = args.url.rstrip("/"), args.pid  # a server elsewhere has no RSS to read here
    else:
        ckpt = random_checkpoint("tiny")
        port = free_port()
        env = {**os.environ, "GEPARD_MODEL": str(ckpt), "GEPARD_BACKEND": "torch", "GEPARD_DEVICE": "cpu",
               "GEPARD_DTYPE": "float32", "GEPARD_PORT": str(port), "GEPARD_DATA_DIR": tempfile.mkdtemp(),
               "GEPARD_WS_SEND_TIMEOUT_S": str(args.send_timeout), "GEPARD_LOG_LEVEL": "WARNING",
               "VLLM_PLUGINS": "gepard", "HF_HUB_OFFLINE": "1"}
        server = subprocess.Popen([sys.executable, "-m", "api.cli", "serve"], env=env,
                                  cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.DEVNULL)
        ws_url, pid = f"ws://127.0.0.1:{port}", server.pid
    http_url = ws_url.replace("ws", "http", 1)
    # a server with GEPARD_METRICS_TOKEN set answers /metrics only to it (README, Metrics)
    token = os.environ.get("GEPARD_METRICS_TOKEN", "").strip()
    scrape_headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            for _ in range(600):
                try:
                    if (await client.get(http_url + "/")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
            voice = await voice_id(http_url)
            baseline = rss(pid)
            print(f"machine: {machine()}")
            print(f"{args.clients} clients that never read, {args.duration:.0f} s, send timeout {args.send_timeout:g} s")
            print(f"baseline RSS {_mib(baseline)} MiB" if pid is not None else
                  "RSS not measured: --url names a server this run did not start; --pid PID reads that process's")
            stop_at = time.monotonic() + args.duration
            clients = [asyncio.create_task(silent_client(ws_url, voice, stop_at)) for _ in range(args.clients)]
            samples = []
            t0 = time.monotonic()
            while time.monotonic() < stop_at:
                await asyncio.sleep(1.0)
                text = (await client.get(http_url + "/metrics", headers=scrape_headers)).text
                sample = (time.monotonic() - t0, rss(pid), metric(text, "gepard_generations_in_flight"))
                samples.append(sample)
                if int(sample[0]) % 10 == 0:
                    print(f"t={sample[0]:5.1f} s  RSS {_mib(sample[1]):>7} MiB  generations in flight {sample[2]:.0f}")
            opened = sum(await asyncio.gather(*clients))
            await asyncio.sleep(args.send_timeout + 5)
            text = (await client.get(http_url + "/metrics", headers=scrape_headers)).text
            after = rss(pid)
            peak = max((s[1] for s in samples if s[1] is not None), default=None)
            print(f"contexts opened by the silent clients: {opened}")
            if baseline is not None and peak is not None and after is not None:
                print(f"RSS: baseline {baseline:.0f} MiB, peak {peak:.0f} MiB (+{peak - baseline:.0f}), "
                      f"after the clients left {after:.0f} MiB (+{after - baseline:.0f})")
            print(f"generation slots in use after they left: {metric(text, 'gepard_generations_in_flight'):.0f}")
            if args.json:
                Path(args.json).write_text(json.dumps({"machine": machine(), "baseline_mib": baseline, "peak_mib": peak,
                                                       "after_mib": after, "opened": opened, "samples": samples}))
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--send-timeout", type=float, default=10.0)
    parser.add_argument("--url", help="a running server (ws://host:port); default: start one on the tiny checkpoint")
    parser.add_argument("--pid", type=int,
                        help="with --url: that server's process id on this machine, whose RSS is sampled (e.g. a "
                             "second run against the same server); without it memory is not measured")
    parser.add_argument("--json", help="write the samples here")
    args = parser.parse_args()
    if args.pid is not None and not args.url:
        parser.error("--pid names the process of a server given by --url (without --url this run starts its own)")
    if args.pid is not None and not Path(f"/proc/{args.pid}/status").is_file():
        parser.error(f"--pid {args.pid}: no such process on this machine (its RSS is read from /proc)")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
