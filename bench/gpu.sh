#!/usr/bin/env bash
# Gepard on stock vLLM, one NVIDIA GPU: single-stream RTF and first-frame latency, then aggregate
# xRT at 1, 32, 128 and 256 concurrent streams (bf16, torch.compile + CUDA graphs on).
#
#   bash bench/gpu.sh
#
# 1) a virtualenv (default ./.venv-gpu, reused when present) with PyPI vLLM (its CUDA build brings
#    torch) and this repository installed editable without extra deps: that registers the
#    `vllm.general_plugins` entry point `gepard`, which is how stock vLLM finds GepardForTTS;
# 2) a full-size random checkpoint (556M parameters, bf16, published layout) whose stop head never
#    fires, so every stream makes exactly GEPARD_BENCH_FRAMES frames (written once, ./models/bench);
# 3) bench/engine.py --backend vllm --sizes full: bursts of C streams started at once.
#
# Reading the table: RTF p50 at C=1 is the single-stream real-time factor (lower is better), TTFF is
# the time to the first frame (first-audio latency without the codec's ~1 frame of decode), xRT is
# audio seconds generated per wall second over all streams. Results also go to
# models/bench/gpu-results.json. Needs python3 >= 3.10, an NVIDIA driver recent enough for the vLLM
# wheel's CUDA, PyPI access, and ~8 GB of disk; on a fresh machine the install dominates (3-4 min).
#
# Knobs (environment): GEPARD_GPU_VENV, GEPARD_VLLM_SPEC (default vllm==0.32.0),
# GEPARD_BENCH_FRAMES (default 200, ~9.3 s of audio per stream), GEPARD_BENCH_CONCURRENCY
# (default 1,32,128,256), GEPARD_GPU_MEMORY_UTILIZATION (default 0.85).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GEPARD_GPU_VENV:-$ROOT/.venv-gpu}"
VLLM_SPEC="${GEPARD_VLLM_SPEC:-vllm==0.32.0}"
FRAMES="${GEPARD_BENCH_FRAMES:-200}"
CONCURRENCY="${GEPARD_BENCH_CONCURRENCY:-1,32,128,256}"
MEMORY="${GEPARD_GPU_MEMORY_UTILIZATION:-0.85}"
BENCH_DIR="${GEPARD_BENCH_DIR:-$ROOT/models/bench}"
CKPT="$BENCH_DIR/full-stop0"  # where bench/_common.random_checkpoint("full", stop_after=0) looks
started=$(date +%s)
step() { echo "== [$(( $(date +%s) - started ))s] $*"; }

command -v nvidia-smi >/dev/null || { echo "bench/gpu.sh: no nvidia-smi: this needs an NVIDIA GPU" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

step "python environment: $VENV ($VLLM_SPEC)"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q "$VLLM_SPEC"
python -m pip install -q --no-deps -e "$ROOT"
python - <<'EOF'
import importlib.metadata as md
import torch, vllm
assert torch.cuda.is_available(), "torch from the vLLM wheel does not see the GPU"
plugins = [e.value for e in md.entry_points(group="vllm.general_plugins") if e.name == "gepard"]
assert plugins, "the gepard vLLM plugin entry point is not installed"
print(f"vllm {vllm.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}, plugin {plugins[0]}")
EOF

step "full-size random checkpoint: $CKPT"
if [ ! -f "$CKPT/model.safetensors" ]; then
  (cd "$ROOT" && python -m engine.tiny "$CKPT" --size full --stop-after 0 --no-codec)
fi

step "benchmark: $FRAMES frames per stream, concurrency $CONCURRENCY"
export VLLM_PLUGINS=gepard GEPARD_BENCH_DIR="$BENCH_DIR" TOKENIZERS_PARALLELISM=false
python "$ROOT/bench/engine.py" --backend vllm --sizes full --dtype bfloat16 --frames "$FRAMES" \
  --concurrency "$CONCURRENCY" --gpu-memory-utilization "$MEMORY" --json "$BENCH_DIR/gpu-results.json" \
  2>&1 | tee "$BENCH_DIR/gpu-bench.log" | grep -E "^(machine|#|backend| +vllm )"

step "done; table in $BENCH_DIR/gpu-results.json, vLLM's full log in $BENCH_DIR/gpu-bench.log"
