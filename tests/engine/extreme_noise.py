"""Seeds whose counter-based noise takes a chosen 24-bit value at a chosen (frame, channel, code).

The noise hash is ``mix64(mix64(seed) + key) >> 40`` with ``key = (frame * 32 + channel) * 8 + code``
(``engine.sampling.noise_bits``), and splitmix64's finaliser ``mix64`` is a bijection on 64-bit
words, so both steps invert: pick a 64-bit word whose top 24 bits are the wanted value, undo the
outer ``mix64``, subtract the key and undo the inner one. That reaches every cell with the extreme
values (0 and 2**24 - 1) directly, with no search, on both backends' real sampling path.
"""

from __future__ import annotations

MASK = (1 << 64) - 1
GOLDEN, MIX1, MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
CHANNELS, WIDTH = 32, 8  # the [32, 8] head grid both backends sample from
LEVELS = [8, 7, 6, 6] * 8
TOP = (1 << 24) - 1  # the 24-bit value that used to become u = 1.0 (Gumbel +inf)
# With the default knobs (temperature 0.4, top_k 0) and the tiny test checkpoint, the old sampler
# picked a padding code from these (found by computing the hash, see hits()):
ENGINE_KILLER = (620977, 4, 31, 7)  # seed, frame, channel, code: code 7 on channel 31 (6 levels) -> past the embedding table
CODEC_REJECT = (74326, 0, 2, 6)  # code 6 on channel 2 (6 levels) -> a code the codec rejects


def mix64(x: int) -> int:
    z = (x + GOLDEN) & MASK
    z = ((z ^ (z >> 30)) * MIX1) & MASK
    z = ((z ^ (z >> 27)) * MIX2) & MASK
    return z ^ (z >> 31)


def _unxorshift(y: int, shift: int) -> int:
    x = y
    for _ in range(64 // shift + 1):
        x = y ^ (x >> shift)
    return x & MASK


def unmix64(z: int) -> int:
    z = _unxorshift(z, 31)
    z = (z * pow(MIX2, -1, 1 << 64)) & MASK
    z = _unxorshift(z, 27)
    z = (z * pow(MIX1, -1, 1 << 64)) & MASK
    z = _unxorshift(z, 30)
    return (z - GOLDEN) & MASK


def noise_value(seed: int, frame: int, channel: int, code: int) -> int:
    """The 24-bit noise value of one cell (pure Python, as engine.sampling computes it)."""
    key = (frame * CHANNELS + channel) * WIDTH + code
    return mix64((mix64(seed) + key) & MASK) >> 40


def seed_for(value: int, frame: int, channel: int, code: int) -> int:
    """A 63-bit seed whose noise at (frame, channel, code) is ``value`` (0 <= value < 2**24)."""
    key = (frame * CHANNELS + channel) * WIDTH + code
    for low in range(1, 1 << 16):
        inner = (unmix64((value << 40) | (low * 0x9E3779B1 & ((1 << 40) - 1))) - key) & MASK
        seed = unmix64(inner)
        if seed < 1 << 63:  # seeds are non-negative int64
            return seed
    raise AssertionError("no 63-bit seed found")  # each try succeeds with probability 1/2


def hits(seed: int, frames: int, value: int = TOP) -> list[tuple[int, int, int]]:
    """(frame, channel, code) cells of the first ``frames`` frames whose noise is ``value``."""
    return [(f, c, k) for f in range(frames) for c in range(CHANNELS) for k in range(WIDTH)
            if noise_value(seed, f, c, k) == value]
