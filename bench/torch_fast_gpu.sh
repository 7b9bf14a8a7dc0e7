#!/usr/bin/env bash
# Issue 10 item 1 on a GPU: the torch fast path's CUDA-only parts (graph capture/replay, pinned
# non-blocking result copy, the engine's own stream) checked, then timed against the reference
# loop on a full-size random checkpoint in bf16. About 4 minutes on one H200-class GPU.
#
#   bench/torch_fast_gpu.sh [OUT_DIR]        (PYTHON=... to choose the interpreter)
#
# Needs: CUDA PyTorch, safetensors, tokenizers (no codec, no vLLM, no pytest, no network).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${1:-bench/out}
mkdir -p "$OUT"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "bench/torch_fast_gpu.sh: no CUDA GPU visible to $PY; nothing measured" >&2
  exit 2
fi
"$PY" -c "import torch; print('gpu:', torch.cuda.get_device_name(0), 'torch', torch.__version__)"
# 1) frame identity, float32: reference loop == fast path eager == fast path replaying CUDA graphs
"$PY" bench/torch_fast.py --check
# 2) step time, bf16, graphs on: reference vs fast at 1..256 requests (frames compared, reported)
"$PY" bench/torch_fast.py --size full --batch 1,8,32,128,256 --steps 50 --json "$OUT/torch_fast_bf16.json"
# 3) the same step without graphs (what the graphs save), and a per-kernel profile of the worst step
"$PY" bench/torch_fast.py --size full --batch 1,256 --steps 30 --paths fast --no-graphs \
  --json "$OUT/torch_fast_bf16_eager.json" --profile "$OUT/torch_fast_profile_b256.txt"
echo "results in $OUT"
