"""``FrameCutter``: cut a stream of PCM pieces of any length into frames of exactly N samples.

Frame-based encoders (Opus: 20 ms; AAC: 1024 samples; FLAC: its block size) take whole frames;
the codec path hands over pieces of whatever length it decoded. The cutter keeps the remainder
(fewer than N samples) for the next piece, so the frames of a stream are contiguous whatever the
piece boundaries were, and ``rest()`` gives back the last partial frame at the end.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FrameCutter"]


class FrameCutter:
    """Mono float32 PCM in, frames of ``frame_samples`` out. Not thread-safe."""

    def __init__(self, frame_samples: int) -> None:
        if frame_samples < 1:
            raise ValueError(f"frame_samples must be >= 1, got {frame_samples}")
        self.frame_samples = frame_samples
        self._held = np.zeros(0, dtype=np.float32)

    @property
    def held(self) -> int:
        """Samples waiting for the rest of their frame."""
        return len(self._held)

    def cut(self, pcm: np.ndarray) -> list[np.ndarray]:
        """``pcm  # [T] float32`` -> the whole frames now complete (each [frame_samples])."""
        x = np.asarray(pcm, dtype=np.float32).reshape(-1)
        if self._held.size:
            x = np.concatenate([self._held, x])
        whole = len(x) - len(x) % self.frame_samples
        self._held = x[whole:].copy()
        return [x[i:i + self.frame_samples] for i in range(0, whole, self.frame_samples)]

    def rest(self) -> np.ndarray:
        """The last partial frame (maybe empty); the cutter is empty afterwards."""
        out, self._held = self._held, np.zeros(0, dtype=np.float32)
        return out
