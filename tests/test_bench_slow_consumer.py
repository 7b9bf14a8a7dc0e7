"""bench/slow_consumer.py against a server it did not start (--url): with --pid it samples that
process's RSS, without it it says memory is not measured (no NaN figures), on a real gateway on
loopback (tiny checkpoint, torch codec) whose clients never read."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """A gateway in this process (so its RSS is this pid's) on a tiny checkpoint with the torch codec
    (seconds to write, where NeMo's takes ~20 s here); it gives up on a client that does not read
    after 1 s."""
    from codec_worker.torchcodec.random import write_random_decoder_codec
    from engine.tiny import CODEC_FILE, write_tiny_checkpoint

    ckpt = write_tiny_checkpoint(tmp_path_factory.mktemp("ckpt"), size="tiny", seed=0, with_codec=False)
    write_random_decoder_codec(ckpt / CODEC_FILE, size="tiny")
    settings = gateway_settings(ckpt, tmp_path_factory.mktemp("data"), codec_impl="torch", ws_send_timeout_s=1.0)
    with LiveServer(settings) as live:
        yield live


def slow_consumer(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "bench/slow_consumer.py", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, out, err


def test_a_server_given_by_url_has_its_memory_sampled_with_pid_and_none_made_up_without(server, tmp_path):
    with_pid, without = tmp_path / "with-pid.json", tmp_path / "without.json"
    # both at once (each waits 5 s past its clients for the server to free their slots)
    runs = [slow_consumer("--url", server.ws_url, "--pid", str(os.getpid()), "--clients", "1", "--duration", "1.5",
                          "--send-timeout", "0", "--json", str(with_pid)),
            slow_consumer("--url", server.ws_url, "--clients", "1", "--duration", "1.5", "--send-timeout", "0",
                          "--json", str(without))]
    (code, out, err), (code_without, out_without, err_without) = (finish(proc) for proc in runs)

    assert code == 0, out + err[-3000:]
    assert "nan" not in out.lower(), out
    result = json.loads(with_pid.read_text())
    assert result["opened"] >= 1
    assert result["baseline_mib"] > 0 and result["peak_mib"] > 0 and result["after_mib"] > 0
    assert all(rss is not None and not math.isnan(rss) for _, rss, _ in result["samples"])
    assert f"RSS: baseline {result['baseline_mib']:.0f} MiB" in out

    assert code_without == 0, out_without + err_without[-3000:]
    assert "RSS not measured: --url names a server this run did not start" in out_without
    assert "nan" not in out_without.lower() and "RSS: baseline" not in out_without, out_without
    assert json.loads(without.read_text())["baseline_mib"] is None


def test_pid_needs_url_and_a_process_here():
    code, _, err = finish(slow_consumer("--pid", str(os.getpid())))
    assert code == 2 and "--pid names the process of a server given by --url" in err
    code, _, err = finish(slow_consumer("--url", "ws://127.0.0.1:9", "--pid", "999999999"))
    assert code == 2 and "--pid 999999999: no such process on this machine" in err
