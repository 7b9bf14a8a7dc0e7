"""bench/gpu.sh without a GPU: it refuses clearly, and its dry runs print the commands a GPU machine
would run (no network: the machine's own python, torch backend only; network: vLLM and NeMo from
PyPI, both backends), every benchmark command parsing as bench/pipeline.py's own arguments.
bench/gpu_session.sh, which runs all of a GPU session's benchmarks as one capped command, likewise.
Also the pipeline benchmark's playback maths.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
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
    assert args.chunk_schedule == ["default", "1,2,4,8,32", "4,16"] and args.compare_levels == "1"
    assert args.json == tmp_path / "bench" / "gpu-torch.json" and 0 < args.budget_s < 450
    assert args.rounds == 1 and args.one_stream_rounds == 5  # the one-stream targets rest on 5 bursts, not 1
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


def test_a_dry_run_with_network_auto_probes_nothing(tmp_path):
    """A dry run runs nothing: with GEPARD_GPU_NETWORK=auto (the default) the PyPI probe is shown as
    a command, not run, and the commands without network follow."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    probed = tmp_path / "probed"
    python3 = bin_dir / "python3"  # answers the probe as a machine with network would, and says it ran
    python3.write_text(f"#!/bin/sh\ntouch {probed}\nexit 0\n")
    python3.chmod(0o755)
    done = gpu_sh(tmp_path, "--dry-run", PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON="/opt/py312/bin/python3")
    assert done.returncode == 0, done.stderr
    assert not probed.exists()
    cmds = commands(done.stdout)
    assert cmds[0][:2] == ["python3", "-c"] and "urlopen('https://pypi.org/simple/vllm/'" in cmds[0][2]
    assert "the network probe above was not run" in done.stdout and "network: no;" in done.stdout
    assert cmds[1] == ["/opt/py312/bin/python3", str(ROOT / "bench/pipeline.py"), "--check"]
    assert not any("pip" in cmd for cmd in cmds)


def test_underrun_counts_what_a_listener_waits_at_the_seams():
    # (arrival s, audio s): the 2nd piece is due at 0.1 + 0.2 = 0.3 and comes at 0.5 (0.2 s gap);
    # the 3rd is due at 0.5 + 0.3 = 0.8 and comes at 0.7 (in time)
    assert underrun([(0.1, 0.2), (0.5, 0.3), (0.7, 1.0)]) == pytest.approx(0.2)
    assert underrun([(0.1, 1.0), (0.2, 1.0)]) == 0.0 and underrun([]) == 0.0


def test_headline_names_one_stream_and_the_most_streams_kept_real_time():
    def row(c, rtf_p99, schedule="2,4,8,32"):
        return Row("torch", "fast", "full", schedule, c, 200, 1.0, c / rtf_p99, rtf_p99 / 2, rtf_p99, 20.0, 25.0, 5.0,
                   0.0, 0.0, 1.0, 2.0, 10, 0.1, 0.1, n=c)

    head = headline([row(1, 0.02), row(1, 0.5, "8,32"), row(32, 0.3), row(256, 0.9), row(512, 1.4)])
    assert head["one_stream"] == {"ttfa_ms": 20.0, "ttff_ms": 5.0, "rtf": 0.01, "schedule": "2,4,8,32", "n": 1,
                                  "failed": 0}
    assert head["max_realtime_concurrency"] == 256


# -- bench/gpu_session.sh: the whole GPU session as one capped command ---------------------------------

SESSION = ROOT / "bench" / "gpu_session.sh"


def gpu_session(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GEPARD_", "VLLM_")) and k != "OUT"}
    base.update({"GEPARD_GPU_SMI": str(tmp_path / "no-nvidia-smi"), "GEPARD_BENCH_DIR": str(tmp_path / "bench")})
    base.update(env)
    return subprocess.run(["bash", str(SESSION), *args], env=base, capture_output=True, text=True, timeout=60)


def test_the_sessions_help_is_its_whole_header(tmp_path):
    done = gpu_session(tmp_path, "--help")
    header = SESSION.read_text().split("\nset -uo pipefail", 1)[0].splitlines()[1:]
    assert done.returncode == 0 and done.stdout.splitlines() == header
    assert "Cap GEPARD_SESSION_COMPILED_S" in done.stdout and done.stdout.rstrip().endswith("left in the worst case.")


def test_the_session_refuses_without_a_gpu_and_on_bad_caps(tmp_path):
    done = gpu_session(tmp_path, str(tmp_path / "out"))
    assert done.returncode == 3 and "no NVIDIA GPU found" in done.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "bench").exists()
    assert gpu_session(tmp_path, "--fast").returncode == 2
    bad = gpu_session(tmp_path, "--dry-run", GEPARD_SESSION_STEP_S="1m")
    assert bad.returncode == 2 and "whole seconds" in bad.stderr


def test_the_session_fits_one_device_call_and_runs_what_each_part_parses(tmp_path):
    from bench import torch_codec, torch_fast

    # on the device machine ($OUT set) the parts write to a folder of their own, packed into $OUT
    out, device_out = tmp_path / "out", tmp_path / "device-out"
    full = tmp_path / "bench" / "gpu-full"  # as part 1 leaves it: parts 2 and 3 reuse it
    full.mkdir(parents=True)
    (full / "model.safetensors").write_bytes(b"")
    wheels = tmp_path / "whl"
    wheels.mkdir()
    (wheels / "starlette-1.0-py3-none-any.whl").write_bytes(b"")
    done = gpu_session(tmp_path, "--dry-run", PYTHON="/opt/py312/bin/python3", OUT=str(device_out),
                       GEPARD_SESSION_DIR=str(out), GEPARD_SESSION_WHEELS=str(wheels))
    assert done.returncode == 0, done.stderr
    assert f"out: {out} (packed into {device_out / 'gepard-session.tgz'} after every part)" in done.stdout
    cmds = commands(done.stdout)
    caps = [int(cmd[1]) for cmd in cmds]
    assert all(cmd[0] == "timeout" for cmd in cmds) and len(cmds) == 7
    # the device tool runs one command for at most 600 s: the parts leave room for starting up
    assert sum(caps) <= 570
    # parts 5c, 5b, 5d, 5e, 3, 6 and 7 only get the time the others leave: when each takes its whole
    # cap, that is 70 s, and they go to the codec carrying state first (it decides a default)
    assert "part 05b-one-stream skipped: 0s left of GEPARD_SESSION_TOTAL_S=570s, it needs 30" in done.stdout
    assert "part 05d-prefill skipped: 0s left of GEPARD_SESSION_TOTAL_S=570s, it needs 40" in done.stdout
    assert "part 05e-priority skipped: 0s left of GEPARD_SESSION_TOTAL_S=570s, it needs 40" in done.stdout
    assert "part 03-compiled skipped: 0s left of GEPARD_SESSION_TOTAL_S=570s, it needs 40" in done.stdout
    assert "parts 06-wheels and 07-gateway skipped: 0s left of GEPARD_SESSION_TOTAL_S=570s" in done.stdout
    tests, pipeline, steps, profile, codec, carry, summary = (cmd[2:] for cmd in cmds)
    assert caps[5] == 70 and "--codec-carry-state" in carry  # part 5c, in what the fixed parts leave
    # 0) the suite's CUDA cases that need no vLLM
    assert tests[:3] == ["/opt/py312/bin/python3", "-m", "pytest"] and tests[-2:] == ["-k", "cuda"]
    assert str(ROOT / "tests/engine/backends/test_vllm_sampling.py") in tests
    assert str(ROOT / "tests/codec_worker/test_fused_activations.py") in tests
    assert str(ROOT / "tests/codec_worker/test_fused_state.py") in tests
    assert str(ROOT / "tests/engine/backends/test_fused_ops.py") in tests
    assert str(ROOT / "tests/engine/backends/test_cuda_streams.py") in tests  # the engine stream outranks the codec's
    assert summary == ["/opt/py312/bin/python3", str(ROOT / "bench" / "gpu_summary.py"), str(out)]
    # 1) gpu.sh offline on the machine's python, its budget inside the part's cap
    assert pipeline[-2:] == ["bash", str(ROOT / "bench" / "gpu.sh")]
    assert "GEPARD_GPU_NETWORK=no" in pipeline and "PYTHON=/opt/py312/bin/python3" in pipeline
    budget = int(next(w for w in pipeline if w.startswith("GEPARD_GPU_BUDGET_S=")).split("=")[1])
    assert budget < caps[1]
    # 2, 4) the step table with graphs, then without graphs and the profile (3, compiled, comes in
    # the time left: see the next test); 5) the codec; outputs in OUT
    fast = torch_fast.parse_args(steps[steps.index(str(ROOT / "bench/torch_fast.py")) + 1:])
    assert (fast.size, fast.batch, fast.no_graphs, fast.json) == ("full", "1,32,256", False, out / "torch_fast_bf16.json")
    assert fast.paths.split(",") == ["reference", "fast", "unfused", "overlap", "prefill-graphs"]
    assert fast.prefill_prompts == "1,8,32,64"  # where a larger GEPARD_TORCH_PREFILL_BATCH stops being free
    eager = torch_fast.parse_args(profile[profile.index(str(ROOT / "bench/torch_fast.py")) + 1:])
    assert eager.no_graphs and eager.paths == "fast" and eager.profile == out / "torch_fast_profile_b256.txt"
    # prefills are timed with graphs on (part 2); a prefill is never graphed, so part 4 skips them
    assert fast.prefills > 0 and eager.prefills == 0
    assert fast.checkpoint == eager.checkpoint == full
    c = torch_codec.parse_args(codec[codec.index(str(ROOT / "bench/torch_codec.py")) + 1:])
    assert c.size == "full" and c.json == out / "torch_codec_full.json"
    assert c.compile == ""  # its compile did not finish within the part on the H200
    assert c.carry == 64  # windowed against carrying conv state
    assert c.fused  # eager activations against one Triton kernel each
    assert c.profile == out / "torch_codec_profile.txt"  # what a decode's time goes to, kernel by kernel
    assert all("/opt/py312/bin/python3" in cmd for cmd in (steps, profile, codec, carry))
    assert not out.exists() and not device_out.exists()  # a dry run writes nothing


def test_the_gateway_parts_take_the_time_left_and_serve_part_1s_checkpoint(tmp_path):
    from bench import loop_cost

    out, wheels = tmp_path / "out", tmp_path / "whl"
    wheels.mkdir()
    (wheels / "starlette-1.0-py3-none-any.whl").write_bytes(b"")
    done = gpu_session(tmp_path, "--dry-run", str(out), PYTHON="/opt/py312/bin/python3",
                       GEPARD_SESSION_WHEELS=str(wheels), GEPARD_SESSION_PIPELINE_S="10", GEPARD_SESSION_STEP_S="10",
                       GEPARD_SESSION_PROFILE_S="10")
    assert done.returncode == 0, done.stderr
    cmds = commands(done.stdout)
    caps = [int(cmd[1]) for cmd in cmds]
    assert len(cmds) == 13 and sum(caps) <= 570
    carry, one, prefill, priority, compiled, install, gateway, summary = (cmd[2:] for cmd in cmds[-8:])
    # 570 - (70 + 10 + 10 + 10 + 60) - 15 for the summary = 395: part 5c's 90, 5b's 45, 5d's 60, 5e's 60,
    # 3's 55, then 20 for the wheels and 65 of the gateway's 150
    assert caps[-8:] == [90, 45, 60, 60, 55, 20, 65, 15]
    from bench import pipeline, torch_fast

    comp = torch_fast.parse_args(compiled[compiled.index(str(ROOT / "bench/torch_fast.py")) + 1:])
    assert comp.paths.split(",") == ["compiled", "compiled+overlap"] and not comp.no_graphs and comp.prefills > 0
    assert comp.json == out / "torch_fast_bf16_compiled.json" and comp.batch == "1,32,256"
    assert comp.checkpoint is None  # part 1 left no checkpoint in this dry run: the part writes its own

    o = pipeline.parse_args(one[one.index(str(ROOT / "bench/pipeline.py")) + 1:])
    assert (o.concurrency, o.torch_prefill_graphs, o.one_stream_rounds, o.budget_s) == ("1", True, 5, 35)
    assert o.chunk_schedule == ["default", "1,2,4,8,32"] and o.compare_levels == "1"
    assert o.json == out / "gpu-torch-prefill-graphs.json" and o.codec_carry_state == "auto"  # only the prefill changes
    p = pipeline.parse_args(carry[carry.index(str(ROOT / "bench/pipeline.py")) + 1:])
    assert (p.codec_carry_state, p.checkpoint, p.concurrency, p.budget_s) == ("yes", tmp_path / "bench" / "gpu-full",
                                                                             "1,64,256", 80)
    assert p.json == out / "gpu-torch-carry.json" and p.dtype == "bfloat16" and p.frames == 200
    assert p.torch_prefill_batch is None  # the gateway's default: only the codec changes against part 1
    q = pipeline.parse_args(prefill[prefill.index(str(ROOT / "bench/pipeline.py")) + 1:])
    assert (q.codec_carry_state, q.torch_prefill_batch, q.concurrency, q.budget_s) == ("yes", 8, "256", 50)
    assert q.json == out / "gpu-torch-prefill8.json" and q.checkpoint == p.checkpoint
    assert p.torch_stream_priority == q.torch_stream_priority == "high"  # the default
    r = pipeline.parse_args(priority[priority.index(str(ROOT / "bench/pipeline.py")) + 1:])
    assert (r.codec_carry_state, r.torch_stream_priority, r.torch_prefill_batch, r.concurrency) == ("yes", "normal", None,
                                                                                                   "256")
    assert r.json == out / "gpu-torch-normal-priority.json" and r.checkpoint == p.checkpoint
    site = install[install.index("--target") + 1]
    assert install[:4] == ["/opt/py312/bin/python3", "-m", "pip", "install"] and "--no-index" in install
    assert install[-1] == str(wheels / "starlette-1.0-py3-none-any.whl")
    assert gateway[:2] == ["env", f"PYTHONPATH={site}"]  # the wheels are seen by part 7 alone
    args = loop_cost.parse_args(gateway[gateway.index(str(ROOT / "bench/loop_cost.py")) + 1:])
    assert args.checkpoint == tmp_path / "bench" / "gpu-full" and args.backend == "torch" and args.agents == 64
    assert args.out == out / "loop_cost_gpu.json"
    [config] = args.configs
    assert config.env == {"GEPARD_CODEC_IMPL": "torch", "GEPARD_ADMIT_MAX_SATURATION": "0", "GEPARD_MAX_STREAMS": "256"}
    assert summary[-2:] == [str(ROOT / "bench" / "gpu_summary.py"), str(out)]
    # no wheels: both skipped, saying how to get them
    none = gpu_session(tmp_path, "--dry-run", str(out), GEPARD_SESSION_WHEELS=str(tmp_path / "nowhere"),
                       GEPARD_SESSION_PIPELINE_S="10")
    assert len(commands(none.stdout)) == 11 and "no wheels in" in none.stdout and "bench/gpu_wheels.sh" in none.stdout


def stand_in_gpu_host(tmp_path: Path, case: str) -> tuple[Path, Path]:
    """A stand-in nvidia-smi naming an H200, and a python that prints what it was asked to run,
    sleeps 30 s for part 2's step table (past a short cap), and does ``case`` (a sh case arm) too."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H200, 143771 MiB, 570.00'\n")
    py = tmp_path / "python"
    py.write_text('#!/bin/sh\ncase "$*" in\n' + case + '  *--paths\\ reference,fast,unfused,overlap*) sleep 30 ;;\nesac\n'
                  'echo "ran: $*"\n')
    for f in (smi, py):
        f.chmod(0o755)
    return smi, py


def test_a_part_that_fails_or_overruns_is_reported_and_the_next_runs(tmp_path):
    """A stand-in nvidia-smi and python: part 1 fails (a wheel is missing), part 2 overruns its
    cap, the parts after it still run, and the session exits 1."""
    smi, py = stand_in_gpu_host(tmp_path, '  *pipeline.py\\ --check*) echo "missing: tokenizers"; exit 4 ;;\n')
    out, wheels = tmp_path / "out", tmp_path / "whl"
    wheels.mkdir()
    (wheels / "starlette-1.0-py3-none-any.whl").write_bytes(b"")
    done = gpu_session(tmp_path, str(out), GEPARD_GPU_SMI=str(smi), PYTHON=str(py), GEPARD_SESSION_STEP_S="2",
                       GEPARD_SESSION_WHEELS=str(wheels))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "GPU: NVIDIA H200" in done.stdout
    assert "part 01-pipeline FAILED (exit 4)" in done.stdout and "missing: tokenizers" in (out / "01-pipeline.log").read_text()
    assert "part 02-steps TIMED OUT after 2s" in done.stdout
    assert "part 03-compiled done" in done.stdout and "part 04-profile done" in done.stdout
    assert "part 05-codec done" in done.stdout
    assert "part 06-wheels done" in done.stdout and "part 07-gateway done" in done.stdout  # time was left
    assert "bench/loop_cost.py --checkpoint" in (out / "07-gateway.log").read_text()
    assert "part 08-summary done" in done.stdout and "part 00-tests done" in done.stdout
    assert "--no-graphs" in (out / "04-profile.log").read_text()


def test_only_the_pipeline_json_this_session_wrote_is_taken_as_its_own(tmp_path):
    """A gpu-*.json part 1 did not write (an earlier run's, here a vLLM one an offline session never
    repeats) stays where it is and is not copied beside this session's results."""
    bench = tmp_path / "bench"
    bench.mkdir()
    stale = bench / "gpu-vllm.json"
    stale.write_text('{"backend": "vllm", "rows": []}')
    os.utime(stale, (1_700_000_000, 1_700_000_000))
    fresh = bench / "gpu-torch.json"
    smi, py = stand_in_gpu_host(tmp_path, f"  *pipeline.py\\ --backend\\ torch*) echo '{{\"rows\": []}}' > {fresh} ;;\n")
    out = tmp_path / "out"
    done = gpu_session(tmp_path, str(out), GEPARD_GPU_SMI=str(smi), PYTHON=str(py), GEPARD_SESSION_STEP_S="1",
                       GEPARD_SESSION_WHEELS=str(tmp_path / "no-wheels"))
    assert "part 01-pipeline done" in done.stdout, done.stdout + done.stderr
    assert (out / "gpu-torch.json").read_text() == '{"rows": []}\n'
    assert not (out / "gpu-vllm.json").exists() and stale.exists()
    assert f"not copying {stale}: older than this session" in done.stdout


def test_on_the_device_machine_every_part_comes_back_in_one_archive(tmp_path):
    """The device tool returns at most 8 files from $OUT; a session writes more. Each part's output
    is packed into $OUT/gepard-session.tgz as soon as the part ends, and summary.md is copied beside."""
    import tarfile

    # the summary part writes its summary.md; every other part just runs
    smi, py = stand_in_gpu_host(tmp_path, '  *gpu_summary.py*) echo "# summary" > "$2/summary.md" ;;\n')
    device_out, results = tmp_path / "device-out", tmp_path / "session"
    device_out.mkdir()
    done = gpu_session(tmp_path, GEPARD_GPU_SMI=str(smi), PYTHON=str(py), OUT=str(device_out),
                       GEPARD_SESSION_DIR=str(results), GEPARD_SESSION_STEP_S="2")
    assert done.returncode == 1 and "part 02-steps TIMED OUT" in done.stdout, done.stdout + done.stderr
    assert sorted(f.name for f in device_out.iterdir()) == ["gepard-session.tgz", "summary.md"]
    with tarfile.open(device_out / "gepard-session.tgz") as tar:
        names = {Path(n).name for n in tar.getnames()}
        steps_log = tar.extractfile("./02-steps.log").read().decode()
    assert {"00-tests.log", "01-pipeline.log", "02-steps.log", "05-codec.log", "08-summary.log", "summary.md"} <= names
    assert "ran:" not in steps_log  # cut at its cap, and still there
    assert (device_out / "summary.md").read_text() == "# summary\n"


# what the GPU machines' image lacks among the gateway's and the suite's imports (bench/gpu_wheels.sh
# carries the gateway's, installed by part 6 for part 7 alone, after part 0 ran)
NOT_ON_THE_GPU_IMAGE = ("websockets", "starlette", "uvicorn", "redis", "pydantic", "soundfile", "soxr", "av",
                        "lameenc", "num2words", "multipart", "cartesia", "vllm", "nemo", "pytest_asyncio")


def test_part_0s_tests_import_nothing_the_gpu_image_lacks(tmp_path):
    tests = str(ROOT / "tests" / "engine" / "backends" / "test_vllm_sampling.py")
    code = ("import sys\n"
            "class Absent:  # as if not installed\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            f"        if name.split('.')[0] in {NOT_ON_THE_GPU_IMAGE!r}:\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, Absent())\n"
            "import pytest\n"
            f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-p', 'no:asyncio', {tests!r}, '-k', 'cpu']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]
