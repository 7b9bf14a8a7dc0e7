"""Decoder state carried from one chunk of a stream to the next, so no chunk re-decodes old frames.

The decoder is causal: a conv's output at time t reads only its inputs up to t. A stream decoded
chunk by chunk therefore gives the one-shot audio exactly if every conv starts each chunk with the
tail of the input it saw at the end of the last chunk, instead of the zeros it pads with:

    CausalConv1d, kernel k, dilation d    the last (k - 1) * d input samples
    CausalUpsample, stride s              the last input frame (output t reads inputs t//s - 1 and t//s)

A zero tail is exactly the zero padding, so a stream's first chunk starts from zeros. The windowed
decode (codec_worker.streaming) gets the same audio by decoding ``receptive_field_frames`` (25 for
the published codec) frames of context again in front of every chunk: 57 frames decoded for 32 new
on the GPU schedule, 41 for 16 on the CPU one. With carried state a chunk decodes its new frames only.

    cache = ConvStateCache(decoder, slots=128, device=..., dtype=...)
    slot = cache.acquire()                      # one per stream; None when all are taken
    step = cache.step(slots, lengths, fresh, frames)
    audio = decoder(latents, lengths, state=step)
    step.commit()                               # only after the whole forward succeeded
    cache.release(slot)

Every conv's tails live in one tensor [slots + 2, channels, tail]: a row per stream, then a scratch
row, which the padding rows of a padded batch write, and a row of zeros, which nothing writes and a
stream's first chunk reads (so it starts from zeros whatever its slot held before). Those tensors
are views of one ``store`` [slots + 2, width], a row holding a stream's every tail. A batch of
streams reads its rows with one ``index_select`` and writes them back with one ``index_copy_`` per
conv, on fixed buffers: a CUDA graph can hold the whole step. A step records the new tails and
writes them at ``commit``: a forward that fails midway leaves every stream's state as it was, so
its chunks can be decoded again.

With a ``kernel`` (the Triton one of codec_worker.torchcodec.fused, set by
TorchNanoCodec.fuse_state after ``check_extend_kernel``) a conv's read, concatenation and record are that
one kernel, the records go into one staging tensor [B, width], and ``commit`` is one
``index_copy_`` of it into the store. Where the activation before a conv is fused too (a snake
with its kernel, see TorchNanoCodec.fuse_activations), that kernel applies it as it reads the new
samples (adding the sum it reads first, layers.PendingSum): one kernel for the sum, the activation,
the tail and the record, so a decode launches about what a windowed one does (216 against 211,
bench/kernel_count.py), for the new frames only.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable, Optional, Sequence

import torch
from torch import nn

from codec_worker.torchcodec.layers import (
    CausalConv1d,
    CausalUpsample,
    PROBE_FORMS,
    Input,
    Snake,
    past_rounding,
    probe_input,
    snake_then_leaky,
    value_of,
)


#: extend_with_tail(store, offset, tail, reads, x, lengths, scale, stage, alpha=None, split=0) ->
#: full: what ``DecodeStep.extend`` computes for one conv, its record written into ``stage``, x
#: first put through snake_then_leaky(x, alpha, split) when alpha is given (fused.extend_with_tail)
ExtendKernel = Callable[..., torch.Tensor]


def conv_tail(module: nn.Module) -> int:
    """Input samples a causal conv must remember between chunks (0 for any other module)."""
    if isinstance(module, CausalConv1d):
        return module.left_pad
    if isinstance(module, CausalUpsample):
        return 1
    return 0


class ConvStateCache:
    """Every causal conv's input tail, for up to ``slots`` streams, preallocated on the decoder's device.

    ``acquire``/``release`` hand out slots (thread-safe); a freed slot goes to the back of the line,
    and a stream's first chunk ignores what its slot held (``fresh``), so a reused slot needs no clearing.
    """

    def __init__(self, decoder: nn.Module, slots: int, device: torch.device, dtype: torch.dtype) -> None:
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
            raise ValueError(f"slots must be an int >= 1, got {slots!r}")
        self.slots = slots
        self.scratch = slots  # the row padding rows write
        self.zeros = slots + 1  # the row a stream's first chunk reads: never written
        self.device, self.dtype = torch.device(device), dtype
        self._index: dict[int, int] = {}  # id(conv) -> its buffer
        self.columns: list[int] = []  # per conv: where its tails start in a store row
        self.tails: list[int] = []  # per conv: its tail's samples
        self.offsets: list[torch.Tensor] = []  # [1, 1, tail] per conv: 0 .. tail-1, where a tail starts
        shapes: list[tuple[int, int]] = []
        width = 0
        for module in decoder.modules():
            tail = conv_tail(module)
            if tail == 0:
                continue
            # CausalUpsample stores [in, out / groups, k] (as ConvTranspose1d), CausalConv1d [out, in / groups, k]
            channels = module.weight.shape[0] if isinstance(module, CausalUpsample) else module.weight.shape[1] * module.groups
            self._index[id(module)] = len(shapes)
            self.columns.append(width)
            self.tails.append(tail)
            shapes.append((channels, tail))
            self.offsets.append(torch.arange(tail, device=self.device).view(1, 1, -1))
            width += channels * tail
        self.store = torch.zeros(slots + 2, width, device=self.device, dtype=dtype)
        # [slots + 2, in_channels, tail] per conv: views of the store's columns
        self.buffers: list[torch.Tensor] = [self.store[:, start : start + c * t].view(slots + 2, c, t)
                                            for start, (c, t) in zip(self.columns, shapes)]
        self.kernel: Optional[ExtendKernel] = None
        self._free: deque[int] = deque(range(slots))
        self._lock = threading.Lock()

    @property
    def bytes_per_slot(self) -> int:
        return sum(buffer[0].numel() * buffer.element_size() for buffer in self.buffers)

    @property
    def free_slots(self) -> int:
        with self._lock:
            return len(self._free)

    def acquire(self) -> int | None:
        """A free slot, or None when every slot is held (the caller decodes in windows instead)."""
        with self._lock:
            return self._free.popleft() if self._free else None

    def release(self, slot: int) -> None:
        with self._lock:
            if not 0 <= slot < self.slots or slot in self._free:
                raise ValueError(f"slot {slot} is not held (slots 0..{self.slots - 1})")
            self._free.append(slot)

    @property
    def convs(self) -> int:
        """The convs whose tails it keeps (kernel 1 convs remember nothing)."""
        return len(self.buffers)

    def step(self, slots: torch.Tensor, lengths: torch.Tensor, fresh: torch.Tensor, frames: int) -> DecodeStep:
        """One decoder call for rows ``slots`` [B] (``scratch`` for padding rows) holding ``lengths``
        [B] real frames of ``frames``; rows where ``fresh`` [B] is true start from zeros."""
        slots = slots.to(self.device)
        reads = torch.where(fresh.to(device=self.device, dtype=torch.bool), self.zeros, slots)
        return DecodeStep(self, slots, reads, lengths.to(self.device), frames)

    def buffer_of(self, conv: nn.Module) -> tuple[int, torch.Tensor] | None:
        """The conv's buffer and its index; None for a conv that remembers nothing (kernel 1)."""
        index = self._index.get(id(conv))
        return None if index is None else (index, self.buffers[index])


class DecodeStep:
    """The state of one decoder call: each conv prepends its rows' tails (``extend``), and the tails
    at each row's real end are kept until ``commit`` writes them back."""

    def __init__(self, cache: ConvStateCache, slots: torch.Tensor, reads: torch.Tensor, lengths: torch.Tensor,
                 frames: int) -> None:
        self.cache = cache
        self.slots = slots  # [B] int64: where each row's new tails go
        self.reads = reads  # [B] int64: where its past tails come from (the zeros row where its stream starts)
        self.lengths = lengths  # [B] int64, real frames of each row
        self.frames = frames  # frames of the (padded) batch
        self._ends: dict[int, torch.Tensor] = {}  # samples per frame -> [B, 1, 1] each row's real end
        self._new: list[tuple[int, torch.Tensor]] = []
        # with the cache's kernel: every conv's record, in the store's columns
        self._stage = cache.store.new_empty((slots.shape[0], cache.store.shape[1])) if cache.kernel else None

    def extend(self, conv: CausalConv1d | CausalUpsample, x: Input, act: Optional[nn.Module] = None) -> torch.Tensor:
        """``act(x)`` (``x`` where no ``act``) [B, C, N] with each row's remembered tail in front:
        [B, C, tail + N]. Records the new tail: the ``tail`` samples before each row's real end (a
        padded row's end is before N). ``x`` may be a PendingSum (layers), which the activation
        computes."""
        found = self.cache.buffer_of(conv)
        if found is None:  # a kernel-1 conv reads only the present
            return value_of(x) if act is None else act(x)
        index, buffer = found
        scale = x.shape[-1] // self.frames  # samples per frame at this conv
        if self._stage is not None:  # the cache's kernel
            if isinstance(act, Snake) and act.kernel is not None:  # the activation runs fused: in this kernel
                return self.fused_extend(index, x, scale, act.alpha, act.split)
            return self.fused_extend(index, value_of(x) if act is None else act(x), scale)
        x = value_of(x) if act is None else act(x)
        full = torch.cat([buffer.index_select(0, self.reads), x], dim=-1)
        if scale not in self._ends:  # one per stage, not one per conv
            self._ends[scale] = (self.lengths * scale).view(-1, 1, 1)
        ends = self._ends[scale] + self.cache.offsets[index]
        self._new.append((index, full.gather(-1, ends.expand(-1, full.shape[1], -1))))
        return full

    def fused_extend(self, index: int, x: Input, scale: int, alpha: Optional[torch.Tensor] = None,
                     split: int = 0) -> torch.Tensor:
        """``extend`` of conv ``index`` by the cache's kernel (x through snake_then_leaky(x, alpha,
        split) first when ``alpha`` is given; a PendingSum added by it); its record goes into this
        step's staging rows."""
        if self.cache.kernel is None or self._stage is None:
            raise RuntimeError("fused_extend needs the cache's kernel, set before the step began")
        return self.cache.kernel(self.cache.store, self.cache.columns[index], self.cache.tails[index], self.reads, x,
                                 self.lengths, scale, self._stage, alpha, split)

    def commit(self) -> None:
        """Write every recorded tail back to its rows' slots."""
        if self._stage is not None:
            self.cache.store.index_copy_(0, self.slots, self._stage)
            return
        for index, tail in self._new:
            self.cache.buffers[index].index_copy_(0, self.slots, tail)
        self._new.clear()


def check_extend_kernel(kernel: ExtendKernel, decoder: nn.Module, device: torch.device, dtype: torch.dtype,
                        seed: int = 0) -> int:
    """Run ``kernel`` against the eager ops once for every conv of ``decoder`` that keeps a tail, on
    two caches of two slots (one read eagerly, one with the kernel), random tails and inputs, rows
    that start their stream and continue it, end at their last frame and before it. Every other
    conv is checked as it reads with the activation before it applied by the kernel (a snake or a
    half snake, random alphas), its input in turn each form the decoder gives it (layers.PROBE_FORMS:
    a strided tensor, a residual unit's sum, the mean of three pairs), so each of the kernel's
    variants runs on every stage's shapes.

    Every value is a copy, so inputs and records must equal the eager state's; an activated
    input's new samples must be within rounding of the eager activation's (computed in float32),
    and it and its record must be exactly what the eager state makes of those samples, so that
    what a chunk records is what its conv read; a unit's sum written out must be the eager add's.
    ValueError when not; else how many convs keep a tail."""
    generator = torch.Generator().manual_seed(seed)
    eager, fused = (ConvStateCache(decoder, 2, device, dtype) for _ in range(2))
    eager.store.copy_(torch.randn(eager.store.shape, generator=generator).to(device, dtype))
    eager.store[eager.zeros].zero_()  # as it is: never written
    fused.store.copy_(eager.store)
    fused.kernel = kernel
    frames = 3
    # a row that continues its stream (slot 1) to its last frame, one that starts its stream (slot
    # 0) and ends before the batch does
    slots, lengths, fresh = torch.tensor([1, 0]), torch.tensor([frames, 1]), torch.tensor([False, True])
    want_step, got_step = (cache.step(slots, lengths, fresh, frames) for cache in (eager, fused))
    convs = [m for m in decoder.modules() if conv_tail(m)]
    for conv in convs:
        index, buffer = eager.buffer_of(conv)
        channels, tail = buffer.shape[1:]
        scale = 1 + index % 3  # samples per frame at the conv: any
        x = (3 * torch.randn(2, channels, frames * scale, generator=generator)).to(device, dtype)
        if index % 2 == 0:
            got, want = got_step.extend(conv, x), want_step.extend(conv, x)
        else:
            split = channels // 2 if index % 4 == 1 else channels
            alpha = (0.2 + torch.rand(1, split, 1, generator=generator)).to(device, dtype)
            form = PROBE_FORMS[index // 2 % len(PROBE_FORMS)]
            probe = probe_input(x, form, generator)
            got = got_step.fused_extend(index, probe.input, scale, alpha, split)
            activated = snake_then_leaky(probe.eager, alpha.float().cpu(), split)
            if got.shape != (2, channels, tail + x.shape[-1]) or \
                    bool(past_rounding(got[..., tail:], activated, probe.eager if probe.summed else None).any()):
                raise ValueError(f"the fused state's activation differs from the eager one at conv {index} ({form}) "
                                 f"on {device}/{dtype}")
            if probe.kept is not None and not (probe.input.total is not None and torch.equal(probe.input.total, probe.kept)):
                raise ValueError(f"the fused state's kept sum is not the eager add's at conv {index} on {device}/{dtype}")
            want = want_step.extend(conv, got[..., tail:])  # the eager state fed the kernel's activated samples
        if got.shape != want.shape or not torch.equal(got, want):
            raise ValueError(f"the fused state differs from the eager one at conv {index} (tail {tail}) on {device}/{dtype}")
    for step in (want_step, got_step):
        step.commit()
    if not torch.equal(fused.store, eager.store):
        raise ValueError(f"the fused state records other tails than the eager one on {device}/{dtype}")
    return len(convs)


def check_slots(slots: Sequence[int], cache: ConvStateCache) -> None:
    """Rows of one call must name distinct held slots: two rows of one stream would read the same tail."""
    if len(set(slots)) != len(slots):
        raise ValueError(f"a stateful decode got the same slot twice: {list(slots)}")
    for slot in slots:
        if not 0 <= slot < cache.slots:
            raise ValueError(f"slot {slot} is outside 0..{cache.slots - 1}")


__all__ = ["ConvStateCache", "DecodeStep", "ExtendKernel", "check_extend_kernel", "check_slots", "conv_tail"]
