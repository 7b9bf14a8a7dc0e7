"""bench/gpu.sh without a GPU: it refuses clearly, and its dry runs print the commands a GPU machine
would run (no network: the machine's own python, torch backend only; network: vLLM and NeMo from
PyPI, both backends), every benchmark command parsing as bench/pipeline.py's own arguments.
Also the pipeline benchmark's playback maths.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from bench.pipeline import Row, headline, parse_args, underrun

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu.sh"


def gpu_sh(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GEPARD_", "VLLM_"))}
    base.update({"GEPARD_GPU_SMI": str(tmp_path / "no-nvidia-smi"),  # no GPU, even on a machine with one
                 "GEPARD_BENCH_DIR": str(tmp_path / "bench"), "GEPARD_GPU_VENV": str(tmp_path / "venv")})
    base.update(env)
    return subprocess.run(["bash", str(SCRIPT), *args], env=base, capture_output=True, text=True, timeout=60)


def commands(out: str) -> list[list[str]]:
    return [shlex.split(line[2:]) for line in out.splitlines() if line.startswith("+ ")]


def pipeline_args(cmd: list[str]) -> list[str]:
    at = next(i for i, word in enumerate(cmd) if word.endswith("bench/pipeline.py"))
    return cmd[at + 1 :]


def test_refuses_without_a_gpu(tmp_path):
    done = gpu_sh(tmp_path)
    assert done.returncode == 3
    assert "no NVIDIA GPU found" in done.stderr and "run it on a machine with one" in done.stderr
    assert done.stdout == ""  # nothing was started: not even the network probe
    assert not (tmp_path / "bench").exists() and not (tmp_path / "venv").exists()


def test_bad_usage_is_exit_2(tmp_path):
    assert gpu_sh(tmp_path, "--fast").returncode == 2
    done = gpu_sh(tmp_path, GEPARD_GPU_NETWORK="maybe")
    assert done.returncode == 2 and "GEPARD_GPU_NETWORK must be auto, yes or no" in done.stderr


def test_dry_run_without_network_uses_the_machines_python_and_the_torch_backend(tmp_path):
    done = gpu_sh(tmp_path, "--dry-run", GEPARD_GPU_NETWORK="no", PYTHON="/opt/py312/bin/python3",
                  GEPARD_TORCH_PATH="fast")
    assert done.returncode == 0, done.stderr
    assert "dry run: no NVIDIA GPU here" in done.stdout
    cmds = commands(done.stdout)
    # what it needs is checked first (exit 4 naming missing wheels), then the fast path's identity check
    assert cmds[0] == ["/opt/py312/bin/python3", str(ROOT / "bench/pipeline.py"), "--check"]
    assert cmds[1] == ["/opt/py312/bin/python3", str(ROOT / "bench/torch_fast.py"), "--check"]
    (bench,) = cmds[2:]
    assert bench[0] == "env" and "/opt/py312/bin/python3" in bench
    args = parse_args(pipeline_args(bench))
    assert (args.backend, args.size, args.dtype, args.torch_path) == ("torch", "full", "bfloat16", "fast")
    assert args.concurrency == "1,32,128,256,512,1024" and args.frames == 200
    assert args.chunk_schedule == ["default", "8,32", "4,16"] and args.compare_levels == "1"
    assert args.json == tmp_path / "bench" / "gpu-torch.json" and 0 < args.budget_s < 450
    # nothing installed, no vLLM, nothing run or written
    assert not any("pip" in cmd for cmd in cmds)
    assert not any(word == "vllm" or word.startswith("vllm==") for cmd in cmds for word in cmd)
    assert not (tmp_path / "bench").exists() and not (tmp_path / "venv").exists()


def test_dry_run_with_network_installs_vllm_and_measures_both_backends(tmp_path):
    done = gpu_sh(tmp_path, "--dry-run", GEPARD_GPU_NETWORK="yes", GEPARD_VLLM_RUNNER="v2",
                  GEPARD_CHUNK_SCHEDULE="3,6,32", GEPARD_GPU_COMPARE_SCHEDULES="")
    assert done.returncode == 0, done.stderr
    cmds = commands(done.stdout)
    python = str(tmp_path / "venv" / "bin" / "python")
    installs = [cmd for cmd in cmds if cmd[:4] == [python, "-m", "pip", "install"]]
    assert any("vllm==0.32.0" in cmd and "nemo_toolkit[core]==3.0.0" in cmd for cmd in installs)
    assert any(cmd[-3:] == ["--no-deps", "-e", str(ROOT)] for cmd in installs)  # the vLLM plugin entry point
    runs = [parse_args(pipeline_args(cmd)) for cmd in cmds if any(w.endswith("bench/pipeline.py") for w in cmd)]
    runs = [a for a in runs if not a.check]
    assert [a.backend for a in runs] == ["torch", "vllm"]
    assert runs[1].vllm_runner == "v2" and all(a.chunk_schedule == ["3,6,32"] for a in runs)
    vllm_cmd = next(cmd for cmd in cmds if "--backend" in cmd and cmd[cmd.index("--backend") + 1] == "vllm")
    assert "VLLM_PLUGINS=gepard" in vllm_cmd


def test_underrun_counts_what_a_listener_waits_at_the_seams():
    # (arrival s, audio s): the 2nd piece is due at 0.1 + 0.2 = 0.3 and comes at 0.5 (0.2 s gap);
    # the 3rd is due at 0.5 + 0.3 = 0.8 and comes at 0.7 (in time)
    assert underrun([(0.1, 0.2), (0.5, 0.3), (0.7, 1.0)]) == pytest.approx(0.2)
    assert underrun([(0.1, 1.0), (0.2, 1.0)]) == 0.0 and underrun([]) == 0.0


def test_headline_names_one_stream_and_the_most_streams_kept_real_time():
    def row(c, rtf_p99, schedule="2,4,8,32"):
        return Row("torch", "fast", "full", schedule, c, 200, 1.0, c / rtf_p99, rtf_p99 / 2, rtf_p99, 20.0, 25.0, 5.0,
                   0.0, 0.0, 1.0, 2.0, 10, 0.1, 0.1)

    head = headline([row(1, 0.02), row(1, 0.5, "8,32"), row(32, 0.3), row(256, 0.9), row(512, 1.4)])
    assert head["one_stream"] == {"ttfa_ms": 20.0, "ttff_ms": 5.0, "rtf": 0.01, "schedule": "2,4,8,32"}
    assert head["max_realtime_concurrency"] == 256
