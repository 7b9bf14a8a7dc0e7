"""The fast path's KV cache is checked against the device's free memory before it is allocated.

On CUDA a cache too large for the GPU fails at start with DeviceMemoryError, which says what the
cache needs, what is free and how many slots would fit, instead of torch's out-of-memory error
halfway through the allocation. No GPU here: ``torch.cuda.mem_get_info`` (the one call the check
makes) is stood in for; the cache's own allocation on CUDA is never reached in these tests, which
is the point (the check comes first).
"""

from __future__ import annotations

import pytest
import torch

from engine.backends.static_cache import StaticKVCache, check_room, free_device_memory
from engine.config import BackboneConfig
from engine.errors import DeviceMemoryError, EngineError
from engine.tiny import SIZES

GIB = 2**30
CUDA = torch.device("cuda", 0)


def _full() -> BackboneConfig:
    """The published backbone's shapes (engine.tiny's "full" size): 14 layers, 2 KV heads of 256."""
    s = SIZES["full"]
    return BackboneConfig(hidden_size=s.hidden, num_hidden_layers=s.layers, num_attention_heads=s.heads,
                          num_key_value_heads=s.kv_heads, head_dim=s.head_dim, intermediate_size=s.intermediate,
                          vocab_size=248_320)


@pytest.fixture
def gpu_with(monkeypatch):
    """Make the (absent) GPU report ``free`` of ``total`` bytes; records the devices asked about."""
    asked: list[torch.device] = []

    def report(free: int, total: int = 24 * GIB) -> list[torch.device]:
        def mem_get_info(device=None):
            asked.append(device)
            return free, total
        monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
        return asked
    return report


def test_a_full_size_slot_of_4096_positions_is_112_mib_in_bf16() -> None:
    # 2 (keys, values) x 14 layers x 2 heads x 256 x 4096 positions x 2 bytes
    assert StaticKVCache.bytes_per_slot(_full(), 4096, torch.bfloat16) == 2 * 14 * 2 * 256 * 4096 * 2 == 112 * 2**20


def test_a_cache_that_fits_passes_and_asks_the_cache_device(gpu_with) -> None:
    asked = gpu_with(free=20 * GIB)
    check_room(_full(), 64, 4096, CUDA, torch.bfloat16)  # 65 x 112 MiB = 7.1 GiB
    assert asked == [CUDA]


def test_a_cache_too_large_says_what_it_needs_what_is_free_and_how_many_slots_fit(gpu_with) -> None:
    gpu_with(free=20 * GIB, total=24 * GIB)
    with pytest.raises(DeviceMemoryError) as caught:
        check_room(_full(), 256, 4096, CUDA, torch.bfloat16)
    message = str(caught.value)
    # 257 x 112 MiB = 28.11 GiB; 20 GiB hold 182 slots of 112 MiB, one of them the scratch slot
    assert "KV cache of 256 slots x 4096 positions needs 28.11 GiB (112.0 MiB a slot in bfloat16" in message
    assert "cuda:0 has 20.00 GiB free of 24.00 GiB" in message
    assert "at most 181 slots fit" in message and "GEPARD_MAX_CONCURRENT_GENERATIONS" in message
    assert isinstance(caught.value, EngineError)  # the gateway's start-up fails with it like any engine error
    # the figure it names is right: that many slots (and the scratch slot) fit, one more does not
    check_room(_full(), 181, 4096, CUDA, torch.bfloat16)
    with pytest.raises(DeviceMemoryError):
        check_room(_full(), 182, 4096, CUDA, torch.bfloat16)


def test_when_not_one_slot_fits_it_says_so(gpu_with) -> None:
    gpu_with(free=200 * 2**20)  # 200 MiB: not two slots of 112 MiB (one and the scratch slot)
    with pytest.raises(DeviceMemoryError, match="not even one slot fits: fewer positions, or free the device"):
        check_room(_full(), 1, 4096, CUDA, torch.bfloat16)


def test_allocate_checks_before_it_allocates_anything(gpu_with) -> None:
    """On this machine an allocation on CUDA would raise torch's own error ("not compiled with
    CUDA"); the DeviceMemoryError shows that the check ran first and nothing was allocated."""
    gpu_with(free=1 * GIB)
    with pytest.raises(DeviceMemoryError, match="at most 8 slots fit"):  # 1 GiB / 112 MiB = 9, one the scratch
        StaticKVCache.allocate(_full(), 64, 4096, CUDA, torch.bfloat16)


def test_other_devices_are_not_asked(gpu_with) -> None:
    """A CPU's memory is the operating system's to hand out, and a meta tensor takes none: the
    cache allocates there as before, without asking CUDA anything."""
    asked = gpu_with(free=0)
    assert free_device_memory(torch.device("cpu")) is None and free_device_memory(torch.device("meta")) is None
    tiny = BackboneConfig(hidden_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=32, intermediate_size=192, vocab_size=448)
    cache = StaticKVCache.allocate(tiny, 3, 64, torch.device("cpu"), torch.float32)
    assert cache.nbytes == 4 * StaticKVCache.bytes_per_slot(tiny, 64, torch.float32)
    StaticKVCache.allocate(_full(), 1024, 4096, torch.device("meta"), torch.bfloat16)  # 112 GiB of nothing
    assert asked == []
