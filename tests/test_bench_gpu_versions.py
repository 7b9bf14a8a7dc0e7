"""bench/gpu_versions.sh: the engine's and codec's tests with the GPU image's torch and Triton. What
it would install and run (--print), checked here; its real run downloads ~3 GB and takes ~10 min, so
it is a developer's step before a GPU session, not part of this suite."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_versions.sh"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def printed(*args: str, env: dict[str, str] | None = None) -> list[list[str]]:
    done = run("--print", *args, env=env)
    assert done.returncode == 0, done.stderr
    return [shlex.split(line) for line in done.stdout.splitlines() if line.strip()]


def test_by_default_it_installs_the_gpu_images_versions_beside_the_venv_and_runs_the_engine_and_codec_tests(tmp_path):
    install, check, tests = printed(env={"TMPDIR": str(tmp_path), "GEPARD_GPU_VERSIONS_DIR": ""})
    where = str(tmp_path / "gepard-gpu-versions" / "torch-2.11.0-triton-3.6.0")
    assert install[1:] == ["-m", "pip", "install", "-q", "--target", where, "torch==2.11.0", "triton==3.6.0"]
    assert check[:2] == tests[:2] == ["env", f"PYTHONPATH={where}"]  # ahead of .venv's torch, not into it
    assert check[-2:] == ["2.11.0", "3.6.0"]
    assert tests[3:5] == ["-m", "pytest"] and "not vllm" in tests and "--ignore-glob=*vllm*" in tests


def test_an_installed_dir_is_not_installed_again_and_other_versions_are_named_in_it(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text("__version__ = '2.12.0'\n")
    check, tests = printed("2.12.0", "3.7.0", env={"GEPARD_GPU_VERSIONS_DIR": str(tmp_path)})
    assert check[-2:] == ["2.12.0", "3.7.0"] and tests[1] == f"PYTHONPATH={tmp_path}"
    [_, _, default_dir] = printed("2.12.0", "3.7.0", env={"TMPDIR": str(tmp_path), "GEPARD_GPU_VERSIONS_DIR": ""})
    assert default_dir[1].endswith("/torch-2.12.0-triton-3.7.0")


def test_the_tests_it_runs_include_every_test_of_a_triton_kernel_or_cuda_graphs():
    """A kernel's or graph rule's test file outside the script's list would go unchecked with the
    GPU's versions: every test file that runs a Triton kernel (interpreted or compiled for sm_90)
    or the recorded CUDA graphs must lie under one of the paths it passes to pytest."""
    [*_, tests] = printed()
    paths = [ROOT / p for p in tests if p.startswith("tests/")]
    assert paths and all(p.exists() for p in paths)
    needs = [f for f in (ROOT / "tests").rglob("test_*.py")
             if any(marker in f.read_text() for marker in ("triton_aot", "TRITON_INTERPRET", "simulated_cuda_graphs",
                                                           "triton_interpreter"))
             and "vllm" not in f.name and f.name != Path(__file__).name]
    assert needs
    missed = [str(f.relative_to(ROOT)) for f in needs if not any(f == p or p in f.parents for p in paths)]
    assert missed == []


@pytest.mark.parametrize("args, says", [
    (["2.11.0"], "give both versions (TORCH TRITON) or neither"),
    (["--quick"], "unknown option '--quick'"),
])
def test_bad_usage_is_refused_with_exit_2(args, says):
    done = run(*args)
    assert done.returncode == 2 and says in done.stderr and done.stdout == ""


def test_versions_pip_cannot_install_stop_before_the_tests_with_exit_3(tmp_path):
    where = tmp_path / "versions"
    done = run("0.0.1", "0.0.1", env={"GEPARD_GPU_VERSIONS_DIR": str(where)})
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"installing torch 0.0.1 and Triton 0.0.1 into {where} failed" in done.stderr
    assert not (where / "torch" / "version.py").exists() and "passed" not in done.stdout  # the next run tries again


@pytest.mark.skipif(sys.platform != "linux", reason="bash script for the Linux dev machines")
def test_a_dir_that_does_not_give_the_asked_versions_stops_before_the_tests(tmp_path):
    """Installed dir present but holding another torch (here: this checkout's own, through .venv,
    since the dir has no torch package to import): exit 3 before pytest starts."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text("")  # looks installed; `import torch` finds .venv's
    done = run("2.11.0", "3.6.0", env={"GEPARD_GPU_VERSIONS_DIR": str(tmp_path)})
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"{tmp_path} does not give torch 2.11.0 and Triton 3.6.0" in done.stderr
    assert "passed" not in done.stdout
