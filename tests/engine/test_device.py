"""GEPARD_DTYPE=auto: bf16 only where the GPU computes in it.

No GPU runs here, so the GPU's properties are stood in for (torch.cuda.get_device_properties: the
one thing the choice reads); everything else is the real code."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from engine import device as device_module
from engine.device import pick_dtype


@pytest.fixture
def gpu(monkeypatch):
    """Set ``gpu.major`` and ``gpu.name`` to be the GPU at every index."""
    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0)
    asked = []
    device_module._auto_cuda_dtype.cache_clear()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: (asked.append(index), props)[1])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
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


def test_an_unknown_dtype_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown dtype 'half'; choose one of \['bf16', 'bfloat16', 'float16', "
                                         r"'float32', 'fp16', 'fp32'\]"):
        pick_dtype(torch.device("cpu"), "half")
