"""The benchmarks an offline GPU machine runs (bench/gpu_session.sh and what it calls), run here with
only the modules such a machine has. Without NeMo the torch decoder makes the audio, so time to
first audio is measured, not just the first frame."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]

# Bench scripts run as on an offline GPU machine (bench/gpu.sh): an isolated interpreter whose only
# packages are torch with what it requires (CUDA torch requires Triton; the CPU wheel here does not,
# so it is named), the four small wheels gpu.sh names (numpy, safetensors, tokenizers, PyYAML) and
# this repository. Anything else (nemo, vllm, the gateway's packages) is
# simply not installed there, so an import of it fails as it would on that machine.
GPU_HOST_WHEELS = ("numpy", "safetensors", "tokenizers", "PyYAML")
_RUN = """
import runpy, sys
site, root, script = sys.argv[1:4]
sys.path[:0] = [site, root]
sys.argv = sys.argv[3:]
runpy.run_path(script, run_name="__main__")
"""


def _with_requirements(names: list[str]) -> list[importlib.metadata.Distribution]:
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in found:
            continue
        dist = found[name] = importlib.metadata.distribution(name)
        # what this interpreter would install: no extras, no markers for other Pythons or platforms
        requirements = [Requirement(r) for r in dist.requires or []]
        todo += [r.name for r in requirements if r.marker is None or r.marker.evaluate({"extra": ""})]
    return list(found.values())


@pytest.fixture(scope="module")
def gpu_host_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site-packages holding links to just what an offline GPU machine has."""
    site = tmp_path_factory.mktemp("gpu-host-site")
    for dist in [*_with_requirements(["torch", "triton"]), *(importlib.metadata.distribution(n) for n in GPU_HOST_WHEELS)]:
        for top in {Path(str(f)).parts[0] for f in dist.files or []} - {".."}:
            src = Path(str(dist.locate_file(top)))
            if src.exists() and not (site / top).exists():
                (site / top).symlink_to(src)
    return site


@pytest.fixture
def on_a_gpu_host(gpu_host_site: Path):
    def run(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-I", "-S", "-c", _RUN, str(gpu_host_site), str(ROOT), script, *args],
                              cwd=ROOT, env={**os.environ, "TOKENIZERS_PARALLELISM": "false", **(env or {})},
                              capture_output=True, text=True, timeout=300, check=False)
    return run


def test_the_gpu_host_stand_in_lacks_what_gpu_hosts_lack(on_a_gpu_host, tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import importlib.util as u\nprint([m for m in ('torch', 'numpy', 'yaml', 'nemo', 'vllm', 'starlette', "
                     "'soxr', 'msgpack') if u.find_spec(m)])\n")
    done = on_a_gpu_host(str(probe))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['torch', 'numpy', 'yaml']"
    # what torch.compile's Inductor imports comes with torch (sympy and the rest of its requirements)
    inductor = tmp_path / "inductor.py"
    inductor.write_text("import torch._inductor.compile_fx\nprint('inductor imports')\n")
    done = on_a_gpu_host(str(inductor))
    assert done.returncode == 0 and done.stdout.strip() == "inductor imports", done.stderr[-2000:]


def test_measures_time_to_first_audio_without_nemo(on_a_gpu_host, tmp_path: Path) -> None:
    done = on_a_gpu_host("bench/pipeline.py", "--size", "tiny", "--concurrency", "1", "--frames", "12", "--checkpoint", str(tmp_path / "ckpt"),
                     "--json", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the torch decoder (decode only) makes the audio" in done.stdout
    assert (tmp_path / "ckpt" / "nanocodec.nemo").is_file()  # a decoder-only codec written without NeMo
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["codec"] is True and result["codec_impl"] == "torch"
    assert result["codec_carry_state"] is True and "carrying conv state" in done.stdout  # on CPU, as the gateway
    assert result["codec_fused_activations"] is False and "fused" not in done.stdout  # CUDA only, as the gateway
    one = result["one_stream"]
    assert one["ttfa_ms"] is not None and one["ttfa_ms"] >= one["ttff_ms"] > 0  # audio after the first frame
    assert result["rows"][0]["codec_s"] > 0


def test_check_names_the_torch_decoder_and_refuses_nemo_when_missing(on_a_gpu_host, tmp_path: Path) -> None:
    done = on_a_gpu_host("bench/pipeline.py", "--check")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "codec: torch decoder" in done.stdout
    refused = on_a_gpu_host("bench/pipeline.py", "--codec-impl", "nemo", "--checkpoint", str(tmp_path / "ckpt"))
    assert refused.returncode != 0 and "--codec-impl nemo but NeMo's codec modules do not import" in refused.stderr


def test_torch_codec_device_check_runs_on_cpu(on_a_gpu_host, tmp_path: Path) -> None:
    """bench/torch_codec.py (the GPU session's codec check) runs end to end; on CPU float32 is exact.
    Its last stage compiles the decoder with nothing but torch's own requirements, as there (with
    the "eager" backend, one width, one graph: Inductor's C++ for this network takes minutes on
    these CPUs, and a GPU generates Triton kernels instead)."""
    done = on_a_gpu_host("bench/torch_codec.py", "--device", "cpu", "--size", "tiny", "--batches", "1", "--widths", "27",
                          "--reps", "1", "--compile", "1", "--compile-backend", "eager", "--carry", "3",
                          "--carry-frames", "30", "--fused", "--profile", str(tmp_path / "profile.txt"), "--json",
                          str(tmp_path / "codec.json"))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = json.loads((tmp_path / "codec.json").read_text())
    assert result["fp32_device_vs_cpu"] == 0.0 and result["streaming_vs_whole"] <= 1e-5
    assert [(t["batch"], t["width"]) for t in result["timings"]] == [(1, 27)] and result["timings"][0]["ms"] > 0
    [compiled] = result["compiled"]
    assert (compiled["batch"], compiled["width"]) == (1, 1) and compiled["compiled_ms"] > 0 and result["compile_s"] > 0
    assert result["compile_backend"] == "eager"
    assert compiled["max_abs_vs_eager"] <= 1e-5
    # the same three streams windowed, then carrying conv state: each exact, the second decoding less
    windowed, carried = result["streaming"]
    assert (windowed["mode"], carried["mode"]) == ("windowed", "carried") and windowed["schedule"] == "4,16"
    assert windowed["windowed_streams"] == 3 and carried["windowed_streams"] == 0
    assert windowed["max_abs_vs_whole"] <= 1e-5 and carried["max_abs_vs_whole"] <= 1e-5
    assert carried["decode_s"] > 0 and "carrying state:" in done.stdout
    # Triton kernels need CUDA (or its interpreter: the next test)
    assert result["fused"] == {"skipped": "Triton compiles for CUDA, not cpu"}
    # 4b) one batch and width here: the profiler's table of its eager decodes, by CPU time
    profile = (tmp_path / "profile.txt").read_text()
    assert profile.startswith("torch.float32 codec, 1 window(s) of 27 frames, eager, 3 decodes\n")
    assert "aten::conv1d" in profile and "CPU total" in profile and "4b) profile of B=1 W=27 written" in done.stdout


def test_torch_codec_times_fused_activations_under_tritons_interpreter(on_a_gpu_host, tmp_path: Path) -> None:
    """Stage 8 end to end: a decoder with each snake activation one Triton kernel, which Triton's
    interpreter runs on CPU (slowly: the timings mean nothing here), checked against the eager one;
    then two streams carrying conv state, read and recorded by the state's kernel too."""
    done = on_a_gpu_host("bench/torch_codec.py", "--device", "cpu", "--size", "tiny", "--batches", "1", "--widths", "27",
                          "--reps", "1", "--carry", "2", "--carry-frames", "6", "--fused", "--json",
                          str(tmp_path / "codec.json"), env={"TRITON_INTERPRET": "1"})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    fused = json.loads((tmp_path / "codec.json").read_text())["fused"]
    assert fused["activations"] == 96  # NanoCodec's layout at every size: 5 stages x 19 + the last
    assert fused["max_abs_vs_eager"] <= 1e-6 and fused["max_abs_vs_fp32"] <= fused["bound_vs_fp32"] == 1e-5
    [timing] = fused["timings"]
    assert (timing["batch"], timing["width"]) == (1, 27) and timing["fused_ms"] > 0 and timing["eager_ms"] > 0
    assert "8) fused activations (96, checked" in done.stdout
    carried = fused["streaming"]
    assert fused["state_convs"] == 97 and carried["mode"] == "carried, fused (state too)"
    assert carried["windowed_streams"] == 0 and carried["max_abs_vs_whole"] <= 1e-5


def test_torch_fast_steps_run_with_only_the_gpu_hosts_modules(on_a_gpu_host, tmp_path: Path) -> None:
    """bench/torch_fast.py as bench/gpu.sh and bench/gpu_session.sh run it, small: the frame check,
    the timed table with JSON, and the eager run with the profiler's table."""
    check = on_a_gpu_host("bench/torch_fast.py", "--check", "--device", "cpu")
    assert check.returncode == 0, check.stdout + check.stderr[-3000:]
    assert "fast graphs equals the reference loop" in check.stdout
    timed = on_a_gpu_host("bench/torch_fast.py", "--size", "tiny", "--batch", "1,2", "--steps", "3",
                          "--json", str(tmp_path / "fast.json"), "--profile", str(tmp_path / "prof.txt"),
                          env={"GEPARD_BENCH_DIR": str(tmp_path / "bench")})
    assert timed.returncode == 0, timed.stdout + timed.stderr[-3000:]
    result = json.loads((tmp_path / "fast.json").read_text())
    assert {(r["path"], r["batch"]) for r in result["results"]} == {(p, b) for p in ("reference", "fast") for b in (1, 2)}
    assert result["frames_equal"] == {"1": True, "2": True}
    assert "fast path, batch 2" in (tmp_path / "prof.txt").read_text()


def test_a_sessions_json_becomes_the_summary_on_the_gpu_host(on_a_gpu_host, tmp_path: Path) -> None:
    """What bench/gpu_session.sh writes (here small and on CPU), summarised as it would be there."""
    out = tmp_path / "out"
    out.mkdir()
    env = {"GEPARD_BENCH_DIR": str(tmp_path / "bench")}
    runs = [("bench/pipeline.py", "--size", "tiny", "--concurrency", "1,2", "--frames", "12",
             "--checkpoint", str(tmp_path / "ckpt"), "--json", str(out / "gpu-torch.json")),
            # on the pipeline's checkpoint, as gpu_session.sh reuses it
            ("bench/torch_fast.py", "--size", "tiny", "--batch", "2", "--steps", "3", "--hbm-gbps", "50",
             "--checkpoint", str(tmp_path / "ckpt"), "--json", str(out / "torch_fast_bf16.json")),
            # the compiled path: torch.compile needs nothing but torch's own requirements there
            # (its prefill compiles as the step does; tests/test_bench_torch_fast.py times prefills).
            # the eager backend traces the same graphs; Inductor's C++ adds a minute here, and a GPU
            # generates Triton kernels instead (tests/engine/backends/test_torch_fast_compiled.py
            # runs Inductor's C++ on these parts)
            ("bench/torch_fast.py", "--size", "tiny", "--batch", "2", "--steps", "3", "--paths", "reference,compiled",
             "--compile-backend", "eager",
             "--prefills", "0", "--checkpoint", str(tmp_path / "ckpt"), "--json", str(out / "torch_fast_bf16_compiled.json")),
            ("bench/torch_codec.py", "--device", "cpu", "--size", "tiny", "--batches", "1", "--widths", "27",
             "--reps", "1", "--json", str(out / "torch_codec_full.json")),
            ("bench/gpu_summary.py", str(out))]
    for script, *args in runs:
        done = on_a_gpu_host(script, *args, env=env)
        assert done.returncode == 0, f"{script}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    text = (out / "summary.md").read_text()
    assert text == done.stdout
    targets = text.split("## torch: targets", 1)[1].split("##", 1)[0]
    first_audio = next(line for line in targets.splitlines() if line.startswith("| one stream: time to first audio"))
    assert "not measured" not in first_audio and first_audio.rstrip().endswith(("| met |", "| **not met** |"))
    assert "| 2,4,8,32 | 2 |" in text or "| 4,16 | 2 |" in text  # the level of two streams, its default schedule
    assert "| fast | on | 2 |" in text and "| reference | - | 2 |" in text and "at 50 GB/s" in text
    assert "| compiled | on | 2 |" in text and text.count("| reference | - | 2 |") == 1
    assert "## prefill" in text and "| fast | 1 |" in text and "| fast | 8 |" in text
    compiled = json.loads((out / "torch_fast_bf16_compiled.json").read_text())
    assert compiled["frames_equal"] == {"2": True}
    assert compiled["checks"] == {"fast eager": True, "compiled graphs": True}  # its frame check, after the timings
    assert compiled["compile_backend"] == "eager"
    assert "compiled graphs equal" in text
    assert "## codec on the device" in text and "| 1 | 27 |" in text
    assert not (tmp_path / "bench" / "tiny-stop0-engine").exists()  # no second checkpoint was written


def test_the_codecs_float32_check_runs_without_tf32_and_puts_the_flags_back():
    """cuDNN rounds float32 convolutions to TF32 by default, which alone can come near the check's
    1e-4 bound on a GPU: the device-vs-CPU check turns it off, and restores it even on an error."""
    import torch

    from bench.torch_codec import no_tf32

    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    try:
        with pytest.raises(RuntimeError), no_tf32():
            assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
            raise RuntimeError("a failed decode")
        assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before
