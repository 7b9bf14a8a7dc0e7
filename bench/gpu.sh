#!/usr/bin/env bash
# Gepard on one NVIDIA GPU, full-size random checkpoint in bf16: time to first audio and RTF of one
# stream, then aggregate xRT, per-stream RTF p50/p99 and TTFA p50/p99 at 1, 32, 128, 256 (512, 1024
# when memory allows) concurrent streams, engine step time and the codec's share, peak GPU memory,
# the vLLM model runner. A table per backend on stdout, JSON beside it. Finishes in under 8 minutes.
#
#   bash bench/gpu.sh [--dry-run]
#
# Two kinds of GPU machine:
# - with network (PyPI reachable): a virtualenv ($GEPARD_GPU_VENV, default ./.venv-gpu, reused) gets
#   PyPI vLLM (its CUDA build brings torch), NeMo's codec modules (as run.sh installs them) and this
#   repository editable without deps (the `vllm.general_plugins` entry point `gepard`); both backends
#   are measured: torch first, then vLLM.
# - without network: the machine's own python ($PYTHON, default python3) with its CUDA PyTorch runs
#   the torch backend only. Besides torch it needs these small CPU wheels (no CUDA wheels), which
#   `bench/pipeline.py --check` names when one is missing (exit 4):
#       numpy  safetensors  tokenizers  PyYAML
#   The codec (TTFA = first PCM out of NanoCodec): without nemo_toolkit (its import tree is far
#   larger than a wheel carry) it is the torch decoder (codec_worker/torchcodec: the NeMo decoder's
#   audio from the same .nemo, needing only torch, numpy and PyYAML, so no wheel beyond the list
#   above), decoding a random decoder-only codec written on the spot (~2 s at full size; the 250 MB
#   NeMo-written one cannot travel). Encoding (voice cloning) is not part of the benchmark.
#
# Reading the table (bench/pipeline.py explains every column): the C=1 row is one stream (TTFA,
# RTF); "under p99" is what a listener would wait at chunk seams; "codec" is the codec's share of
# engine + codec time; "GPU GiB" the device's peak memory in use. The first chunk schedule is the
# server default unless GEPARD_CHUNK_SCHEDULE says otherwise; two more run at C=1 to compare first
# audio. Extra schedules: GEPARD_GPU_COMPARE_SCHEDULES (space-separated, "" for none).
#
# Knobs (environment): GEPARD_GPU_NETWORK=auto|yes|no, GEPARD_GPU_BUDGET_S (default 450: the whole
# run, install included), GEPARD_BENCH_FRAMES (200, ~9.3 s of audio per stream),
# GEPARD_BENCH_ONE_STREAM_ROUNDS (5: bursts per schedule at one stream, so the one-stream TTFA and RTF
# are p50s of 5 samples, not one; a burst of one stream is the run's shortest, seconds in all),
# GEPARD_BENCH_CONCURRENCY (1,32,128,256,512,1024), GEPARD_TORCH_PATH (auto|reference|fast: the torch
# backend's loop; auto = the fast path on CUDA), GEPARD_VLLM_RUNNER (v1|v2, default v1: the adapter
# the CPU tests cover), GEPARD_VLLM_SPEC (vllm==0.32.0), GEPARD_GPU_MEMORY_UTILIZATION (0.85),
# GEPARD_BENCH_DIR (./models/bench), GEPARD_GPU_SMI (nvidia-smi).
# --dry-run (or GEPARD_GPU_DRY_RUN=1) prints the commands it would run (one "+ cmd" line each) and
# runs none, the network probe of GEPARD_GPU_NETWORK=auto included (it then shows the commands
# without network); it goes on past a missing GPU, saying so.
#
# Exit codes: 0 done, 2 bad usage, 3 no NVIDIA GPU, 4 a module the run needs is missing (no network).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DRY="${GEPARD_GPU_DRY_RUN:-0}"
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    -h|--help) sed -n '2,40p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "bench/gpu.sh: unknown argument '$arg' (only --dry-run)" >&2; exit 2 ;;
  esac
done

NETWORK="${GEPARD_GPU_NETWORK:-auto}"
case "$NETWORK" in auto|yes|no) ;; *) echo "bench/gpu.sh: GEPARD_GPU_NETWORK must be auto, yes or no, got '$NETWORK'" >&2; exit 2 ;; esac
BUDGET="${GEPARD_GPU_BUDGET_S:-450}"
FRAMES="${GEPARD_BENCH_FRAMES:-200}"
ONE_STREAM_ROUNDS="${GEPARD_BENCH_ONE_STREAM_ROUNDS:-5}"
CONCURRENCY="${GEPARD_BENCH_CONCURRENCY:-1,32,128,256,512,1024}"
TORCH_PATH="${GEPARD_TORCH_PATH:-auto}"
VLLM_RUNNER="${GEPARD_VLLM_RUNNER:-v1}"
VLLM_SPEC="${GEPARD_VLLM_SPEC:-vllm==0.32.0}"
MEMORY="${GEPARD_GPU_MEMORY_UTILIZATION:-0.85}"
VENV="${GEPARD_GPU_VENV:-$ROOT/.venv-gpu}"
BENCH_DIR="${GEPARD_BENCH_DIR:-$ROOT/models/bench}"
SMI="${GEPARD_GPU_SMI:-nvidia-smi}"
CKPT="$BENCH_DIR/gpu-full"  # written once by bench/pipeline.py (NeMo's random codec, or without NeMo a decoder-only one)
# 1,2,4,8,32: first audio after one frame (one engine step and a 1-frame decode sooner than the
# default's two); 4,16: the CPU default. (8,32 lost to both on the H200: 94 ms against 75 and 86.)
COMPARE="${GEPARD_GPU_COMPARE_SCHEDULES-1,2,4,8,32 4,16}"

started=$(date +%s)
deadline=$(( started + BUDGET ))
step() { echo "== [$(( $(date +%s) - started ))s] $*"; }
left() { local l=$(( deadline - $(date +%s) )); [ "$l" -gt 30 ] && echo "$l" || echo 30; }
run() {  # run a command, or in a dry run print it (shell-quoted, one line)
  if [ "$DRY" = 1 ]; then printf '+'; printf ' %q' "$@"; printf '\n'; else "$@"; fi
}

# 1) a GPU, or nothing to measure
# shellcheck source=bench/_gpu.sh
source "$ROOT/bench/_gpu.sh"
require_gpu bench/gpu.sh "$SMI" "$DRY"

# 2) network or not
PROBE=(python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/vllm/', timeout=5)")
if [ "$NETWORK" = auto ] && [ "$DRY" = 1 ]; then
  run "${PROBE[@]}"  # a dry run runs nothing, the probe included (it reaches out to PyPI)
  echo "# dry run: the network probe above was not run; the commands without network follow (GEPARD_GPU_NETWORK=yes shows the others)"
  NETWORK=no
elif [ "$NETWORK" = auto ]; then
  if "${PROBE[@]}" >/dev/null 2>&1; then
    NETWORK=yes
  else
    NETWORK=no
  fi
fi
step "network: $NETWORK; budget ${BUDGET}s; $FRAMES frames per stream; concurrency $CONCURRENCY"

SCHEDULE_ARGS=(--chunk-schedule "${GEPARD_CHUNK_SCHEDULE:-default}")  # default: the server's
for s in $COMPARE; do SCHEDULE_ARGS+=(--chunk-schedule "$s"); done

bench() {  # bench BACKEND PYTHON BUDGET_S EXTRA...
  local backend="$1" py="$2" budget="$3"; shift 3
  run env TOKENIZERS_PARALLELISM=false VLLM_PLUGINS=gepard GEPARD_BENCH_DIR="$BENCH_DIR" "$py" "$ROOT/bench/pipeline.py" \
    --backend "$backend" --size full --checkpoint "$CKPT" --dtype bfloat16 --frames "$FRAMES" \
    --concurrency "$CONCURRENCY" "${SCHEDULE_ARGS[@]}" --compare-levels 1 --one-stream-rounds "$ONE_STREAM_ROUNDS" \
    --budget-s "$budget" \
    --json "$BENCH_DIR/gpu-$backend.json" "$@"
}

if [ "$NETWORK" = no ]; then
  # 3a) the machine's python and CUDA PyTorch: the torch backend only
  PY="${PYTHON:-python3}"
  step "no network: $PY with its own PyTorch; torch backend ($TORCH_PATH path)"
  run "$PY" "$ROOT/bench/pipeline.py" --check
  if [ "$TORCH_PATH" != reference ] && [ -f "$ROOT/bench/torch_fast.py" ]; then
    step "fast path == reference loop, graphs included (tiny, float32)"
    run "$PY" "$ROOT/bench/torch_fast.py" --check \
      || echo "bench/gpu.sh: WARNING: the fast path's frames differ from the reference loop (above): its figures are suspect" >&2
  fi
  step "benchmark: torch"
  bench torch "$PY" "$(( $(left) - 10 ))" --torch-path "$TORCH_PATH"
else
  # 3b) PyPI vLLM (CUDA torch comes with it) and NeMo's codec modules in a virtualenv
  PY="$VENV/bin/python"
  step "python environment: $VENV ($VLLM_SPEC)"
  [ -x "$PY" ] || run python3 -m venv "$VENV"
  run "$PY" -m pip install -q --upgrade pip
  run "$PY" -m pip install -q "$VLLM_SPEC" "nemo_toolkit[core]==3.0.0" einops librosa matplotlib lhotse pandas kaldialign datasets
  run "$PY" -m pip install -q --no-deps -e "$ROOT"
  run "$PY" "$ROOT/bench/pipeline.py" --check
  step "benchmark: torch ($TORCH_PATH path), then vLLM (runner $VLLM_RUNNER)"
  bench torch "$PY" "$(( ($(left) - 20) / 2 ))" --torch-path "$TORCH_PATH"
  bench vllm "$PY" "$(( $(left) - 10 ))" --vllm-runner "$VLLM_RUNNER" \
    --gpu-memory-utilization "$MEMORY"
fi

step "done; JSON in $BENCH_DIR/gpu-*.json"
