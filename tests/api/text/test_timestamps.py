"""Word timestamps: invariants on real speech and synthetic signals, snapping to known pauses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st

from api.text.normalization import NormalizedText, WordAlignment, normalize
from api.text.timestamps import (
    WordTimestamps,
    estimate_word_timestamps,
    segment_timestamps,
    tokens_timestamps,
    word_weight,
)

SR = 22050
REF_AUDIO = Path(__file__).resolve().parents[2] / "data"
# Frames are 10 ms; a boundary snapped to a pause edge lands on the frame grid.
EDGE_TOLERANCE_S = 0.025

WORDS = "The quick brown fox, jumps over the lazy dog. It was a sunny day, and everyone was happy.".split()


def _burst(seconds: float, freq: float = 180.0) -> np.ndarray:
    t = np.arange(int(round(seconds * SR))) / SR
    return (0.3 * np.sin(2 * np.pi * freq * t) * (0.7 + 0.3 * np.sin(2 * np.pi * 4 * t))).astype(np.float32)


def _silence(seconds: float) -> np.ndarray:
    return np.zeros(int(round(seconds * SR)), np.float32)


def _signal(parts: list[tuple[str, float]]) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """("s"|"v", seconds) parts -> pcm and the [start, end) of each voiced part."""
    pcm, voiced, t = [], [], 0.0
    for kind, seconds in parts:
        chunk = _burst(seconds) if kind == "v" else _silence(seconds)
        if kind == "v":
            voiced.append((t, t + len(chunk) / SR))
        t += len(chunk) / SR
        pcm.append(chunk)
    return np.concatenate(pcm), voiced


def assert_invariants(ts: WordTimestamps, words, offset: float, duration: float) -> None:
    assert list(ts.words) == list(words)
    start, end = np.array(ts.start), np.array(ts.end)
    assert np.all(start <= end)
    edges = np.stack([start, end], axis=1).reshape(-1)
    assert np.all(np.diff(edges) >= 0)
    assert np.all(edges >= offset) and np.all(edges <= offset + duration + 1e-9)


def _load_ref(name: str) -> np.ndarray:
    x, sr = sf.read(REF_AUDIO / name, dtype="float32")
    if x.ndim > 1:
        x = x.mean(axis=1)
    return x if sr == SR else soxr.resample(x, sr, SR).astype(np.float32)


@pytest.mark.parametrize("name", sorted(p.name for p in REF_AUDIO.glob("*.wav")))
@pytest.mark.parametrize("offset", [0.0, 3.25])
def test_invariants_on_real_speech(name, offset):
    pcm = _load_ref(name)
    ts = estimate_word_timestamps(WORDS, pcm, offset)
    assert_invariants(ts, WORDS, offset, len(pcm) / SR)
    # Words cover most of the audio (speech, not the whole file) and no word is degenerate-long.
    durations = np.array(ts.end) - np.array(ts.start)
    assert ts.end[-1] - ts.start[0] > 0.5 * len(pcm) / SR
    assert durations.max() < 0.4 * len(pcm) / SR


def test_leading_and_trailing_silence_get_no_words():
    pcm, voiced = _signal([("s", 0.6), ("v", 1.5), ("s", 0.9)])
    ts = estimate_word_timestamps(["one", "two", "three"], pcm)
    assert abs(ts.start[0] - voiced[0][0]) <= EDGE_TOLERANCE_S
    assert abs(ts.end[-1] - voiced[0][1]) <= EDGE_TOLERANCE_S


def test_one_word_per_burst_snaps_to_every_pause():
    # Burst lengths deliberately disagree with the words' syllable weights.
    pcm, voiced = _signal([("s", 0.3), ("v", 0.5), ("s", 0.25), ("v", 0.9), ("s", 0.15), ("v", 0.4), ("s", 0.4)])
    words = ["Hello,", "beautiful", "world."]
    ts = estimate_word_timestamps(words, pcm, offset_s=10.0)
    assert_invariants(ts, words, 10.0, len(pcm) / SR)
    for k, (v0, v1) in enumerate(voiced):
        assert abs(ts.start[k] - 10.0 - v0) <= EDGE_TOLERANCE_S, (k, ts)
        assert abs(ts.end[k] - 10.0 - v1) <= EDGE_TOLERANCE_S, (k, ts)


def test_pauses_anchor_only_their_boundaries():
    # Two words in the first phrase, three in the second: the pause after "you," anchors the
    # boundary between "you," and "my"; the words inside each phrase share its voiced time.
    pcm, voiced = _signal([("s", 0.2), ("v", 0.8), ("s", 0.3), ("v", 1.2), ("s", 0.2)])
    words = ["thank", "you,", "my", "dear", "friend."]
    ts = estimate_word_timestamps(words, pcm)
    assert abs(ts.end[1] - voiced[0][1]) <= EDGE_TOLERANCE_S
    assert abs(ts.start[2] - voiced[1][0]) <= EDGE_TOLERANCE_S
    assert voiced[0][0] - EDGE_TOLERANCE_S <= ts.start[0] < ts.end[0] < ts.end[1]
    share = word_weight("thank") / (word_weight("thank") + word_weight("you,"))
    assert ts.end[0] - ts.start[0] == pytest.approx(0.8 * share, abs=0.03)
    lo, hi = voiced[1][0] - EDGE_TOLERANCE_S, voiced[1][1] + EDGE_TOLERANCE_S
    assert all(lo <= t <= hi for t in ts.start[2:] + ts.end[2:])


def test_short_stop_closures_do_not_split_words():
    # A 20 ms gap inside a word (shorter than min_silence_s) is not a pause.
    pcm, voiced = _signal([("s", 0.1), ("v", 0.3), ("s", 0.02), ("v", 0.3), ("s", 0.1)])
    ts = estimate_word_timestamps(["one", "two"], pcm)
    assert ts.end[0] == ts.start[1]


def test_segments_of_a_context_keep_increasing():
    a, _ = _signal([("s", 0.1), ("v", 0.7), ("s", 0.2)])
    b, _ = _signal([("v", 0.5), ("s", 0.1), ("v", 0.6)])
    first = estimate_word_timestamps(["Hello", "there."], a, 0.0)
    second = estimate_word_timestamps(["How", "are", "you?"], b, len(a) / SR)
    edges = [t for ts in (first, second) for pair in zip(ts.start, ts.end) for t in pair]
    assert edges == sorted(edges)
    assert second.start[0] >= len(a) / SR


def test_degenerate_inputs():
    assert estimate_word_timestamps([], _burst(0.5)) == WordTimestamps((), (), ())
    empty = estimate_word_timestamps(["a", "b"], np.zeros(0, np.float32), 2.0)
    assert empty == WordTimestamps(("a", "b"), (2.0, 2.0), (2.0, 2.0))
    silent = estimate_word_timestamps(["a", "b"], _silence(1.0), 1.0)
    assert_invariants(silent, ["a", "b"], 1.0, 1.0)
    assert silent.start[0] == 1.0 and silent.end[-1] == pytest.approx(2.0)
    one = estimate_word_timestamps(["word"], _signal([("s", 0.2), ("v", 0.5)])[0])
    assert one.start[0] == pytest.approx(0.2, abs=EDGE_TOLERANCE_S) and one.end[0] == pytest.approx(0.7, abs=0.011)
    with pytest.raises(ValueError, match=r"shape \(2, 10\)"):
        estimate_word_timestamps(["a"], np.zeros((2, 10), np.float32))


def test_word_weights():
    assert word_weight("a") < word_weight("cat") < word_weight("wonderful")
    assert word_weight("—") == 0.3 and word_weight("hmm") > 0.3
    assert word_weight("你好") >= 2


def test_to_wire_shape():
    ts = WordTimestamps(("a",), (0.5,), (0.75,))
    assert ts.to_wire() == {"words": ["a"], "start": [0.5], "end": [0.75]}
    with pytest.raises(ValueError, match="lengths differ: 1/0/0"):
        WordTimestamps(("a",), (), ())


def test_segment_timestamps_report_original_or_normalized_words():
    norm = normalize("I paid 5 USD, Dr. Smith.", "en")
    pcm, _ = _signal([("s", 0.1), ("v", 1.0), ("s", 0.25), ("v", 0.8), ("s", 0.1)])
    spoken = segment_timestamps(norm, pcm, 1.0, use_normalized=True)
    assert list(spoken.words) == ["I", "paid", "five", "dollars,", "Doctor", "Smith."]
    original = segment_timestamps(norm, pcm, 1.0)
    assert list(original.words) == ["I", "paid", "5", "USD,", "Dr.", "Smith."]
    assert_invariants(original, original.words, 1.0, len(pcm) / SR)
    # "5" spans "five dollars,", and "USD," (no words of its own) is a point at its end.
    assert original.start[2] == spoken.start[2] and original.end[2] == spoken.end[3]
    assert original.start[3] == original.end[3] == spoken.end[3]
    assert original.start[4] == spoken.start[4]


def test_tokens_with_no_spoken_word_at_all_are_points_at_the_segments_start():
    """Before, the last branch read a name that did not exist (a NameError for such a segment)."""
    norm = NormalizedText(original="— —", text="", language="en",
                          alignment=(WordAlignment("—", (), 0), WordAlignment("—", (), 2)))
    ts = tokens_timestamps(norm, WordTimestamps((), (), ()), offset_s=2.5)
    assert ts.to_wire() == {"words": ["—", "—"], "start": [2.5, 2.5], "end": [2.5, 2.5]}


@settings(max_examples=60, deadline=None)
@given(
    words=st.lists(
        st.sampled_from(["a", "cat,", "wonderful", "x.", "—", "123", "to", "you?"]), min_size=1, max_size=15
    ),
    parts=st.lists(st.tuples(st.sampled_from("sv"), st.floats(0.01, 0.6)), min_size=1, max_size=8),
    offset=st.floats(0.0, 100.0),
)
def test_invariants_on_random_signals(words, parts, offset):
    pcm, _ = _signal(parts)
    ts = estimate_word_timestamps(words, pcm, offset)
    assert_invariants(ts, words, offset, len(pcm) / SR)
