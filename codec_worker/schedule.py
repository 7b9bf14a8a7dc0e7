"""The decode cadence of a stream: how many frames each audio chunk holds, growing from small to large.

    schedule = ChunkSchedule.parse("2,4,8,32")   # chunks of 2, 4, 8, then 32, 32, ... frames
    schedule.size(0), schedule.size(5)          # -> 2, 32
    schedule.end_of(2)                          # -> 14: the third chunk ends at frame 14

Why it grows: the first chunk bounds time to first audio (its frames must be generated, then
decoded), so it should be short; later chunks only have to arrive before the audio already sent
has played, and larger ones cost less per frame (each window re-decodes ``receptive_field_frames``
of context and a batch call has a fixed cost). The limit on growth: chunk ``k`` must be generated
while chunks ``< k`` play, i.e. (ignoring decode time) ``RTF * (end_of(k) - first) <= end_of(k - 1)``
for a stream generating at real-time factor RTF; doubling sizes keep that for RTF <= 0.5 during the
ramp and for any RTF < 1 once steady. At 21.5 frames/s a frame is ~46.4 ms of audio.

The cadence changes only where chunks are cut, never their samples: streaming decode is exact for
any cut (``codec_worker.streaming``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Union

MAX_CHUNK_FRAMES = 2000  # a request's frame cap (engine.requests SAMPLING_BOUNDS max_frames)
MAX_STEPS = 16


@dataclass(frozen=True, slots=True)
class ChunkSchedule:
    """Frames per chunk: ``sizes[i]`` for chunk ``i``; the last size repeats for every later chunk."""

    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        sizes = tuple(self.sizes)
        if not sizes or len(sizes) > MAX_STEPS:
            raise ValueError(f"a chunk schedule needs 1 to {MAX_STEPS} sizes, got {len(sizes)}")
        for i, size in enumerate(sizes):
            if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_CHUNK_FRAMES:
                raise ValueError(f"chunk sizes must be ints in [1, {MAX_CHUNK_FRAMES}] frames; size {i} is {size!r}")
        object.__setattr__(self, "sizes", sizes)

    @classmethod
    def parse(cls, text: str) -> "ChunkSchedule":
        """``"2,4,8,32"`` -> ChunkSchedule((2, 4, 8, 32)); ValueError naming the bad item."""
        items = [item.strip() for item in str(text).split(",")]
        sizes = []
        for item in items:
            try:
                sizes.append(int(item))
            except ValueError:
                raise ValueError(f"{text!r} is not a comma-separated list of frame counts (bad item {item!r})") from None
        return cls(tuple(sizes))

    @classmethod
    def of(cls, value: "ScheduleLike") -> "ChunkSchedule":
        """A ChunkSchedule from itself, a string ``"2,4,8,32"`` or a sequence of ints."""
        if isinstance(value, ChunkSchedule):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        return cls(tuple(value))

    @property
    def first(self) -> int:
        """Frames in the first chunk: the frames generated before the first decode."""
        return self.sizes[0]

    @property
    def steady(self) -> int:
        """Frames in every chunk once the schedule has grown."""
        return self.sizes[-1]

    @property
    def ramp_frames(self) -> int:
        """Frames before the first steady-size chunk: the chunks cut before it are the urgent ones
        (little audio is buffered ahead of them), which the batching decoder serves first."""
        return sum(self.sizes[:-1]) if len(self.sizes) > 1 else self.sizes[0]

    def size(self, index: int) -> int:
        """Frames in chunk ``index`` (0-based)."""
        return self.sizes[min(index, len(self.sizes) - 1)]

    def end_of(self, index: int) -> int:
        """Utterance frame index where chunk ``index`` ends (exclusive)."""
        head = sum(self.sizes[: index + 1])
        return head + max(0, index + 1 - len(self.sizes)) * self.steady

    def __str__(self) -> str:
        return ",".join(str(size) for size in self.sizes)


ScheduleLike = Union[ChunkSchedule, str, Iterable[int]]

#: Chosen from bench/pipeline.py on CPU (2-core EPYC, float32, torch reference loop, one stream):
#: the first audio after 2 frames cut TTFA against 4,16 by ~20 % on the tiny checkpoint and halved
#: the first chunk's wait + decode on the full-size one (~325 ms vs ~590 ms; 8,32: ~1290 ms), and a
#: steady 32 decodes half as many windows as 16 (more streams per codec). Cost on CPU: the second
#: chunk can come ~30 ms late while the codec is slow; 4,16 or 8,32 trade first audio for none.
DEFAULT_SCHEDULE = ChunkSchedule((2, 4, 8, 32))

#: Under sustained agent load on CPU the codec is the bottleneck, and the ramp's extra small windows
#: (each re-decoding its left context) cost capacity: bench/loadgen.py, tiny checkpoint, 2-core EPYC,
#: 32 agents, admission on: xRT 13.7 with 4,16 vs 10.9 with 2,4,8,32 and underrun p99 377 vs 467 ms
#: (admission off: 2.4 s vs 4.4 s), for ~10 % sooner first audio at one agent (p50 134 vs 149 ms).
#: So CPU servers default to 4,16; GPU ones, where decoding is cheap, to DEFAULT_SCHEDULE.
#: With each stream carrying the codec's conv state (GEPARD_CODEC_CARRY_STATE, on by default on CPU)
#: no window re-decodes context, and the same comparison (bench/loop_cost.py, tiny, 32 agents) gave
#: xRT 19.8 with 4,16 vs 21.3 with 2,4,8,32, but underrun p99 389 vs 824 ms: 4,16 stays.
CPU_SCHEDULE = ChunkSchedule((4, 16))


def default_schedule(device: Any) -> ChunkSchedule:
    """The cadence for a codec on ``device`` (a torch.device or its name) when none is configured."""
    return CPU_SCHEDULE if str(getattr(device, "type", device)).startswith("cpu") else DEFAULT_SCHEDULE


__all__ = ["CPU_SCHEDULE", "DEFAULT_SCHEDULE", "MAX_CHUNK_FRAMES", "ChunkSchedule", "ScheduleLike", "default_schedule"]
