"""api/settings.py: every variable parsed from an environment mapping, defaults, CLI overrides,
validation messages that name the variable, model-id matching and the token-secret warning."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from api.errors import UnknownModelError
from api.settings import DEFAULT_MODEL_IDS, Settings, SettingsError
from engine.requests import SamplingParams

SECRET = "s" * 32


def test_defaults():
    s = Settings.from_env({})
    assert (s.host, s.port, s.model, s.codec) == ("127.0.0.1", 8000, "nineninesix/gepard-1.0", None)
    assert (s.backend, s.device, s.dtype, s.vllm_runner) == ("auto", "auto", "auto", "v1")
    assert (s.torch_path, s.torch_compile, s.torch_overlap, s.codec_compile) == ("auto", False, True, False)
    assert s.codec_cuda_graphs is True  # a no-op on CPU and on NeMo's decoder
    assert s.codec_carry_state is None  # chosen by device at start (codec_worker.nanocodec.carries_state_by_default)
    assert s.codec_fused_activations is None  # likewise (fuses_activations_by_default)
    assert s.torch_fused_kernels is None  # likewise (engine.backends.layer_ops.fuses_by_default)
    assert s.torch_prefill_batch is None  # likewise (engine.backends.torch_fast.default_prefill_batch)
    assert s.torch_stream_priority == "high"
    assert s.api_keys == frozenset() and s.require_auth is False
    assert s.token_secret_ephemeral and len(s.token_secret) == 32
    assert s.tls_certfile is None and s.tls_keyfile is None and not s.tls_enabled
    assert s.redis_url is None and s.data_dir == Path("./data")
    assert s.max_transcript_chars == 5000 and s.ws_idle_timeout_s == 300.0 and s.max_pause_s == 120.0
    assert s.ws_compression is False  # permessage-deflate refused: the event loop deflates nothing
    assert s.max_contexts_per_socket == 64 and s.max_concurrent_generations == 64
    assert s.model_ids == DEFAULT_MODEL_IDS
    assert s.default_sampling == SamplingParams(temperature=0.4, top_k=0, repetition_penalty=1.0, stop_threshold=0.5,
                                                max_frames=None, cfg_scale=1.0, cfg_frames=None)
    assert (s.chunk_schedule, s.log_level, s.log_format) == (None, "INFO", "text")  # None: by the codec's device


def write_tls_files(folder: Path) -> tuple[Path, Path]:
    """A certificate chain and its key that load (trustme)."""
    import trustme

    issued = trustme.CA().issue_cert("localhost")
    cert, key = folder / "cert.pem", folder / "key.pem"
    issued.private_key_and_cert_chain_pem.write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    return cert, key


def test_every_variable(tmp_path, monkeypatch):
    cert, key = write_tls_files(tmp_path)
    codec = tmp_path / "codec.nemo"  # a path value must exist (its contents are the loader's to check)
    codec.write_bytes(b"")
    monkeypatch.setattr("torch.cuda.device_count", lambda: 2)  # GEPARD_DEVICE=cuda:1 needs a second GPU
    env = {
        "GEPARD_HOST": "0.0.0.0", "GEPARD_PORT": "9443", "GEPARD_MODEL": "/models/gepard", "GEPARD_CODEC": str(codec),
        "GEPARD_BACKEND": "vllm", "GEPARD_DEVICE": "cuda:1", "GEPARD_DTYPE": "bfloat16", "GEPARD_VLLM_RUNNER": "v2",
        "GEPARD_TORCH_PATH": "fast", "GEPARD_TORCH_COMPILE": "true", "GEPARD_TORCH_OVERLAP": "0",
        "GEPARD_CODEC_COMPILE": "yes", "GEPARD_CODEC_CUDA_GRAPHS": "false", "GEPARD_CODEC_CARRY_STATE": "on",
        "GEPARD_CODEC_FUSED_ACTIVATIONS": "off", "GEPARD_TORCH_FUSED_KERNELS": "no",
        "GEPARD_TORCH_PREFILL_BATCH": "64",
        "GEPARD_API_KEYS": " sk_a , sk_b,,", "GEPARD_TOKEN_SECRET": SECRET,
        "GEPARD_TLS_CERTFILE": str(cert), "GEPARD_TLS_KEYFILE": str(key), "REDIS_URL": "redis://localhost:6379/0",
        "GEPARD_DATA_DIR": str(tmp_path / "data"), "GEPARD_MAX_TRANSCRIPT_CHARS": "10000", "GEPARD_MAX_PAUSE_S": "30.5",
        "GEPARD_WS_IDLE_TIMEOUT_S": "120.5", "GEPARD_WS_COMPRESSION": "on", "GEPARD_MAX_CONTEXTS_PER_SOCKET": "8",
        "GEPARD_MAX_CONCURRENT_GENERATIONS": "128", "GEPARD_MODEL_IDS": "gepard-1.0, custom-*",
        "GEPARD_TEMPERATURE": "0.7", "GEPARD_TOP_K": "50", "GEPARD_REPETITION_PENALTY": "1.1",
        "GEPARD_STOP_THRESHOLD": "0.8", "GEPARD_MAX_FRAMES": "1000", "GEPARD_CFG_SCALE": "2.0", "GEPARD_CFG_FRAMES": "20",
        "GEPARD_CHUNK_SCHEDULE": "1, 3,9", "GEPARD_LOG_LEVEL": "debug", "GEPARD_LOG_FORMAT": "json",
    }
    s = Settings.from_env(env)
    assert (s.host, s.port, s.model, s.codec) == ("0.0.0.0", 9443, "/models/gepard", str(codec))
    assert (s.backend, s.device, s.dtype, s.vllm_runner) == ("vllm", "cuda:1", "bfloat16", "v2")
    assert (s.torch_path, s.torch_compile, s.torch_overlap, s.codec_compile) == ("fast", True, False, True)
    assert s.codec_cuda_graphs is False and s.codec_carry_state is True and s.torch_prefill_batch == 64
    assert s.codec_fused_activations is False and s.torch_fused_kernels is False
    assert s.ws_compression is True
    assert s.api_keys == {"sk_a", "sk_b"} and s.require_auth is True
    assert s.token_secret == SECRET.encode() and not s.token_secret_ephemeral
    assert s.tls_certfile == cert and s.tls_keyfile == key and s.tls_enabled
    assert s.redis_url == "redis://localhost:6379/0" and s.data_dir == tmp_path / "data"
    assert (s.max_transcript_chars, s.ws_idle_timeout_s, s.max_contexts_per_socket, s.max_concurrent_generations) == (
        10000, 120.5, 8, 128)
    assert s.max_pause_s == 30.5
    assert s.model_ids == ("gepard-1.0", "custom-*")
    assert s.default_sampling == SamplingParams(temperature=0.7, top_k=50, repetition_penalty=1.1, stop_threshold=0.8,
                                                max_frames=1000, cfg_scale=2.0, cfg_frames=20)
    assert (s.chunk_schedule, s.log_level, s.log_format) == ((1, 3, 9), "DEBUG", "json")


def test_secrets_stay_out_of_repr():
    s = Settings.from_env({"GEPARD_API_KEYS": "sk_very_secret", "GEPARD_TOKEN_SECRET": SECRET,
                           "REDIS_URL": "redis://:hunter2@redis:6379", "GEPARD_METRICS_TOKEN": "scrape_0123456789ab"})
    text = repr(s)
    assert "sk_very_secret" not in text and SECRET not in text and "hunter2" not in text
    assert s.metrics_token == "scrape_0123456789ab" and "scrape_0123456789ab" not in text


def test_gepard_redis_url_wins_over_redis_url():
    s = Settings.from_env({"REDIS_URL": "redis://a:1", "GEPARD_REDIS_URL": "redis://b:2"})
    assert s.redis_url == "redis://b:2"


def test_empty_variables_mean_unset():
    s = Settings.from_env({"GEPARD_PORT": "", "GEPARD_API_KEYS": "  ", "GEPARD_CODEC": ""})
    assert s.port == 8000 and s.api_keys == frozenset() and s.codec is None


@pytest.mark.parametrize("raw, expected", [("1", True), ("TRUE", True), ("yes", True), ("on", True),
                                           ("0", False), ("False", False), ("no", False), ("off", False)])
def test_booleans(raw, expected):
    s = Settings.from_env({"GEPARD_REQUIRE_AUTH": raw, "GEPARD_API_KEYS": "k"})
    assert s.require_auth is expected


def test_require_auth_can_be_forced_off_with_keys():
    assert Settings.from_env({"GEPARD_API_KEYS": "k", "GEPARD_REQUIRE_AUTH": "false"}).require_auth is False
    # with a Redis key store, no static keys are needed
    assert Settings.from_env({"GEPARD_REQUIRE_AUTH": "true", "REDIS_URL": "redis://r:6379"}).require_auth is True


@pytest.mark.parametrize(
    "env, message",
    [
        ({"GEPARD_PORT": "http"}, "GEPARD_PORT: 'http' is not an integer"),
        ({"GEPARD_PORT": "0"}, "GEPARD_PORT: must be between 1 and 65535, got 0"),
        ({"GEPARD_PORT": "70000"}, "GEPARD_PORT: must be between 1 and 65535, got 70000"),
        ({"GEPARD_BACKEND": "tensorrt"}, "GEPARD_BACKEND: 'tensorrt' is not supported; expected one of auto, vllm, torch"),
        ({"GEPARD_DEVICE": "gpu"}, "GEPARD_DEVICE: 'gpu' is not a device; expected auto, cpu, cuda, cuda:N or mps"),
        ({"GEPARD_DTYPE": "int8"}, "GEPARD_DTYPE: 'int8' is not supported"),
        ({"GEPARD_REQUIRE_AUTH": "maybe"}, "GEPARD_REQUIRE_AUTH: 'maybe' is not a boolean"),
        ({"GEPARD_REQUIRE_AUTH": "true"}, "GEPARD_REQUIRE_AUTH: is true but GEPARD_API_KEYS is empty"),
        ({"GEPARD_TOKEN_SECRET": "short"}, "GEPARD_TOKEN_SECRET: must be at least 16 bytes long"),
        ({"GEPARD_METRICS_TOKEN": "short"}, "GEPARD_METRICS_TOKEN: must be at least 16 characters without spaces"),
        ({"GEPARD_METRICS_TOKEN": "a token with spaces in it"}, "GEPARD_METRICS_TOKEN: must be at least 16 characters"),
        ({"GEPARD_TLS_CERTFILE": "/etc/hostname"}, "GEPARD_TLS_CERTFILE and GEPARD_TLS_KEYFILE: set both or neither"),
        ({"GEPARD_TLS_CERTFILE": "/nonexistent/cert.pem", "GEPARD_TLS_KEYFILE": "/nonexistent/key.pem"},
         "GEPARD_TLS_CERTFILE: file '/nonexistent/cert.pem' does not exist"),
        ({"REDIS_URL": "localhost:6379"}, "GEPARD_REDIS_URL: must start with redis://, rediss:// or unix://"),
        ({"GEPARD_MAX_TRANSCRIPT_CHARS": "0"}, "GEPARD_MAX_TRANSCRIPT_CHARS: must be >= 1, got 0"),
        ({"GEPARD_MAX_PAUSE_S": "-1"}, "GEPARD_MAX_PAUSE_S: must be >= 0, got -1.0"),
        ({"GEPARD_MAX_PAUSE_S": "nan"}, "GEPARD_MAX_PAUSE_S: 'nan' is not a finite number"),
        ({"GEPARD_WS_IDLE_TIMEOUT_S": "0"}, "GEPARD_WS_IDLE_TIMEOUT_S: must be > 0, got 0.0"),
        ({"GEPARD_WS_IDLE_TIMEOUT_S": "nan"}, "GEPARD_WS_IDLE_TIMEOUT_S: 'nan' is not a finite number"),
        ({"GEPARD_MAX_CONTEXTS_PER_SOCKET": "0"}, "GEPARD_MAX_CONTEXTS_PER_SOCKET: must be >= 1, got 0"),
        ({"GEPARD_MAX_CONCURRENT_CLONES": "0"}, "GEPARD_MAX_CONCURRENT_CLONES: must be >= 1, got 0"),
        ({"GEPARD_CLONE_UPLOAD_TIMEOUT_S": "0"}, "GEPARD_CLONE_UPLOAD_TIMEOUT_S: must be > 0, got 0.0"),
        ({"GEPARD_MAX_CONCURRENT_GENERATIONS": "-1"}, "GEPARD_MAX_CONCURRENT_GENERATIONS: must be >= 1, got -1"),
        ({"GEPARD_MODEL_IDS": " , "}, "GEPARD_MODEL_IDS: must list at least one model id (use * to accept every id)"),
        ({"GEPARD_TEMPERATURE": "-0.5"}, "GEPARD_TEMPERATURE: must be in [0, 10], got -0.5"),
        ({"GEPARD_TEMPERATURE": "warm"}, "GEPARD_TEMPERATURE: 'warm' is not a number"),
        ({"GEPARD_TOP_K": "1.5"}, "GEPARD_TOP_K: '1.5' is not an integer"),
        ({"GEPARD_REPETITION_PENALTY": "0"}, "GEPARD_REPETITION_PENALTY: must be in (0, 10], got 0.0"),
        ({"GEPARD_STOP_THRESHOLD": "1.5"}, "GEPARD_STOP_THRESHOLD: must be in (0, 1), got 1.5"),
        ({"GEPARD_MAX_FRAMES": "0"}, "GEPARD_MAX_FRAMES: must be in [1, 2000], got 0"),
        ({"GEPARD_CFG_SCALE": "0"}, "GEPARD_CFG_SCALE: must be in (0, 20], got 0.0"),
        ({"GEPARD_CFG_FRAMES": "-1"}, "GEPARD_CFG_FRAMES: must be in [0, 2000], got -1"),
        ({"GEPARD_CHUNK_SCHEDULE": "2,0,8"}, "GEPARD_CHUNK_SCHEDULE: must be 1 to 16 frame counts, each between 1 and "
                                             "2000, got 2,0,8"),
        ({"GEPARD_CHUNK_SCHEDULE": "2,4.5"}, "GEPARD_CHUNK_SCHEDULE: '4.5' is not an integer"),
        ({"GEPARD_CHUNK_SCHEDULE": ",".join(["1"] * 17)}, "GEPARD_CHUNK_SCHEDULE: must be 1 to 16 frame counts"),
        # the two variables it replaced are refused, not silently ignored
        ({"GEPARD_FIRST_CHUNK_FRAMES": "4"}, "GEPARD_FIRST_CHUNK_FRAMES: was replaced by GEPARD_CHUNK_SCHEDULE"),
        ({"GEPARD_CHUNK_FRAMES": "16"}, "GEPARD_CHUNK_FRAMES: was replaced by GEPARD_CHUNK_SCHEDULE"),
        ({"GEPARD_LOG_LEVEL": "loud"}, "GEPARD_LOG_LEVEL: 'LOUD' is not supported"),
        ({"GEPARD_VLLM_RUNNER": "v3"}, "GEPARD_VLLM_RUNNER: 'v3' is not supported; expected one of v1, v2"),
        ({"GEPARD_TORCH_COMPILE": "fast"}, "GEPARD_TORCH_COMPILE: 'fast' is not a boolean"),
        ({"GEPARD_TORCH_OVERLAP": "2"}, "GEPARD_TORCH_OVERLAP: '2' is not a boolean"),
        ({"GEPARD_CODEC_COMPILE": "on?"}, "GEPARD_CODEC_COMPILE: 'on?' is not a boolean"),
        ({"GEPARD_CODEC_CUDA_GRAPHS": "maybe"}, "GEPARD_CODEC_CUDA_GRAPHS: 'maybe' is not a boolean"),
        ({"GEPARD_CODEC_CARRY_STATE": "auto"}, "GEPARD_CODEC_CARRY_STATE: 'auto' is not a boolean"),
        ({"GEPARD_CODEC_FUSED_ACTIVATIONS": "triton"}, "GEPARD_CODEC_FUSED_ACTIVATIONS: 'triton' is not a boolean"),
        ({"GEPARD_TORCH_FUSED_KERNELS": "triton"}, "GEPARD_TORCH_FUSED_KERNELS: 'triton' is not a boolean"),
        ({"GEPARD_TORCH_PREFILL_BATCH": "0"}, "GEPARD_TORCH_PREFILL_BATCH: must be between 1 and 1024, got 0"),
        ({"GEPARD_TORCH_STREAM_PRIORITY": "low"},
         "GEPARD_TORCH_STREAM_PRIORITY: 'low' is not supported; expected one of high, normal"),
        ({"GEPARD_WS_COMPRESSION": "deflate"}, "GEPARD_WS_COMPRESSION: 'deflate' is not a boolean"),
        ({"GEPARD_LOG_FORMAT": "xml"}, "GEPARD_LOG_FORMAT: 'xml' is not supported; expected one of text, json"),
    ],
)
def test_validation_names_the_variable(env, message):
    with pytest.raises(SettingsError) as info:
        Settings.from_env(env)
    assert any(p.startswith(message) for p in info.value.problems), info.value.problems
    assert message in str(info.value)


def test_all_problems_are_reported_at_once():
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"GEPARD_PORT": "0", "GEPARD_BACKEND": "x", "GEPARD_LOG_FORMAT": "xml"})
    assert [p.split(":")[0] for p in info.value.problems] == ["GEPARD_PORT", "GEPARD_BACKEND", "GEPARD_LOG_FORMAT"]


def test_cli_overrides_win_and_none_means_not_given():
    s = Settings.from_env({"GEPARD_PORT": "9000", "GEPARD_HOST": "0.0.0.0"}, port=9100, host=None, backend="torch")
    assert s.port == 9100 and s.host == "0.0.0.0" and s.backend == "torch"
    with pytest.raises(SettingsError, match="GEPARD_PORT: must be between 1 and 65535, got 0"):
        Settings.from_env({}, port=0)


def test_replace_revalidates_and_keeps_the_secret():
    s = Settings.from_env({})
    t = dataclasses.replace(s, port=9001)
    assert t.port == 9001 and t.token_secret == s.token_secret
    with pytest.raises(SettingsError, match="GEPARD_CHUNK_SCHEDULE"):
        dataclasses.replace(s, chunk_schedule=())
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.port = 1  # type: ignore[misc]


def test_token_secret_warning(caplog):
    caplog.set_level(logging.WARNING, logger="api.settings")
    Settings.from_env({})
    assert any("only verify on this replica" in r.getMessage() for r in caplog.records)
    caplog.clear()
    Settings.from_env({"GEPARD_TOKEN_SECRET": SECRET})
    assert not any("replica" in r.getMessage() for r in caplog.records)
    # two processes without a secret get different ones
    assert Settings.from_env({}).token_secret != Settings.from_env({}).token_secret


@pytest.mark.parametrize("model_id", ["gepard-1.0", "gepard-latest", "sonic", "sonic-3", "sonic-3.5", "sonic-latest",
                                      "sonic-2", "sonic-turbo", "sonic-3-2025-10-27", "sonic-2-2025-03-07"])
def test_default_model_ids_cover_sdk_defaults(model_id):
    s = Settings.from_env({})
    assert s.accepts_model(model_id)
    s.check_model_id(model_id)


@pytest.mark.parametrize("model_id", ["", "Sonic-3", "sonicx", "gpt-4o", "gepard-2.0", "eleven_turbo"])
def test_unknown_model_ids(model_id):
    s = Settings.from_env({})
    assert not s.accepts_model(model_id)
    with pytest.raises(UnknownModelError) as info:
        s.check_model_id(model_id)
    assert info.value.error_code == "model_not_found" and repr(model_id) in str(info.value)


def test_model_ids_are_configurable():
    s = Settings.from_env({"GEPARD_MODEL_IDS": "*"})
    assert s.accepts_model("anything-at-all")
    s = Settings.from_env({"GEPARD_MODEL_IDS": "gepard-1.0"})
    assert s.accepts_model("gepard-1.0") and not s.accepts_model("sonic-3")


def test_env_name_mapping():
    assert Settings.env_name("port") == "GEPARD_PORT"
    assert Settings.env_name("redis_url") == "GEPARD_REDIS_URL"


def test_more_streams_than_generations_is_warned(caplog):
    """A stream runs one generation at a time: more streams than generations can be refused mid-utterance."""
    caplog.set_level(logging.WARNING, logger="api.settings")
    Settings.from_env({"GEPARD_TOKEN_SECRET": SECRET, "GEPARD_MAX_STREAMS": "128"})
    warned = [r.getMessage() for r in caplog.records if "GEPARD_MAX_STREAMS" in r.getMessage()]
    assert len(warned) == 1 and "(128)" in warned[0] and "(64)" in warned[0], warned
    caplog.clear()
    for env in ({}, {"GEPARD_MAX_STREAMS": "32"}, {"GEPARD_MAX_STREAMS": "96", "GEPARD_MAX_CONCURRENT_GENERATIONS": "96"}):
        Settings.from_env({"GEPARD_TOKEN_SECRET": SECRET, **env})
    assert not any("GEPARD_MAX_STREAMS" in r.getMessage() for r in caplog.records)


# -- what the server needs at start is checked at start, each problem naming its variable ----------


def problems_of(env: dict[str, str]) -> list[str]:
    with pytest.raises(SettingsError) as info:
        Settings.from_env(env)
    return info.value.problems


def test_the_data_dir_must_be_a_directory_that_exists_or_can_be_created(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert problems_of({"GEPARD_DATA_DIR": str(a_file)}) == [
        f"GEPARD_DATA_DIR: {str(a_file)!r} exists but is not a directory"]
    assert problems_of({"GEPARD_DATA_DIR": str(a_file / "data")}) == [
        f"GEPARD_DATA_DIR: cannot create directory {str(a_file / 'data')!r}: {str(a_file)!r} is not a directory"]
    # one that does not exist yet is fine, and is not created by the check
    assert Settings.from_env({"GEPARD_DATA_DIR": str(tmp_path / "new" / "data")}).data_dir == tmp_path / "new" / "data"
    assert not (tmp_path / "new").exists()
    # with Redis the embedded store, and so the directory, is not used
    assert Settings.from_env({"GEPARD_DATA_DIR": str(a_file), "REDIS_URL": "redis://r:6379"}).data_dir == a_file


def test_the_data_dir_must_be_writable(tmp_path, monkeypatch):
    # os.access, not chmod: root (CI containers) may write anywhere
    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setattr("os.access", lambda path, mode: Path(path) != locked)
    assert problems_of({"GEPARD_DATA_DIR": str(locked)}) == [f"GEPARD_DATA_DIR: directory {str(locked)!r} is not writable"]
    assert problems_of({"GEPARD_DATA_DIR": str(locked / "data")}) == [
        f"GEPARD_DATA_DIR: cannot create directory {str(locked / 'data')!r}: {str(locked)!r} is not writable"]


def test_tls_files_must_load_as_a_certificate_and_its_key(tmp_path):
    cert, key = write_tls_files(tmp_path)
    assert Settings.from_env({"GEPARD_TLS_CERTFILE": str(cert), "GEPARD_TLS_KEYFILE": str(key)}).tls_enabled
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    other = tmp_path / "other"
    other.mkdir()
    _, other_key = write_tls_files(other)  # the key of another certificate
    # uvicorn is given no passphrase: an encrypted key is refused here, not prompted for at start
    from cryptography.hazmat.primitives import serialization

    locked_key = tmp_path / "locked.pem"
    locked_key.write_bytes(serialization.load_pem_private_key(key.read_bytes(), None).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")))
    for cert_file, key_file in ((junk, junk), (cert, junk), (cert, other_key), (cert, locked_key)):
        problems = problems_of({"GEPARD_TLS_CERTFILE": str(cert_file), "GEPARD_TLS_KEYFILE": str(key_file)})
        assert len(problems) == 1, problems
        assert problems[0].startswith("GEPARD_TLS_CERTFILE and GEPARD_TLS_KEYFILE: cannot load them as a PEM certificate")


def test_a_codec_path_must_exist_a_repo_id_is_left_to_the_loader(tmp_path):
    for missing in ("/nope.nemo", str(tmp_path / "codec.nemo"), "codecs/codec.nemo", "./codec", "a/b/c"):
        assert problems_of({"GEPARD_CODEC": missing}) == [
            f"GEPARD_CODEC: {missing!r} does not exist (expected a NanoCodec .nemo file, a codec directory or a "
            "Hugging Face repo id such as nvidia/nemo-nano-codec-22khz-1.89kbps-21.5fps)"]
    (tmp_path / "codec.nemo").write_bytes(b"")
    for accepted in (str(tmp_path / "codec.nemo"), str(tmp_path), "nvidia/nemo-nano-codec-22khz-1.89kbps-21.5fps"):
        assert Settings.from_env({"GEPARD_CODEC": accepted}).codec == accepted


@pytest.mark.parametrize("gpus, device, refused", [
    (0, "cuda", "GEPARD_DEVICE: 'cuda' is not available: torch "),
    (0, "cuda:0", "GEPARD_DEVICE: 'cuda:0' is not available: torch "),
    (1, "cuda:1", "GEPARD_DEVICE: 'cuda:1' is not available: torch "),
    (1, "cuda", None), (2, "cuda:1", None), (0, "cpu", None), (0, "auto", None),
])
def test_a_device_this_machine_lacks_is_refused_at_start(monkeypatch, gpus, device, refused):
    monkeypatch.setattr("torch.cuda.device_count", lambda: gpus)
    if refused is None:
        assert Settings.from_env({"GEPARD_DEVICE": device}).device == device
    else:
        [problem] = problems_of({"GEPARD_DEVICE": device})
        assert problem.startswith(refused) and problem.endswith(f"sees {'no CUDA device' if not gpus else '1 CUDA device(s)'}")
