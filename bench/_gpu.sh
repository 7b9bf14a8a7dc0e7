# Sourced by bench/gpu.sh and bench/gpu_session.sh: is there an NVIDIA GPU to measure?
#   require_gpu SCRIPT_NAME NVIDIA_SMI DRY_RUN
# prints "GPU: name, memory, driver"; with none it exits 3 naming SCRIPT_NAME, or in a dry run says so
# and returns (a dry run shows the commands a GPU machine would run).
require_gpu() {
  local script="$1" smi="$2" dry="$3" gpu
  gpu="$( (command -v "$smi" >/dev/null 2>&1 && "$smi" --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1) || true)"
  if [ -n "$gpu" ]; then
    echo "GPU: $gpu"
  elif [ "$dry" = 1 ]; then
    echo "# dry run: no NVIDIA GPU here ($smi finds none); a real run stops here with exit 3"
  else
    echo "$script: no NVIDIA GPU found ($smi is missing or lists no GPU): this benchmark measures a GPU; run it on a machine with one" >&2
    exit 3
  fi
}
