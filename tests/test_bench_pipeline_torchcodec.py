"""bench/pipeline.py on a host without NeMo (as the offline GPU machines are): the torch decoder
makes the audio, so time to first audio is measured, not just the first frame."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# runs bench/pipeline.py with every `import nemo...` failing, as on a host where it is not installed
_WITHOUT_NEMO = """
import runpy, sys

class NoNemo:
    def find_spec(self, name, path=None, target=None):
        if name == "nemo" or name.startswith("nemo."):
            raise ImportError(f"No module named {name!r} (blocked by the test)")
        return None

sys.meta_path.insert(0, NoNemo())
sys.argv = ["bench/pipeline.py", *sys.argv[1:]]
runpy.run_path("bench/pipeline.py", run_name="__main__")
"""


def _pipeline(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, "-c", _WITHOUT_NEMO, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def test_measures_time_to_first_audio_without_nemo(tmp_path: Path) -> None:
    done = _pipeline("--size", "tiny", "--concurrency", "1", "--frames", "12", "--checkpoint", str(tmp_path / "ckpt"),
                     "--json", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the torch decoder (decode only) makes the audio" in done.stdout
    assert (tmp_path / "ckpt" / "nanocodec.nemo").is_file()  # a decoder-only codec written without NeMo
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["codec"] is True and result["codec_impl"] == "torch"
    one = result["one_stream"]
    assert one["ttfa_ms"] is not None and one["ttfa_ms"] >= one["ttff_ms"] > 0  # audio after the first frame
    assert result["rows"][0]["codec_s"] > 0


def test_check_names_the_torch_decoder_and_refuses_nemo_when_missing(tmp_path: Path) -> None:
    done = _pipeline("--check")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "codec: torch decoder" in done.stdout
    refused = _pipeline("--codec-impl", "nemo", "--checkpoint", str(tmp_path / "ckpt"))
    assert refused.returncode != 0 and "--codec-impl nemo but NeMo's codec modules do not import" in refused.stderr


def test_torch_codec_device_check_runs_on_cpu(tmp_path: Path) -> None:
    """bench/torch_codec.py (the GPU session's codec check) runs end to end; on CPU float32 is exact."""
    done = subprocess.run(
        [sys.executable, "bench/torch_codec.py", "--device", "cpu", "--size", "tiny", "--batches", "1", "--widths", "27",
         "--reps", "1", "--json", str(tmp_path / "codec.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = json.loads((tmp_path / "codec.json").read_text())
    assert result["fp32_device_vs_cpu"] == 0.0 and result["streaming_vs_whole"] <= 1e-5
    assert [(t["batch"], t["width"]) for t in result["timings"]] == [(1, 27)] and result["timings"][0]["ms"] > 0
