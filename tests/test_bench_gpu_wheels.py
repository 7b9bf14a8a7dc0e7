"""bench/gpu_wheels.sh and the gateway on a lent GPU machine: the packages it carries there plus those
the machines' image has (as the script lists them) are all the gateway needs to serve and to be
measured by bench/loop_cost.py. Checked here by hiding every other installed package from the
gateway's processes, then serving the way bench/gpu_session.sh's part 7 does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_wheels.sh"

# Installed as sitecustomize (PYTHONPATH) in every Python process of a run: torch first, as the image
# has it with all it imports; from then on a top-level module of any distribution not in
# GEPARD_TEST_ALLOWED is absent, as on the GPU machine.
HIDE_THE_REST = '''
import importlib.abc, importlib.metadata, importlib.util, os, sys
import torch
_allowed = {n.strip().lower().replace("_", "-") for n in os.environ["GEPARD_TEST_ALLOWED"].split(",")}
_hidden = {top for top, dists in importlib.metadata.packages_distributions().items()
           if top not in sys.stdlib_module_names and not any(d.lower().replace("_", "-") in _allowed for d in dists)}

class _NotOnTheGpuMachine(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _hidden and name not in sys.modules:
            raise ModuleNotFoundError(f"No module named {name!r} (not on the GPU image, not carried)", name=name)
        return None

sys.meta_path.insert(0, _NotOnTheGpuMachine())
_find_spec = importlib.util.find_spec


def _find_spec_of_what_is_there(name, package=None):  # a probe (torch's are) finds nothing, as there
    return None if name.split(".")[0] in _hidden and name not in sys.modules else _find_spec(name, package)


importlib.util.find_spec = _find_spec_of_what_is_there
'''


def wheels_sh(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=60)


def carried() -> list[str]:
    done = wheels_sh("--list")
    assert done.returncode == 0, done.stderr
    return [line.split("==")[0] for line in done.stdout.split()]


def needs(name: str) -> set[str]:
    """``name`` and what it requires, transitively, as installed here (extras left out)."""
    import re
    from importlib.metadata import PackageNotFoundError, requires

    seen, todo = set(), [name]
    while todo:
        dist = todo.pop()
        if dist.lower() in seen:
            continue
        seen.add(dist.lower())
        try:
            todo += [re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0] for r in requires(dist) or [] if "extra ==" not in r]
        except PackageNotFoundError:  # an optional one not installed here
            pass
    return seen


def image_has() -> list[str]:
    """What the script says the image has, and what the image's torch itself needs (sympy, mpmath, ...)."""
    return wheels_sh("--image-has").stdout.split() + sorted(needs("torch"))


def test_list_pins_each_carried_package_at_the_version_this_environment_runs():
    from importlib.metadata import version

    pins = wheels_sh("--list").stdout.split()
    assert "starlette" in carried() and "av" in carried() and len(pins) == len(set(pins)) >= 10
    for pin in pins:
        name, _, pinned = pin.partition("==")
        assert pinned == version(name), pin
    assert not set(carried()) & set(wheels_sh("--image-has").stdout.split())


def test_bad_usage_and_a_package_missing_here_are_refused(tmp_path):
    assert wheels_sh("--fast").returncode == 2
    python = tmp_path / "python"  # a python on which no package is installed
    python.write_text("#!/bin/sh\nexit 1\n")
    python.chmod(0o755)
    done = wheels_sh("--list", PYTHON=str(python))
    assert done.returncode == 3 and "starlette is not installed" in done.stderr


@pytest.fixture(scope="module")
def hide_the_rest(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("gpu-machine-site")
    (site / "sitecustomize.py").write_text(HIDE_THE_REST)
    return site


def on_the_gpu_machine(site: Path, allowed: list[str]) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(site), "GEPARD_TEST_ALLOWED": ",".join(allowed)}


def test_hiding_works_a_gateway_without_starlette_cannot_start(hide_the_rest):
    allowed = [n for n in carried() if n != "starlette"] + image_has() + ["gepard-server"]
    done = subprocess.run([sys.executable, "-c", "import api.server"], cwd=ROOT, capture_output=True, text=True,
                          env=on_the_gpu_machine(hide_the_rest, allowed), timeout=120)
    assert done.returncode == 1 and "No module named 'starlette' (not on the GPU image, not carried)" in done.stderr


@pytest.fixture(scope="module")
def decoder_only_checkpoint(tmp_path_factory) -> Path:
    """A tiny checkpoint whose codec is decoder-only (no NeMo), as bench/gpu.sh writes gpu-full."""
    from codec_worker.torchcodec.random import write_random_decoder_codec
    from engine.tiny import CODEC_FILE, write_tiny_checkpoint

    out = tmp_path_factory.mktemp("decoder-only") / "ckpt"
    write_tiny_checkpoint(out, size="tiny", with_codec=False)
    write_random_decoder_codec(out / CODEC_FILE, size="tiny")
    return out


def test_the_gateway_serves_and_is_measured_with_the_image_and_the_carried_wheels_alone(
        hide_the_rest, decoder_only_checkpoint, tmp_path):
    # part 7's command, short: the client and `gepard serve` both see only those packages
    out = tmp_path / "loop_cost_gpu.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "loop_cost.py"), "--checkpoint", str(decoder_only_checkpoint),
         "--backend", "torch", "--agents", "2", "--duration", "2", "--ramp", "0", "--out", str(out),
         "--config", "gpu:GEPARD_CODEC_IMPL=torch,GEPARD_ADMIT_MAX_SATURATION=0,GEPARD_MAX_STREAMS=256"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=on_the_gpu_machine(hide_the_rest, carried() + image_has() + ["gepard-server"]))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    import json

    result = json.loads(out.read_text())
    assert result["checkpoint"] == str(decoder_only_checkpoint)
    [row] = result["results"]
    assert row["audio_s"] > 0 and row["loop_ms_per_audio_s"] > 0
    assert row["config"]["env"]["GEPARD_CODEC_IMPL"] == "torch"
