"""bench/loop_cost.py: what it reads from /proc and /metrics, its configs, and one real short run
against `gepard serve` (the figure it reports must come from the server's own main thread)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from bench.loop_cost import (Config, Usage, audio_seconds, cpu_seconds, main, measure, parse_config, run_order,
                              written_bytes)


def test_cpu_seconds_reads_utime_and_stime_after_a_name_with_spaces_and_parentheses():
    # proc(5): pid (comm) state ppid ... field 14 utime, 15 stime, in clock ticks
    rest = ["S"] + [str(i) for i in range(4, 14)] + ["250", "50"] + ["0"] * 30
    stat = "4242 (gepard (serve) x) " + " ".join(rest)
    assert cpu_seconds(stat, 100) == pytest.approx(3.0)


def test_cpu_seconds_of_this_thread_agree_with_the_interpreters_own_thread_clock():
    ticks = os.sysconf("SC_CLK_TCK")
    stat = Path(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/stat")
    before, clock = cpu_seconds(stat.read_text(), ticks), time.thread_time()
    while time.thread_time() - clock < 0.3:  # 0.3 s of CPU on this thread
        sum(range(10_000))
    spent = cpu_seconds(stat.read_text(), ticks) - before
    # /proc counts in clock ticks (10 ms at 100 Hz): the two clocks agree within a few of them
    assert spent == pytest.approx(time.thread_time() - clock, abs=0.05)


def test_written_bytes_and_audio_seconds_come_from_their_lines():
    assert written_bytes("rchar: 10\nwchar: 12345\nsyscr: 3\n") == 12345
    with pytest.raises(ValueError):
        written_bytes("rchar: 10\n")
    metrics = "\n".join([
        "# HELP gepard_audio_seconds_total Seconds of audio produced",
        "# TYPE gepard_audio_seconds_total counter",
        'gepard_audio_seconds_total{route="websocket"} 12.5',
        'gepard_audio_seconds_total{route="bytes"} 2.25',
        'gepard_audio_seconds_created{route="bytes"} 1.7e+09',
        'gepard_requests_total{route="websocket"} 9.0',
    ])
    assert audio_seconds(metrics) == 14.75


def test_usage_subtracts_field_by_field():
    assert Usage(3.0, 10.0, 500, 20.0) - Usage(1.0, 4.0, 100, 5.0) == Usage(2.0, 6.0, 400, 15.0)


@pytest.mark.parametrize(
    ("text", "config"),
    [
        ("plain", Config("plain", {})),
        ("deflate:GEPARD_WS_COMPRESSION=true", Config("deflate", {"GEPARD_WS_COMPRESSION": "true"})),
        ("x:GEPARD_A=1, GEPARD_B=two", Config("x", {"GEPARD_A": "1", "GEPARD_B": "two"})),
        ("gpu:GEPARD_CHUNK_SCHEDULE=2,4,8,32,GEPARD_WS_COMPRESSION=false",
         Config("gpu", {"GEPARD_CHUNK_SCHEDULE": "2,4,8,32", "GEPARD_WS_COMPRESSION": "false"})),
    ],
)
def test_configs_are_named_variable_sets(text, config):
    assert parse_config(text) == config


def test_rounds_interleave_the_configs():
    a, b = Config("a"), Config("b")
    assert run_order([a, b], 2) == [a, b, a, b]
    assert run_order([a, b], 0) == run_order([a, b], 1) == [a, b]


@pytest.mark.parametrize("text", [":GEPARD_A=1", "x:GEPARD_A", "x:PATH=/tmp"])
def test_bad_configs_are_refused(text, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--config", text])
    assert exit_.value.code == 2
    assert "config" in capsys.readouterr().err


def test_a_server_that_does_not_start_is_reported_with_its_own_words(tiny_ckpt_dir, tmp_path):
    with pytest.raises(RuntimeError, match=r"(?s)gepard serve exited with 2:.*GEPARD_LOG_FORMAT"):
        measure(Config("broken", {"GEPARD_LOG_FORMAT": "xml", "GEPARD_DATA_DIR": str(tmp_path / "data")}),
                tiny_ckpt_dir, agents=1, duration_s=1.0, ramp_s=0.0, log_dir=tmp_path)


def test_a_short_run_measures_the_servers_main_thread_per_audio_second(tiny_ckpt_dir, tmp_path):
    result = measure(Config("plain", {"GEPARD_BACKEND": "torch", "GEPARD_DATA_DIR": str(tmp_path / "data")}),
                     tiny_ckpt_dir, agents=2, duration_s=3.0, ramp_s=0.0, log_dir=tmp_path)
    spent = result.usage
    assert spent.audio_s > 1.0 and result.summary["streams"] >= 2
    # the loop's thread is one of the process's: it cannot have spent more CPU than the process
    assert 0 < spent.loop_cpu_s < spent.process_cpu_s
    # the chunks went out as base64 in JSON: at least 4/3 of the PCM's 2 bytes per sample at 22.05 kHz
    assert result.out_kb_per_audio_s > 22.05 * 2 * 4 / 3
    assert result.loop_ms_per_audio_s == pytest.approx(1000 * spent.loop_cpu_s / spent.audio_s)
    assert "plain" in result.row()


def test_a_checkpoint_without_weights_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no model.safetensors there"):
        main(["--checkpoint", str(tmp_path), "--config", "x"])
