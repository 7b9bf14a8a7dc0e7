#!/usr/bin/env bash
# The gateway's packages that the lent GPU machines lack, as wheels for their Python (CPython 3.12 on
# x86-64 Linux), so that bench/gpu_session.sh can serve the real gateway there and measure its event
# loop next to the GPU (its parts 06-wheels and 07-gateway). Those machines cannot reach a package
# index; the wheels travel with the working tree (the device tool's `carry`).
#
#   bash bench/gpu_wheels.sh [DIR]     download them into DIR (default .whl, which git ignores)
#   bash bench/gpu_wheels.sh --list    print NAME==VERSION, one per line, and download nothing
#   bash bench/gpu_wheels.sh --image-has   print what the image has that the gateway imports
#
# Then: run(command="PYTHONUNBUFFERED=1 bash bench/gpu_session.sh", carry=[".whl"]).
#
# Versions: those this checkout's environment runs ($PYTHON, default .venv/bin/python), so the GPU
# machine serves with what the test suite passed with. Everything else the gateway imports was on
# those machines' image when last read (2026-11-17; see GPU_IMAGE_HAS below, which
# tests/test_bench_gpu.py checks the gateway's imports against). The wheels and the working tree
# must stay under the device tool's 64 MiB; PyAV (av, FFmpeg inside) is most of it.
#
# Exit codes: 0 done, 2 bad usage, 3 a package is not installed here (no version to pin),
# 4 the download failed or the wheels exceed WHEELS_MAX_MIB.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
WHEELS_MAX_MIB=58  # of the device tool's 64 MiB: the working tree takes ~4

# carried: what the gateway and bench/loop_cost.py import that the image lacks (with pydantic's and
# soundfile's own needs). --no-deps: each needed one is named here.
GATEWAY_WHEELS=(starlette uvicorn websockets python-multipart pydantic pydantic_core annotated-types
  typing-inspection typing_extensions redis soxr soundfile cffi pycparser lameenc av num2words)
# on the image (read 2026-11-17), among what the gateway imports: nothing to carry
GPU_IMAGE_HAS=(torch numpy safetensors tokenizers pyyaml msgpack prometheus-client httpx httpcore anyio
  sniffio h11 idna certifi click uvloop psutil huggingface-hub filelock fsspec tqdm packaging)

LIST=0
DIR="$ROOT/.whl"
for arg in "$@"; do
  case "$arg" in
    --list) LIST=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    --image-has) printf '%s\n' "${GPU_IMAGE_HAS[@]}"; exit 0 ;;
    -*) echo "bench/gpu_wheels.sh: unknown option '$arg' (only --list, --image-has)" >&2; exit 2 ;;
    *) DIR="$arg" ;;
  esac
done

pins=()
for name in "${GATEWAY_WHEELS[@]}"; do
  version="$("$PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$name" 2>/dev/null)" || {
    echo "bench/gpu_wheels.sh: $name is not installed in $PY, so there is no version to pin (run ./run.sh setup)" >&2
    exit 3
  }
  pins+=("$name==$version")
done
if [ "$LIST" = 1 ]; then printf '%s\n' "${pins[@]}"; exit 0; fi

mkdir -p "$DIR"  # .whl is in .gitignore: only `carry` takes it to the GPU machine
platforms=()
for tag in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  platforms+=(--platform "${tag}_x86_64")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$DIR" "${pins[@]}" || { echo "bench/gpu_wheels.sh: pip download failed" >&2; exit 4; }
mib=$(( ( $(cat "$DIR"/*.whl | wc -c) + 1048575 ) / 1048576 ))
echo "wheels in $DIR: $(ls "$DIR"/*.whl | wc -l) files, ${mib} MiB"
if [ "$mib" -gt "$WHEELS_MAX_MIB" ]; then
  echo "bench/gpu_wheels.sh: ${mib} MiB of wheels is over ${WHEELS_MAX_MIB} MiB: with the working tree they would not travel" >&2
  exit 4
fi
