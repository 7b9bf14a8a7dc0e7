"""A preallocated KV cache of fixed slots, and the shape buckets of the fast decode step.

The fast path (``engine.backends.torch_fast``) never reallocates its cache: every tensor here is
created once, so a CUDA graph captured over it stays valid for the engine's life. It compacts in
place instead (``move``): a request is copied from a high slot into a free low one when that lets
the decode step run at a smaller batch bucket.

    keys[layer], values[layer]   [slots + 1, kv_heads, max_positions, head_dim]
    lengths                      [slots + 1] int64 on the device: tokens cached per slot

Slot ``slots`` (the last one) is the *scratch slot*: the padding rows of a bucketed step write
their keys/values there and nothing ever reads them back for a real row. A request owns one slot
(two while it uses CFG); ``SlotAllocator`` hands out the lowest free slot and takes slots back when
requests leave, so a slot is reused as soon as its request is gone.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import torch

from engine.config import BackboneConfig
from engine.device import dtype_name
from engine.errors import DeviceMemoryError


def to_device(values: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small host list as a tensor on ``device``. On CUDA it is staged in pinned memory and copied
    without blocking, in the current stream's order: a copy from pageable memory makes the host wait
    for everything already queued on the stream, which would stall the host behind an overlapped
    decode step each time requests are admitted or moved."""
    t = torch.tensor(values, dtype=dtype)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)  # the pinned block is kept until the copy ran
    return t.to(device)


def power_buckets(limit: int, smallest: int = 1) -> tuple[int, ...]:
    """1, 2, 4, ... below ``limit``, then ``limit`` itself: the shapes a step is compiled for."""
    if limit < 1:
        raise ValueError(f"bucket limit must be >= 1, got {limit}")
    out, b = [], max(1, smallest)
    while b < limit:
        out.append(b)
        b *= 2
    out.append(limit)
    return tuple(out)


def pick_bucket(buckets: tuple[int, ...], needed: int) -> int:
    """The smallest bucket >= ``needed``; ValueError when none is large enough."""
    i = bisect.bisect_left(buckets, needed)
    if i == len(buckets):
        raise ValueError(f"{needed} exceeds the largest bucket {buckets[-1]}")
    return buckets[i]


class SlotAllocator:
    """Free cache slots, lowest first (a freed slot is the next one handed out)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._free = list(range(slots))  # kept sorted

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def used(self) -> int:
        return self.slots - len(self._free)

    def take(self) -> int:
        if not self._free:
            raise RuntimeError("no free KV cache slot")  # callers check ``free`` first
        return self._free.pop(0)

    def give_back(self, slot: int) -> None:
        if not 0 <= slot < self.slots or slot in self._free:
            raise ValueError(f"slot {slot} is not in use")
        bisect.insort(self._free, slot)

    def reset(self) -> None:
        self._free = list(range(self.slots))


@dataclass
class StaticKVCache:
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    lengths: torch.Tensor  # [slots + 1] int64, on the cache's device
    slots: int  # usable slots; index ``slots`` is the scratch slot
    max_positions: int

    @classmethod
    def allocate(cls, cfg: BackboneConfig, slots: int, max_positions: int, device: torch.device,
                 dtype: torch.dtype) -> "StaticKVCache":
        if slots < 1 or max_positions < 2:
            raise ValueError(f"need >= 1 slot and >= 2 positions, got {slots} x {max_positions}")
        check_room(cfg, slots, max_positions, device, dtype)
        shape = (slots + 1, cfg.num_key_value_heads, max_positions, cfg.head_dim)
        keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_hidden_layers)]
        values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_hidden_layers)]
        return cls(keys, values, torch.zeros(slots + 1, dtype=torch.int64, device=device), slots, max_positions)

    @property
    def scratch(self) -> int:
        return self.slots

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def scrub(self, slot: int) -> None:
        """Zero one slot's keys/values: a failed request may have left NaN there, and attention
        multiplies masked positions' values by 0 (0 * NaN is NaN) for the slot's next owner."""
        for t in (*self.keys, *self.values):
            t[slot].zero_()

    def move(self, src: list[int], dst: list[int], positions: int) -> None:
        """Copy slots ``src`` into slots ``dst`` (pairwise): the first ``positions`` keys and values
        of every layer (nothing past them is ever read) and the lengths. Two gathers and two
        scatters per layer, whatever the number of slots moved; the sources are left as they were."""
        device = self.lengths.device
        s, d = to_device(src, torch.int64, device), to_device(dst, torch.int64, device)
        for t in (*self.keys, *self.values):
            t[d, :, :positions] = t[s, :, :positions]
        self.lengths[d] = self.lengths[s]

    def clear(self) -> None:
        """Zero everything in place (the tensors, and so any captured graph, stay valid)."""
        for t in (*self.keys, *self.values):
            t.zero_()
        self.lengths.zero_()

    @staticmethod
    def bytes_per_slot(cfg: BackboneConfig, max_positions: int, dtype: torch.dtype) -> int:
        per_position = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim
        return per_position * max_positions * torch.empty(0, dtype=dtype).element_size()


def free_device_memory(device: torch.device) -> tuple[int, int] | None:
    """(free, total) bytes of a CUDA device now; None for any other device (a CPU's memory is the
    operating system's to hand out, and a meta tensor takes none)."""
    if torch.device(device).type != "cuda":
        return None
    return torch.cuda.mem_get_info(device)


def check_room(cfg: BackboneConfig, slots: int, max_positions: int, device: torch.device, dtype: torch.dtype) -> None:
    """DeviceMemoryError, before anything is allocated, when the cache of ``slots`` slots (and the
    scratch slot) cannot fit in the device's free memory, saying how many slots would. The check is
    of the cache alone: the decode graphs, activations and the codec need more besides, so a cache
    that just fits may still run out later, with torch's own error."""
    room = free_device_memory(device)
    if room is None:
        return
    free, total = room
    per_slot = StaticKVCache.bytes_per_slot(cfg, max_positions, dtype)
    need = per_slot * (slots + 1)
    if need <= free:
        return
    fit = free // per_slot - 1  # the scratch slot comes on top
    gib = 2**30
    advice = (f"at most {fit} slots fit: fewer concurrent generations (the engine's max_batch or kv_slots; "
              f"the gateway's GEPARD_MAX_CONCURRENT_GENERATIONS, where a CFG request takes two slots)" if fit >= 1 else
              "not even one slot fits: fewer positions, or free the device")
    raise DeviceMemoryError(
        f"the fast path's KV cache of {slots} slots x {max_positions} positions needs {need / gib:.2f} GiB "
        f"({per_slot / 2**20:.1f} MiB a slot in {dtype_name(dtype)}, one more slot for padding rows), "
        f"but {device} has {free / gib:.2f} GiB free of {total / gib:.2f} GiB; {advice}")


__all__ = ["SlotAllocator", "StaticKVCache", "check_room", "free_device_memory", "pick_bucket", "power_buckets",
           "to_device"]
