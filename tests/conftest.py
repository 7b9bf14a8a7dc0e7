"""Session-wide fixtures: random checkpoints in the published layout, written once per test run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# NeMo registers a vLLM plugin that fails to import without peft; only ours may load.
os.environ.setdefault("VLLM_PLUGINS", "gepard")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Clients' WebSocket opening handshakes: websockets gives up after 10 s unless told otherwise, and the
# Cartesia SDK does not tell it. ./run.sh test runs two workers side by side, each with its engines,
# compilers and browser, and on the 2-core machine one SDK socket over TLS once took longer to open
# (test_sdk, in a fresh-clone run). No test here times an opening (the benchmarks do), so the suite's
# clients wait WS_OPEN_TIMEOUT_S; a test that passes open_timeout itself keeps its own.
WS_OPEN_TIMEOUT_S = 30.0


def _wait_longer_for_websocket_openings() -> None:
    try:
        import websockets.asyncio.client
        import websockets.sync.client
    except ModuleNotFoundError:  # a GPU machine's image (bench/gpu_session.sh's part 0): no client test runs there
        return

    for defaults in (websockets.sync.client.connect.__kwdefaults__,
                     websockets.asyncio.client.connect.__init__.__kwdefaults__):
        assert "open_timeout" in defaults, "websockets renamed open_timeout: update tests/conftest.py"
        defaults["open_timeout"] = WS_OPEN_TIMEOUT_S


_wait_longer_for_websocket_openings()

# Two real speech clips (44.1 kHz and 22.05 kHz mono) for cloning and timestamp tests.
REF_AUDIO_DIR = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def tiny_gepard_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Gepard checkpoint (no codec) whose requests stop after 24 frames."""
    from engine.tiny import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-gepard"), size="tiny", seed=0, with_codec=False)


@pytest.fixture(scope="session")
def tiny_model(tiny_gepard_dir: Path):
    from engine.model.gepard import GepardModel

    return GepardModel.from_pretrained(tiny_gepard_dir)


# --- the gateway: one tiny checkpoint with its codec and one live server for the whole session -------


@pytest.fixture(scope="session")
def tiny_ckpt_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random Gepard + NanoCodec; every request stops after 24 frames (24 * 1024 samples)."""
    from engine.tiny import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-ckpt"), size="tiny", seed=0, with_codec=True)


@pytest.fixture(scope="session")
def gateway(tiny_ckpt_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """One real uvicorn server with the default settings (auth off, embedded voice store)."""
    from tests.api.conftest import gateway_settings
    from tests.api.live import LiveServer

    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("gateway-data"))
    with LiveServer(settings) as server:
        yield server


@pytest.fixture
def triton_interpreter(monkeypatch: pytest.MonkeyPatch):
    """codec_worker.torchcodec.fused (and engine.backends.fused_ops) with their Triton kernels run by
    Triton's interpreter, which takes CPU tensors (TRITON_INTERPRET=1 is read when a kernel is
    defined, so the modules are reloaded)."""
    import importlib

    pytest.importorskip("triton")
    from codec_worker.torchcodec import fused

    from engine.backends import fused_ops

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    importlib.reload(fused_ops)  # the engine's kernels too (fixture interpreted_fused_ops)
    yield importlib.reload(fused)
    monkeypatch.delenv("TRITON_INTERPRET")
    for module in (fused, fused_ops):
        importlib.reload(module)  # the compiled kernels again, for the tests after this one


@pytest.fixture
def interpreted_fused_ops(triton_interpreter):
    """engine.backends.fused_ops with its Triton kernels run by Triton's interpreter (CPU tensors)."""
    from engine.backends import fused_ops

    return fused_ops


@pytest.fixture
def default_voice_id() -> str:
    from api.app import DEFAULT_VOICE_ID

    return DEFAULT_VOICE_ID
