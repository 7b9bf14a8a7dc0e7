"""``Settings``: every knob of the gateway, from ``GEPARD_*`` environment variables (and ``REDIS_URL``).

``Settings.from_env(os.environ, **cli_overrides)`` parses the variables below, lays the non-None
overrides over them (CLI flags), and validates everything at once; a ``SettingsError`` lists every
problem, each naming its variable (``GEPARD_PORT: must be between 1 and 65535, got 70000``).
``dataclasses.replace(settings, ...)`` re-validates.

    variable                           field                        default
    GEPARD_HOST                        host                         127.0.0.1
    GEPARD_PORT                        port                         8000
    GEPARD_MODEL                       model                        nineninesix/gepard-1.0 (path or HF id)
    GEPARD_CODEC                       codec                        None: the checkpoint's codec_id
    GEPARD_CODEC_IMPL                  codec_impl                   auto (auto | nemo | torch: NanoCodec built from
                                                                    NeMo's modules, or the torch decoder, which
                                                                    decodes identically but cannot clone voices;
                                                                    auto: NeMo when it imports, and on CUDA
                                                                    with codec graphs the torch decoder decodes
                                                                    beside it)
    GEPARD_CODEC_COMPILE               codec_compile                false (the torch decoder through torch.compile;
                                                                    off until measured on a GPU)
    GEPARD_CODEC_CUDA_GRAPHS           codec_cuda_graphs            true (the torch decoder on CUDA captured as CUDA
                                                                    graphs at start, one per padded decode shape;
                                                                    no effect on CPU or on NeMo's decoder)
    GEPARD_CODEC_CARRY_STATE           codec_carry_state            on CPU true, on CUDA false (each stream keeps
                                                                    the decoder's conv tails between chunks, so a
                                                                    chunk decodes its new frames only, not 25 of
                                                                    context as well; the torch decoder decodes,
                                                                    beside NeMo's encoder; off on CUDA until
                                                                    measured on a GPU)
    GEPARD_CODEC_FUSED_ACTIVATIONS     codec_fused_activations      on CUDA true, on CPU false (each snake activation
                                                                    of the torch decoder one Triton kernel instead
                                                                    of ten eager ops, the next conv's pad and the
                                                                    residual add or chains' mean it reads, and
                                                                    with carried state each conv's state read and
                                                                    its activation one instead of five; off with
                                                                    GEPARD_CODEC_COMPILE, which fuses them itself)
    GEPARD_BACKEND                     backend                      auto (auto | vllm | torch; auto: vLLM, or torch
                                                                    where vLLM does not import or start)
    GEPARD_DEVICE                      device                       auto (cpu, cuda, cuda:1, ...)
    GEPARD_DTYPE                       dtype                        auto (float32 | bfloat16 | float16; auto:
                                                                    bf16 on GPUs of compute capability 8.0+,
                                                                    float32 on older GPUs and on CPU)
    GEPARD_VLLM_RUNNER                 vllm_runner                  v1 (v1 | v2: vLLM's model runner; v1 runs
                                                                    the adapter the CPU tests cover, on GPU too)
    GEPARD_ENGINE_STALL_TIMEOUT_S      engine_stall_timeout_s       60 (vLLM backend: with requests unfinished
                                                                    and no engine step for this long, the engine
                                                                    is declared dead: /health fails, waiting
                                                                    streams get engine_unavailable; 0: off)
    GEPARD_TORCH_PATH                  torch_path                   auto (auto | reference | fast: the torch
                                                                    backend's loop; auto: fast on CUDA only)
    GEPARD_TORCH_COMPILE               torch_compile                false (the fast path's decode step and prefill
                                                                    through torch.compile; off until measured on a
                                                                    GPU)
    GEPARD_TORCH_OVERLAP               torch_overlap                true (the fast path launches each decode step
                                                                    before reading the last one's results; faster
                                                                    at every batch measured on an H200)
    GEPARD_TORCH_PREFILL_GRAPHS        torch_prefill_graphs         false (the fast path's prefill replayed as CUDA
                                                                    graphs too, one per padded shape, captured at
                                                                    first use; off until measured on a GPU)
    GEPARD_TORCH_PREFILL_BATCH         torch_prefill_batch          on CUDA 64, on CPU 8 (the fast path's new
                                                                    requests prefilled together in one step: a
                                                                    burst of N streams waits N / that many steps
                                                                    for its last first frame)
    GEPARD_TORCH_FUSED_KERNELS         torch_fused_kernels          on CUDA true, on CPU false (each layer's norms,
                                                                    rotary, attention gate and SwiGLU activation of
                                                                    the fast path one Triton kernel each, and its
                                                                    inputs, sampling and commit four more; off with
                                                                    GEPARD_TORCH_COMPILE, which fuses them itself)
    GEPARD_TORCH_STREAM_PRIORITY       torch_stream_priority        high (high | normal: the fast path's CUDA stream
                                                                    against the codec's; high: a step's kernels
                                                                    start before the codec's waiting ones; no
                                                                    effect on CPU)
    GEPARD_API_KEYS                    api_keys                     none (comma-separated)
    GEPARD_REQUIRE_AUTH                require_auth                 true when API keys are set, else false
    GEPARD_TOKEN_SECRET                token_secret                 random per process (tokens then only
                                                                    verify on this replica; a warning says so)
    GEPARD_METRICS_TOKEN               metrics_token                none: /metrics answers anyone; set (16+
                                                                    characters): only ``Authorization: Bearer
                                                                    <token>`` (Prometheus' ``authorization``)
    GEPARD_TLS_CERTFILE / _KEYFILE     tls_certfile, tls_keyfile    none (both or neither; JS SDKs need wss)
    GEPARD_REDIS_URL, else REDIS_URL   redis_url                    none (embedded stores)
    GEPARD_DATA_DIR                    data_dir                     ./data
    GEPARD_PRELOAD_DIR                 preload_dir                  none: a directory of clips cloned into
                                                                    read-only voices at start-up (idempotent)
    GEPARD_MAX_REF_SECONDS             max_ref_seconds              15 (keep the first N s of a clone clip;
                                                                    0 keeps all, else at least 3)
    GEPARD_MAX_CLIP_BYTES              max_clip_bytes               20000000 (largest clone upload, bytes)
    GEPARD_MAX_CONCURRENT_CLONES       max_concurrent_clones        4 (voice clones run at once; more wait up to
                                                                    3 s for a place, then get 429)
    GEPARD_CLONE_UPLOAD_TIMEOUT_S      clone_upload_timeout_s       120 (a clone's whole request body must
                                                                    arrive within this; else 408)
    GEPARD_MAX_TRANSCRIPT_CHARS        max_transcript_chars         5000
    GEPARD_MAX_PAUSE_S                 max_pause_s                  120 (the <break> tags of one request or
                                                                    WebSocket context add up to at most this;
                                                                    each is at most 10 s)
    GEPARD_WS_IDLE_TIMEOUT_S           ws_idle_timeout_s            300 (Cartesia closes idle sockets at 5 min)
    GEPARD_MAX_CONTEXTS_PER_SOCKET     max_contexts_per_socket      64
    GEPARD_WS_CONTEXT_HOLD_S           ws_context_hold_s            10 (an open context with nothing to say
                                                                    gives its stream place back after this)
    GEPARD_MAX_CONCURRENT_GENERATIONS  max_concurrent_generations   64 (on a GPU, the torch fast path's KV cache
                                                                    slots: 112 MiB each at full size in bf16)
    GEPARD_MODEL_IDS                   model_ids                    gepard-1.0,gepard-latest,sonic,sonic-*
    GEPARD_TEMPERATURE ...             temperature, top_k, repetition_penalty, stop_threshold, max_frames,
                                       cfg_scale, cfg_frames: server-wide sampling defaults (0.4, 0, 1.0,
                                       0.5, none, 1.0, none); requests may override them
    GEPARD_CHUNK_SCHEDULE              chunk_schedule               None: by device (frames per audio chunk, the
                                                                    last repeating; 2,4,8,32 on a GPU: the first
                                                                    after 2 frames (~93 ms of audio at 21.5 fps);
                                                                    4,16 on CPU, where the codec bounds capacity;
                                                                    codec_worker.schedule). Replaces
                                                                    GEPARD_FIRST_CHUNK_FRAMES and
                                                                    GEPARD_CHUNK_FRAMES, which are refused)
    GEPARD_MAX_STREAMS                 max_streams                  64 (open WebSocket contexts + HTTP TTS
                                                                    requests in this process; more get 429)
    GEPARD_MAX_STREAMS_PER_KEY         max_streams_per_key          0 (per API key; 0: no per-key limit)
    GEPARD_ADMIT_MAX_SATURATION        admit_max_saturation         0.9 (admit a new stream only while the
                                                                    streams generating would stay at or under
                                                                    this real-time factor; 0 turns it off)
    GEPARD_ADMIT_MIN_STREAMS           admit_min_streams            1 (always admitted, whatever the load)
    GEPARD_WS_COMPRESSION              ws_compression               false (accept permessage-deflate when a client
                                                                    offers it: a third less bandwidth for speech,
                                                                    but the event loop then deflates every chunk,
                                                                    its largest cost; bench/loop_cost.py)
    GEPARD_WS_SEND_TIMEOUT_S           ws_send_timeout_s            10 (a socket whose client reads nothing for
                                                                    this long is closed, its contexts cancelled)
    GEPARD_HTTP_SEND_TIMEOUT_S         http_send_timeout_s          10 (an HTTP response whose client reads
                                                                    nothing for this long is dropped, its
                                                                    stream's work stopped)
    GEPARD_MAX_CONTEXT_TEXT_CHARS      max_context_text_chars       50000 (text a context may hold unspoken)
    GEPARD_MAX_SOCKET_TEXT_CHARS       max_socket_text_chars        200000 (text all contexts of a socket may
                                                                    hold unspoken)
    GEPARD_LOG_LEVEL                   log_level                    INFO
    GEPARD_LOG_FORMAT                  log_format                   text (text | json)
    GEPARD_KEY_CACHE_TTL_S             key_cache_ttl_s              2 (a key found in Redis is believed this
                                                                    long: a removed key and its tokens stop
                                                                    working within it; 0 asks every time)
    GEPARD_MAX_HEADER_BYTES            max_header_bytes             65536 (request line + headers of one HTTP
                                                                    request or WebSocket upgrade; more: 431)
    GEPARD_DRAIN_TIMEOUT_S             drain_timeout_s              30 (on SIGTERM, open streams get this long to
                                                                    finish before they are cut; api/lifecycle.py)

Model ids: SDKs default to Cartesia names ("sonic-3", "sonic-latest"), so by default every ``sonic``
id is accepted and served by Gepard, as are "gepard-1.0" and "gepard-latest"; anything else gets
400 ``model_not_found``. Entries are shell-style patterns (``*`` accepts every id).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
import re
import secrets
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from api.errors import UnknownModelError
from engine.requests import SAMPLING_BOUNDS, SamplingParams
from voices.audio_input import DEFAULT_MAX_BYTES, DEFAULT_MAX_REF_SECONDS, DEFAULT_MIN_SECONDS
from voices.cloning import MAX_CONCURRENT_CLONES

if TYPE_CHECKING:
    from api.admission import AdmissionLimits

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_MODEL", "DEFAULT_MODEL_IDS", "Settings", "SettingsError", "api_key_problem", "device_problem"]

DEFAULT_MODEL = "nineninesix/gepard-1.0"  # same default as engine.checkpoint.DEFAULT_MODEL
DEFAULT_MODEL_IDS = ("gepard-1.0", "gepard-latest", "sonic", "sonic-*")
BACKENDS = ("auto", "vllm", "torch")
CODEC_IMPLS = ("auto", "nemo", "torch")  # codec_worker.nanocodec.load_codec
DTYPES = ("auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16")
VLLM_RUNNERS = ("v1", "v2")  # engine.backends.vllm_runner.RUNNERS (api/ does not import a backend)
TORCH_PATHS = ("auto", "reference", "fast")  # engine.backends.torch_fast.PATHS
TORCH_STREAM_PRIORITIES = ("high", "normal")  # engine.backends.cuda_graphs.STREAM_PRIORITIES
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")
MIN_TOKEN_SECRET_BYTES = 16
MIN_METRICS_TOKEN_CHARS = 16  # a scrape credential, guessable when short
# Frames per audio chunk, growing; the last repeats (codec_worker.schedule, whose limits these are:
# api/ validates here so a bad value stops the server at start with the variable's name). Unset,
# the codec's device picks it (codec_worker.schedule.default_schedule).
MAX_CHUNK_SCHEDULE_STEPS = 16
MAX_CHUNK_FRAMES = 2000
# Variables that no longer exist: setting one stops the server instead of being silently ignored.
_REPLACED = {
    name: "was replaced by GEPARD_CHUNK_SCHEDULE (frames per chunk, e.g. 2,4,8,32: the first chunk, then growing "
          "sizes, the last repeating; the old FIRST_CHUNK_FRAMES=f and CHUNK_FRAMES=c are GEPARD_CHUNK_SCHEDULE=f,c)"
    for name in ("GEPARD_FIRST_CHUNK_FRAMES", "GEPARD_CHUNK_FRAMES")
}
_DEVICE_RE = re.compile(r"auto|cpu|mps|(?:cuda|xpu)(?::\d+)?")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class SettingsError(ValueError):
    """One or more settings are invalid; the message names every variable and its problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid settings: " + "; ".join(problems))
        self.problems = problems


def _env(name: str, **extra: Any) -> Any:
    return {"env": name, **extra}


@dataclass(frozen=True)
class Settings:
    """The gateway's configuration (see the module docstring for variables and defaults)."""

    host: str = field(default="127.0.0.1", metadata=_env("GEPARD_HOST"))
    port: int = field(default=8000, metadata=_env("GEPARD_PORT"))
    model: str = field(default=DEFAULT_MODEL, metadata=_env("GEPARD_MODEL"))
    codec: Optional[str] = field(default=None, metadata=_env("GEPARD_CODEC"))
    codec_impl: str = field(default="auto", metadata=_env("GEPARD_CODEC_IMPL"))
    codec_compile: bool = field(default=False, metadata=_env("GEPARD_CODEC_COMPILE"))
    codec_cuda_graphs: bool = field(default=True, metadata=_env("GEPARD_CODEC_CUDA_GRAPHS"))
    codec_carry_state: Optional[bool] = field(default=None, metadata=_env("GEPARD_CODEC_CARRY_STATE"))  # None: by device
    codec_fused_activations: Optional[bool] = field(default=None, metadata=_env("GEPARD_CODEC_FUSED_ACTIVATIONS"))  # None: by device
    backend: str = field(default="auto", metadata=_env("GEPARD_BACKEND"))
    device: str = field(default="auto", metadata=_env("GEPARD_DEVICE"))
    dtype: str = field(default="auto", metadata=_env("GEPARD_DTYPE"))
    vllm_runner: str = field(default="v1", metadata=_env("GEPARD_VLLM_RUNNER"))
    engine_stall_timeout_s: float = field(default=60.0, metadata=_env("GEPARD_ENGINE_STALL_TIMEOUT_S"))
    torch_path: str = field(default="auto", metadata=_env("GEPARD_TORCH_PATH"))
    torch_compile: bool = field(default=False, metadata=_env("GEPARD_TORCH_COMPILE"))
    torch_overlap: bool = field(default=True, metadata=_env("GEPARD_TORCH_OVERLAP"))
    torch_prefill_graphs: bool = field(default=False, metadata=_env("GEPARD_TORCH_PREFILL_GRAPHS"))
    torch_prefill_batch: Optional[int] = field(default=None, metadata=_env("GEPARD_TORCH_PREFILL_BATCH"))  # None: by device
    torch_fused_kernels: Optional[bool] = field(default=None, metadata=_env("GEPARD_TORCH_FUSED_KERNELS"))  # None: by device
    torch_stream_priority: str = field(default="high", metadata=_env("GEPARD_TORCH_STREAM_PRIORITY"))
    api_keys: frozenset[str] = field(default=frozenset(), repr=False, metadata=_env("GEPARD_API_KEYS"))
    require_auth: Optional[bool] = field(default=None, metadata=_env("GEPARD_REQUIRE_AUTH"))
    token_secret: bytes = field(
        default_factory=lambda: secrets.token_bytes(32), repr=False, metadata=_env("GEPARD_TOKEN_SECRET")
    )
    token_secret_ephemeral: bool = True  # True when token_secret was generated for this process
    metrics_token: Optional[str] = field(default=None, repr=False, metadata=_env("GEPARD_METRICS_TOKEN"))
    tls_certfile: Optional[Path] = field(default=None, metadata=_env("GEPARD_TLS_CERTFILE"))
    tls_keyfile: Optional[Path] = field(default=None, metadata=_env("GEPARD_TLS_KEYFILE"))
    redis_url: Optional[str] = field(default=None, repr=False, metadata=_env("GEPARD_REDIS_URL", fallback="REDIS_URL"))
    data_dir: Path = field(default=Path("./data"), metadata=_env("GEPARD_DATA_DIR"))
    preload_dir: Optional[Path] = field(default=None, metadata=_env("GEPARD_PRELOAD_DIR"))
    max_ref_seconds: float = field(default=DEFAULT_MAX_REF_SECONDS, metadata=_env("GEPARD_MAX_REF_SECONDS"))
    max_clip_bytes: int = field(default=DEFAULT_MAX_BYTES, metadata=_env("GEPARD_MAX_CLIP_BYTES"))
    max_concurrent_clones: int = field(default=MAX_CONCURRENT_CLONES, metadata=_env("GEPARD_MAX_CONCURRENT_CLONES"))
    clone_upload_timeout_s: float = field(default=120.0, metadata=_env("GEPARD_CLONE_UPLOAD_TIMEOUT_S"))
    max_transcript_chars: int = field(default=5000, metadata=_env("GEPARD_MAX_TRANSCRIPT_CHARS"))
    max_pause_s: float = field(default=120.0, metadata=_env("GEPARD_MAX_PAUSE_S"))
    ws_idle_timeout_s: float = field(default=300.0, metadata=_env("GEPARD_WS_IDLE_TIMEOUT_S"))
    max_contexts_per_socket: int = field(default=64, metadata=_env("GEPARD_MAX_CONTEXTS_PER_SOCKET"))
    ws_context_hold_s: float = field(default=10.0, metadata=_env("GEPARD_WS_CONTEXT_HOLD_S"))
    max_concurrent_generations: int = field(default=64, metadata=_env("GEPARD_MAX_CONCURRENT_GENERATIONS"))
    model_ids: tuple[str, ...] = field(default=DEFAULT_MODEL_IDS, metadata=_env("GEPARD_MODEL_IDS"))
    temperature: float = field(default=0.4, metadata=_env("GEPARD_TEMPERATURE"))
    top_k: int = field(default=0, metadata=_env("GEPARD_TOP_K"))
    repetition_penalty: float = field(default=1.0, metadata=_env("GEPARD_REPETITION_PENALTY"))
    stop_threshold: float = field(default=0.5, metadata=_env("GEPARD_STOP_THRESHOLD"))
    max_frames: Optional[int] = field(default=None, metadata=_env("GEPARD_MAX_FRAMES"))
    cfg_scale: float = field(default=1.0, metadata=_env("GEPARD_CFG_SCALE"))
    cfg_frames: Optional[int] = field(default=None, metadata=_env("GEPARD_CFG_FRAMES"))
    chunk_schedule: Optional[tuple[int, ...]] = field(default=None, metadata=_env("GEPARD_CHUNK_SCHEDULE"))
    max_streams: int = field(default=64, metadata=_env("GEPARD_MAX_STREAMS"))
    max_streams_per_key: int = field(default=0, metadata=_env("GEPARD_MAX_STREAMS_PER_KEY"))
    admit_max_saturation: float = field(default=0.9, metadata=_env("GEPARD_ADMIT_MAX_SATURATION"))
    admit_min_streams: int = field(default=1, metadata=_env("GEPARD_ADMIT_MIN_STREAMS"))
    ws_compression: bool = field(default=False, metadata=_env("GEPARD_WS_COMPRESSION"))
    ws_send_timeout_s: float = field(default=10.0, metadata=_env("GEPARD_WS_SEND_TIMEOUT_S"))
    http_send_timeout_s: float = field(default=10.0, metadata=_env("GEPARD_HTTP_SEND_TIMEOUT_S"))
    max_context_text_chars: int = field(default=50_000, metadata=_env("GEPARD_MAX_CONTEXT_TEXT_CHARS"))
    max_socket_text_chars: int = field(default=200_000, metadata=_env("GEPARD_MAX_SOCKET_TEXT_CHARS"))
    log_level: str = field(default="INFO", metadata=_env("GEPARD_LOG_LEVEL"))
    log_format: str = field(default="text", metadata=_env("GEPARD_LOG_FORMAT"))
    key_cache_ttl_s: float = field(default=2.0, metadata=_env("GEPARD_KEY_CACHE_TTL_S"))
    max_header_bytes: int = field(default=64 * 1024, metadata=_env("GEPARD_MAX_HEADER_BYTES"))
    drain_timeout_s: float = field(default=30.0, metadata=_env("GEPARD_DRAIN_TIMEOUT_S"))

    def __post_init__(self) -> None:
        # normalise types first (replace() and direct construction may pass str / lists)
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731  (frozen dataclass)
        set_("api_keys", frozenset(self.api_keys))
        set_("model_ids", tuple(self.model_ids))
        if self.chunk_schedule is not None:
            set_("chunk_schedule", tuple(self.chunk_schedule))
        set_("log_level", str(self.log_level).upper())
        for name in ("tls_certfile", "tls_keyfile"):
            value = getattr(self, name)
            set_(name, None if value is None else Path(value))
        set_("data_dir", Path(self.data_dir))
        if self.preload_dir is not None:
            set_("preload_dir", Path(self.preload_dir))
        if self.require_auth is None:
            set_("require_auth", bool(self.api_keys))
        problems = self._problems()
        if problems:
            raise SettingsError(problems)

    # -- validation --------------------------------------------------------------------------

    @classmethod
    def env_name(cls, field_name: str) -> str:
        """The variable that sets ``field_name`` (``port`` -> ``GEPARD_PORT``)."""
        return cls.__dataclass_fields__[field_name].metadata.get("env", field_name)

    def _problems(self) -> list[str]:
        problems: list[str] = []

        def bad(name: str, message: str) -> None:
            problems.append(f"{self.env_name(name)}: {message}")

        def in_range(
            name: str, lo: float, hi: Optional[float] = None, lo_open: bool = False, optional: bool = False
        ) -> None:
            value = getattr(self, name)
            if value is None and optional:
                return
            if value is None or (value <= lo if lo_open else value < lo) or (hi is not None and value > hi):
                if hi is not None:
                    bad(name, f"must be between {lo:g} and {hi:g}, got {value!r}")
                else:
                    bad(name, f"must be {'>' if lo_open else '>='} {lo:g}, got {value!r}")

        def choice(name: str, accepted: tuple[str, ...]) -> None:
            if getattr(self, name) not in accepted:
                bad(name, f"{getattr(self, name)!r} is not supported; expected one of {', '.join(accepted)}")

        if not self.host:
            bad("host", "must not be empty")
        in_range("port", 1, 65535)
        if not self.model:
            bad("model", "must not be empty")
        choice("backend", BACKENDS)
        problem = device_problem(self.device)
        if problem is not None:
            bad("device", problem)
        choice("dtype", DTYPES)
        choice("codec_impl", CODEC_IMPLS)
        choice("vllm_runner", VLLM_RUNNERS)
        choice("torch_path", TORCH_PATHS)
        choice("torch_stream_priority", TORCH_STREAM_PRIORITIES)
        in_range("engine_stall_timeout_s", 0, 86400)
        for key in self.api_keys:
            problem = api_key_problem(key)
            if problem is not None:
                bad("api_keys", problem)
                break
        if self.require_auth and not self.api_keys and not self.redis_url:
            bad("require_auth", "is true but GEPARD_API_KEYS is empty and no Redis key store is configured, "
                "so no request could authenticate")
        if not isinstance(self.token_secret, (bytes, bytearray)) or len(self.token_secret) < MIN_TOKEN_SECRET_BYTES:
            bad("token_secret", f"must be at least {MIN_TOKEN_SECRET_BYTES} bytes long")
        token = self.metrics_token
        if token is not None and (len(token) < MIN_METRICS_TOKEN_CHARS or any(c.isspace() for c in token)):
            bad("metrics_token", f"must be at least {MIN_METRICS_TOKEN_CHARS} characters without spaces "
                "(e.g. openssl rand -hex 32)")
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            problems.append("GEPARD_TLS_CERTFILE and GEPARD_TLS_KEYFILE: set both or neither")
        for name in ("tls_certfile", "tls_keyfile"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                bad(name, f"file {str(path)!r} does not exist")
        if self.tls_certfile is not None and self.tls_keyfile is not None and self.tls_certfile.is_file() \
                and self.tls_keyfile.is_file():
            problem = _tls_problem(self.tls_certfile, self.tls_keyfile)
            if problem is not None:
                problems.append(f"GEPARD_TLS_CERTFILE and GEPARD_TLS_KEYFILE: {problem}")
        if self.codec is not None and _looks_like_path(self.codec) and not Path(self.codec).expanduser().exists():
            bad("codec", f"{self.codec!r} does not exist (expected a NanoCodec .nemo file, a codec directory or a "
                "Hugging Face repo id such as nvidia/nemo-nano-codec-22khz-1.89kbps-21.5fps)")
        if self.redis_url is not None and not re.match(r"(rediss?|unix)://", self.redis_url):
            bad("redis_url", "must start with redis://, rediss:// or unix://")
        if self.redis_url is None:  # the embedded store (SQLite) lives here; with Redis it is unused
            problem = _writable_dir_problem(self.data_dir)
            if problem is not None:
                bad("data_dir", problem)
        if self.preload_dir is not None and not self.preload_dir.is_dir():
            bad("preload_dir", f"directory {str(self.preload_dir)!r} does not exist")
        if self.max_ref_seconds != 0 and not self.max_ref_seconds >= DEFAULT_MIN_SECONDS:
            bad("max_ref_seconds", f"must be 0 (keep whole clips) or >= {DEFAULT_MIN_SECONDS:g} (the shortest "
                f"clip accepted), got {self.max_ref_seconds!r}")
        in_range("max_clip_bytes", 1)
        in_range("max_concurrent_clones", 1)
        in_range("clone_upload_timeout_s", 0, lo_open=True)
        in_range("max_transcript_chars", 1)
        in_range("max_pause_s", 0)
        in_range("ws_idle_timeout_s", 0, lo_open=True)
        in_range("max_contexts_per_socket", 1)
        in_range("ws_context_hold_s", 0)
        in_range("max_concurrent_generations", 1)
        in_range("torch_prefill_batch", 1, 1024, optional=True)
        if not self.model_ids or any(not pattern for pattern in self.model_ids):
            bad("model_ids", "must list at least one model id (use * to accept every id)")
        # the sampling defaults: exactly the ranges the wire and the engines accept
        for name in ("temperature", "top_k", "repetition_penalty", "stop_threshold", "max_frames", "cfg_scale",
                     "cfg_frames"):
            value = getattr(self, name)
            problem = None if value is None else SAMPLING_BOUNDS[name].problem(value)
            if problem is not None:
                bad(name, problem)
        schedule = self.chunk_schedule
        if schedule is not None and (not 1 <= len(schedule) <= MAX_CHUNK_SCHEDULE_STEPS or any(
                isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CHUNK_FRAMES for n in schedule)):
            bad("chunk_schedule", f"must be 1 to {MAX_CHUNK_SCHEDULE_STEPS} frame counts, each between 1 and "
                f"{MAX_CHUNK_FRAMES}, got {','.join(map(str, self.chunk_schedule)) or 'nothing'}")
        in_range("max_streams", 1)
        in_range("max_streams_per_key", 0)
        in_range("admit_max_saturation", 0)
        in_range("admit_min_streams", 0)
        in_range("ws_send_timeout_s", 0, lo_open=True)
        in_range("http_send_timeout_s", 0, lo_open=True)
        in_range("max_context_text_chars", 1)
        in_range("max_socket_text_chars", 1)
        choice("log_level", LOG_LEVELS)
        choice("log_format", LOG_FORMATS)
        in_range("key_cache_ttl_s", 0, 60)
        in_range("max_header_bytes", 4096, 16 * 1024 * 1024)  # below 4 KiB ordinary clients break
        in_range("drain_timeout_s", 0, 3600)
        return problems

    # -- derived values ----------------------------------------------------------------------

    @property
    def tls_enabled(self) -> bool:
        return self.tls_certfile is not None

    @property
    def admission_limits(self) -> "AdmissionLimits":
        from api.admission import AdmissionLimits

        return AdmissionLimits(max_streams=self.max_streams, max_streams_per_key=self.max_streams_per_key,
                               max_saturation=self.admit_max_saturation, min_streams=self.admit_min_streams)

    @property
    def default_sampling(self) -> SamplingParams:
        """Server-wide sampling defaults that request extras are laid over."""
        return SamplingParams(
            temperature=self.temperature,
            top_k=self.top_k,
            repetition_penalty=self.repetition_penalty,
            stop_threshold=self.stop_threshold,
            max_frames=self.max_frames,
            cfg_scale=self.cfg_scale,
            cfg_frames=self.cfg_frames,
        )

    def accepts_model(self, model_id: str) -> bool:
        return any(fnmatch.fnmatchcase(model_id, pattern) for pattern in self.model_ids)

    def check_model_id(self, model_id: str) -> None:
        """Raise UnknownModelError (400 model_not_found) unless ``model_id`` is served here."""
        if not self.accepts_model(model_id):
            raise UnknownModelError(model_id, self.model_ids)

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None, **overrides: Any) -> "Settings":
        """Settings from ``env`` (default ``os.environ``) with non-None ``overrides`` on top.

        Raises SettingsError naming every bad variable. Logs a warning when the token secret is
        generated for this process (access tokens then verify on this replica only), and when more
        streams are admitted than generations may run (a stream can then be refused mid-utterance).
        """
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        problems: list[str] = [f"{name}: {why}" for name, why in _REPLACED.items() if (env.get(name) or "").strip()]
        for f in dataclasses.fields(cls):
            name = f.metadata.get("env")
            if name is None:
                continue
            raw = env.get(name)
            if (raw is None or not raw.strip()) and f.metadata.get("fallback"):
                name, raw = f.metadata["fallback"], env.get(f.metadata["fallback"])
            if raw is None or not raw.strip():
                continue
            try:
                values[f.name] = _PARSERS.get(f.name, _parse_str)(raw.strip())
            except ValueError as exc:
                problems.append(f"{name}: {exc}")
        if problems:
            raise SettingsError(problems)
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "token_secret" in values:
            values.setdefault("token_secret_ephemeral", False)
        settings = cls(**values)
        if settings.token_secret_ephemeral:
            logger.warning(
                "GEPARD_TOKEN_SECRET is not set: using a random secret, so access tokens only verify on this "
                "replica and stop working after a restart"
            )
        if settings.max_streams > settings.max_concurrent_generations:
            # each stream runs one generation at a time, so with more streams than generations an
            # admitted stream can be refused (429 concurrency_limited) in the middle of its utterance
            logger.warning(
                "GEPARD_MAX_STREAMS (%d) is above GEPARD_MAX_CONCURRENT_GENERATIONS (%d): streams admitted past "
                "%d can be refused mid-utterance while the others generate; raise the generations or lower the "
                "streams", settings.max_streams, settings.max_concurrent_generations,
                settings.max_concurrent_generations)
        return settings


# --- checks shared with the CLI ------------------------------------------------------------------


def api_key_problem(key: str) -> Optional[str]:
    """Why ``key`` cannot be an API key, or None. HTTP strips the spaces around a header value, so a
    key with spaces (or a newline) around it could never match what a client sends; a comma cannot
    be listed in GEPARD_API_KEYS. The same rule holds for keys stored in Redis (``gepard keys add``)."""
    if not key or key != key.strip() or "," in key:
        return "keys must be non-empty, without spaces around them or commas"
    return None


def device_problem(device: str) -> Optional[str]:
    """Why ``device`` cannot be used here, or None: not a device name, or an accelerator this machine
    lacks (found now, not as an assertion deep in the model load)."""
    if not _DEVICE_RE.fullmatch(device):
        return f"{device!r} is not a device; expected auto, cpu, cuda, cuda:N or mps"
    kind, _, index = device.partition(":")
    if kind in ("auto", "cpu"):
        return None
    import torch  # only for an accelerator named explicitly

    if kind == "mps" and not torch.backends.mps.is_available():
        return "'mps' is not available on this machine"
    if kind in ("cuda", "xpu"):
        # device_count() asks NVML, so unlike torch.cuda.is_available() it leaves CUDA uninitialised
        # for processes forked later (vLLM's workers)
        module = getattr(torch, kind, None)
        count = module.device_count() if module is not None else 0
        if count <= int(index or 0):
            seen = f"{count} {kind.upper()} device(s)" if count else f"no {kind.upper()} device"
            return f"{device!r} is not available: torch {torch.__version__} sees {seen}"
    return None


def _looks_like_path(codec: str) -> bool:
    """Whether a GEPARD_CODEC value names a local file or directory rather than a Hugging Face repo id
    (``owner/name``, which codec_worker._checkpoint.read_source downloads and cannot be checked offline)."""
    return codec.startswith(("/", ".", "~")) or codec.endswith(".nemo") or codec.count("/") != 1


def _tls_problem(certfile: Path, keyfile: Path) -> Optional[str]:
    """Why uvicorn could not load the certificate and key, or None; checked here because uvicorn loads
    them only when it starts serving, and fails there with a bare traceback."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        # an encrypted key fails rather than prompting for a passphrase (uvicorn is given none)
        context.load_cert_chain(str(certfile), str(keyfile), password=lambda: b"")
    except (ssl.SSLError, OSError) as exc:
        return f"cannot load them as a PEM certificate (chain) and its unencrypted private key ({exc})"
    return None


def _writable_dir_problem(path: Path) -> Optional[str]:
    """Why ``path`` cannot be a writable directory, or None: it must be one, or be creatable in its
    nearest existing ancestor. Creates nothing (Settings are built, and rebuilt, in tests and tools)."""
    try:
        if path.exists():
            if not path.is_dir():
                return f"{str(path)!r} exists but is not a directory"
            if not os.access(path, os.W_OK | os.X_OK):
                return f"directory {str(path)!r} is not writable"
            return None
        ancestor = next(p for p in path.absolute().parents if p.exists())
    except OSError as exc:  # e.g. a parent we may not search
        return f"cannot use {str(path)!r} as a directory: {exc}"
    if not ancestor.is_dir():
        return f"cannot create directory {str(path)!r}: {str(ancestor)!r} is not a directory"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"cannot create directory {str(path)!r}: {str(ancestor)!r} is not writable"
    return None


# --- environment value parsers ------------------------------------------------------------------


def _parse_str(raw: str) -> str:
    return raw


def _parse_int(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{raw!r} is not an integer") from None


def _parse_float(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{raw!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{raw!r} is not a finite number")
    return value


def _parse_bool(raw: str) -> bool:
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ValueError(f"{raw!r} is not a boolean; expected one of {', '.join(_TRUE + _FALSE)}")


def _parse_list(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def _parse_int_list(raw: str) -> tuple[int, ...]:
    return tuple(_parse_int(item) for item in _parse_list(raw))


def _parse_secret(raw: str) -> bytes:
    return raw.encode("utf-8")


_PARSERS: dict[str, Callable[[str], Any]] = {
    "port": _parse_int,
    "api_keys": lambda raw: frozenset(_parse_list(raw)),
    "require_auth": _parse_bool,
    "codec_compile": _parse_bool,
    "codec_cuda_graphs": _parse_bool,
    "codec_carry_state": _parse_bool,
    "codec_fused_activations": _parse_bool,
    "torch_fused_kernels": _parse_bool,
    "torch_compile": _parse_bool,
    "torch_overlap": _parse_bool,
    "torch_prefill_graphs": _parse_bool,
    "token_secret": _parse_secret,
    "tls_certfile": Path,
    "tls_keyfile": Path,
    "data_dir": Path,
    "preload_dir": Path,
    "max_ref_seconds": _parse_float,
    "max_clip_bytes": _parse_int,
    "max_concurrent_clones": _parse_int,
    "clone_upload_timeout_s": _parse_float,
    "max_transcript_chars": _parse_int,
    "max_pause_s": _parse_float,
    "ws_idle_timeout_s": _parse_float,
    "max_contexts_per_socket": _parse_int,
    "ws_context_hold_s": _parse_float,
    "max_concurrent_generations": _parse_int,
    "torch_prefill_batch": _parse_int,
    "model_ids": _parse_list,
    "temperature": _parse_float,
    "top_k": _parse_int,
    "repetition_penalty": _parse_float,
    "stop_threshold": _parse_float,
    "max_frames": _parse_int,
    "cfg_scale": _parse_float,
    "cfg_frames": _parse_int,
    "chunk_schedule": _parse_int_list,
    "max_streams": _parse_int,
    "max_streams_per_key": _parse_int,
    "admit_max_saturation": _parse_float,
    "admit_min_streams": _parse_int,
    "ws_compression": _parse_bool,
    "ws_send_timeout_s": _parse_float,
    "http_send_timeout_s": _parse_float,
    "max_context_text_chars": _parse_int,
    "max_socket_text_chars": _parse_int,
    "key_cache_ttl_s": _parse_float,
    "max_header_bytes": _parse_int,
    "drain_timeout_s": _parse_float,
    "engine_stall_timeout_s": _parse_float,
}
