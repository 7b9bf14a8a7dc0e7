"""Word timestamps for one synthesised segment, estimated from its words and its audio.

The engine gives no alignment, so word times are estimated from the audio itself:

1. **Voice activity.** The segment's PCM (float32, 22.05 kHz) is cut into 10 ms frames and each
   frame's RMS level in dB is compared with a threshold ``max(peak - 35 dB, floor + 30% of the
   peak-to-floor range)``, where peak/floor are the 99th/5th percentiles of the frame levels.
   Silent runs shorter than 30 ms count as voiced (stop closures inside words). The first and
   last voiced frames bound the *speech span*; leading and trailing silence get no words.
2. **Duration model.** Each word gets a weight: its vowel-group count (syllables; CJK
   characters and digits count one and two each) plus 0.15 per letter, at least 0.3; a word
   ending in ``, ; :`` adds a 0.5 gap after it, one ending in ``. ! ? …`` a 0.75 gap. Weights are
   laid out on *voiced* time only: word ``i`` starts where the cumulative voiced time reaches
   its share, so silences inside the span cost no weight and a boundary that falls into a silence
   ends the word at the silence's start and starts the next word at its end.
3. **Pause snapping.** Silent runs of at least 80 ms inside the span are pauses. Each pause is
   matched to at most one word boundary, in order (dynamic programming), when it lies within
   ``max(0.2 s, 0.6 x mean word duration, 3 x the pause's length)`` of the boundary the model
   expects (long pauses are almost surely between words); the score favours
   close, long pauses and boundaries after punctuation. Matched pauses become hard anchors - the
   word before ends at the pause's start, the word after starts at its end - and the words
   between consecutive anchors are laid out again by step 2 inside their section.
4. **Guarantees.** Every word is present, in order; ``start <= end``; starts and ends never
   decrease; all times lie in ``[offset_s, offset_s + len(pcm) / sample_rate_hz]``. Times are
   seconds from the start of the context's audio (``offset_s`` = the segment's position in it),
   so successive segments of a context keep increasing.

``segment_timestamps`` runs this on the normalised words (what was actually spoken:
``spoken_word_timestamps``, which phoneme timestamps share out too) and, unless
``use_normalized`` is set, reports each original token from its first normalised word's start
to its last one's end; a token that became no words ("USD" in "5 USD") gets a zero-length span
at the previous token's end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from api.text.normalization import NormalizedText

__all__ = [
    "TimestampConfig",
    "WordTimestamps",
    "estimate_word_timestamps",
    "segment_timestamps",
    "spoken_word_timestamps",
    "tokens_timestamps",
    "word_weight",
]

_VOWEL_GROUP_RE = re.compile(r"[aeiouyáéíóúàèìòùâêîôûãõäëïöüåæøœý]+", re.IGNORECASE)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_CLAUSE_END = tuple(",;:、，；：")
_SENTENCE_END = tuple(".!?…。！？")
_CLOSERS = "\"'”’»)]}」』）"


@dataclass(frozen=True, slots=True)
class TimestampConfig:
    """Knobs of the estimator (see the module docstring); defaults suit TTS output."""

    frame_s: float = 0.010
    silence_below_peak_db: float = 35.0
    silence_floor_fraction: float = 0.3
    min_silence_s: float = 0.030  # shorter silent runs count as voiced
    min_pause_s: float = 0.080  # silent runs at least this long can anchor a word boundary
    snap_window_s: float = 0.20  # minimum snapping tolerance
    snap_window_words: float = 0.6  # ... or this many mean word durations, whichever is larger
    snap_window_pauses: float = 3.0  # ... or this many times the pause's own length (long pauses)
    clause_gap: float = 0.5  # weight of the pause after , ; :
    sentence_gap: float = 0.75  # weight of the pause after . ! ? …


DEFAULT_CONFIG = TimestampConfig()


@dataclass(frozen=True, slots=True)
class WordTimestamps:
    """Parallel word/start/end lists, seconds from the start of the context's audio."""

    words: tuple[str, ...]
    start: tuple[float, ...]
    end: tuple[float, ...]

    def __post_init__(self) -> None:
        if not len(self.words) == len(self.start) == len(self.end):
            raise ValueError(
                f"words/start/end lengths differ: {len(self.words)}/{len(self.start)}/{len(self.end)}"
            )

    def __len__(self) -> int:
        return len(self.words)

    def to_wire(self) -> dict[str, list]:
        """The ``word_timestamps`` object of a timestamps event."""
        return {"words": list(self.words), "start": list(self.start), "end": list(self.end)}


def word_weight(word: str) -> float:
    """Relative spoken duration of one word (syllable-ish units, >= 0.3)."""
    letters = sum(ch.isalpha() for ch in word)
    cjk = len(_CJK_RE.findall(word))
    syllables = len(_VOWEL_GROUP_RE.findall(word)) + cjk + 2 * sum(ch.isdigit() for ch in word)
    if syllables == 0 and letters:
        syllables = 1  # "hmm", "Mr", consonant-only acronyms
    return max(0.3, syllables + 0.15 * (letters - cjk))


def _gap_weight(word: str, config: TimestampConfig) -> float:
    stripped = word.rstrip(_CLOSERS)
    if stripped.endswith(_SENTENCE_END):
        return config.sentence_gap
    if stripped.endswith(_CLAUSE_END):
        return config.clause_gap
    return 0.0


# --- voice activity -----------------------------------------------------------------------------


def _voiced_frames(pcm: np.ndarray, hop: int, config: TimestampConfig) -> np.ndarray:
    """[F] bool: frame f (samples f*hop .. (f+1)*hop) is voiced."""
    n_frames = -(-len(pcm) // hop)
    padded = np.zeros(n_frames * hop, dtype=np.float64)
    padded[: len(pcm)] = pcm
    rms = np.sqrt(np.mean(padded.reshape(n_frames, hop) ** 2, axis=1))
    db = 20.0 * np.log10(rms + 1e-10)
    peak, floor = np.percentile(db, 99), np.percentile(db, 5)
    if peak < -70.0:  # digital silence: nothing to align against
        return np.zeros(n_frames, dtype=bool)
    threshold = max(
        peak - config.silence_below_peak_db,
        floor + config.silence_floor_fraction * (peak - floor),
    )
    voiced = db > threshold
    # Short silent runs inside speech (stop closures) count as voiced.
    min_run = max(1, round(config.min_silence_s / config.frame_s))
    for start, stop in _runs(~voiced):
        if stop - start < min_run and start > 0 and stop < n_frames:
            voiced[start:stop] = True
    return voiced


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) index ranges where ``mask`` is True."""
    padded = np.concatenate(([False], mask, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))


# --- layout -------------------------------------------------------------------------------------


def _layout(
    weights: np.ndarray, gaps: np.ndarray, t0: float, t1: float, voiced_t: np.ndarray, frame_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Place words of ``weights`` (with ``gaps[i]`` after word i) on the voiced time of
    [t0, t1]. ``voiced_t`` are the start times of voiced frames. Returns (start, end)."""
    n = len(weights)
    units = np.zeros(2 * n)  # cumulative units at each word's start and end
    acc = 0.0
    for i in range(n):
        units[2 * i] = acc
        acc += weights[i]
        units[2 * i + 1] = acc
        if i < n - 1:
            acc += gaps[i]
    # Voiced time inside [t0, t1], as a piecewise-linear map from voiced seconds to clock time.
    lo = np.clip(voiced_t, t0, t1)
    hi = np.clip(voiced_t + frame_s, t0, t1)
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    if len(lo) == 0 or acc <= 0:
        edges = t0 + (t1 - t0) * (units / acc if acc > 0 else np.linspace(0, 1, 2 * n))
        return edges[0::2], edges[1::2]
    voiced_cum = np.concatenate(([0.0], np.cumsum(hi - lo)))
    target = units / acc * voiced_cum[-1]
    # A word start at a frame edge goes to the *next* voiced frame's start (right inverse); a word
    # end to the previous voiced frame's end (left inverse), so silences fall between words.
    starts = _voiced_to_clock(target[0::2], voiced_cum, lo, hi, right=True)
    ends = _voiced_to_clock(target[1::2], voiced_cum, lo, hi, right=False)
    starts[0], ends[-1] = lo[0], hi[-1]
    return starts, ends


def _voiced_to_clock(
    target: np.ndarray, voiced_cum: np.ndarray, lo: np.ndarray, hi: np.ndarray, right: bool
) -> np.ndarray:
    k = np.searchsorted(voiced_cum, target, side="right" if right else "left") - 1
    k = np.clip(k, 0, len(lo) - 1)
    return np.minimum(lo[k] + (target - voiced_cum[k]), hi[k])


def _match_pauses(
    pauses: list[tuple[float, float]],
    expected: np.ndarray,
    punctuated: np.ndarray,
    tolerance: float,
    pause_factor: float,
) -> dict[int, tuple[float, float]]:
    """Monotone one-to-one matching of pauses to boundaries (DP); boundary index -> pause.
    A pause may match a boundary up to ``max(tolerance, pause_factor * its length)`` away."""
    n_p, n_b = len(pauses), len(expected)
    if n_p == 0 or n_b == 0:
        return {}
    score = np.full((n_p, n_b), -np.inf)
    for p, (ps, pe) in enumerate(pauses):
        distance = np.maximum(0.0, np.maximum(ps - expected, expected - pe))  # 0 inside the pause
        window = max(tolerance, pause_factor * (pe - ps))
        ok = distance <= window
        length = min(1.0, (pe - ps) / 0.2)
        score[p, ok] = (1.0 - distance[ok] / window + 0.1) * (0.5 + length) * (1.0 + punctuated[ok])
    best = np.zeros((n_p + 1, n_b + 1))
    for p in range(1, n_p + 1):
        for b in range(1, n_b + 1):
            best[p, b] = max(best[p - 1, b], best[p, b - 1], best[p - 1, b - 1] + score[p - 1, b - 1])
    matches: dict[int, tuple[float, float]] = {}
    p, b = n_p, n_b
    while p > 0 and b > 0:
        if best[p, b] == best[p - 1, b]:
            p -= 1
        elif best[p, b] == best[p, b - 1]:
            b -= 1
        else:
            matches[b - 1] = pauses[p - 1]
            p, b = p - 1, b - 1
    return matches


def estimate_word_timestamps(
    words: Sequence[str],
    pcm: np.ndarray,
    offset_s: float = 0.0,
    sample_rate_hz: int = 22050,
    config: TimestampConfig = DEFAULT_CONFIG,
) -> WordTimestamps:
    """Word times for ``words`` spoken in ``pcm  # [T] float32 @ sample_rate_hz``, shifted by
    ``offset_s`` (the segment's start within the context's audio). See the module docstring."""
    x = np.asarray(pcm, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"expected mono PCM of shape [T], got shape {x.shape}")
    if sample_rate_hz <= 0:
        raise ValueError(f"sample_rate_hz must be positive, got {sample_rate_hz}")
    words = tuple(words)
    n = len(words)
    duration = len(x) / sample_rate_hz
    if n == 0:
        return WordTimestamps((), (), ())
    if len(x) == 0:
        zeros = (float(offset_s),) * n
        return WordTimestamps(words, zeros, zeros)

    # 1) voice activity and speech span
    hop = max(1, round(config.frame_s * sample_rate_hz))
    frame_s = hop / sample_rate_hz
    voiced = _voiced_frames(x, hop, config)
    if not voiced.any():
        voiced[:] = True
    voiced_t = np.flatnonzero(voiced) * frame_s
    span0, span1 = float(voiced_t[0]), min(float(voiced_t[-1] + frame_s), duration)
    min_pause_frames = max(1, round(config.min_pause_s / frame_s))
    pauses = [
        (a * frame_s, b * frame_s)
        for a, b in _runs(~voiced)
        if b - a >= min_pause_frames and a * frame_s > span0 and b * frame_s < span1
    ]

    # 2) duration model over the whole span
    weights = np.array([word_weight(w) for w in words])
    gaps = np.array([_gap_weight(w, config) for w in words[:-1]])
    starts, ends = _layout(weights, gaps, span0, span1, voiced_t, frame_s)

    # 3) snap boundaries to pauses, then lay out each section between anchors again
    if n > 1 and pauses:
        expected = (ends[:-1] + starts[1:]) / 2
        tolerance = max(config.snap_window_s, config.snap_window_words * (span1 - span0) / n)
        anchors = _match_pauses(
            pauses, expected, (gaps > 0).astype(float), tolerance, config.snap_window_pauses
        )
        if anchors:
            section_start, first = span0, 0
            for b in sorted(anchors) + [n - 1]:
                section_end = anchors[b][0] if b in anchors else span1
                s, e = _layout(
                    weights[first : b + 1], gaps[first:b], section_start, section_end, voiced_t, frame_s
                )
                starts[first : b + 1], ends[first : b + 1] = s, e
                if b in anchors:
                    section_start, first = anchors[b][1], b + 1

    # 4) guarantees: order, start <= end, inside [0, duration]
    starts = np.clip(starts, 0.0, duration)
    ends = np.clip(ends, 0.0, duration)
    ends = np.maximum(ends, starts)
    edges = np.maximum.accumulate(np.stack([starts, ends], axis=1).reshape(-1))
    edges = np.minimum(edges, duration) + offset_s
    return WordTimestamps(words, tuple(edges[0::2].tolist()), tuple(edges[1::2].tolist()))


def segment_timestamps(
    normalized: NormalizedText,
    pcm: np.ndarray,
    offset_s: float,
    use_normalized: bool = False,
    sample_rate_hz: int = 22050,
    config: TimestampConfig = DEFAULT_CONFIG,
) -> WordTimestamps:
    """Timestamps of one segment: estimated on its normalised words, reported for the original
    tokens (default) or the normalised words (``use_normalized_timestamps``)."""
    timed = spoken_word_timestamps(normalized, pcm, offset_s, sample_rate_hz, config)
    return timed if use_normalized else tokens_timestamps(normalized, timed, offset_s)


def spoken_word_timestamps(
    normalized: NormalizedText,
    pcm: np.ndarray,
    offset_s: float,
    sample_rate_hz: int = 22050,
    config: TimestampConfig = DEFAULT_CONFIG,
) -> WordTimestamps:
    """The estimate on the words actually spoken (the normalised words), one entry each."""
    return estimate_word_timestamps(normalized.normalized_words, pcm, offset_s, sample_rate_hz, config)


def tokens_timestamps(normalized: NormalizedText, timed: WordTimestamps, offset_s: float = 0.0) -> WordTimestamps:
    """The client's own tokens, each from its first spoken word's start to its last one's end, given
    ``timed``, the spoken words' timestamps (``spoken_word_timestamps``); tokens with no spoken word
    before every spoken one (or with none spoken at all) are points at the segment's start, ``offset_s``."""
    starts, ends = [], []
    k = 0
    previous_end: Optional[float] = None
    for entry in normalized.alignment:
        count = len(entry.normalized)
        if count:
            starts.append(timed.start[k])
            ends.append(timed.end[k + count - 1])
            k += count
        else:
            if previous_end is not None:
                t = previous_end
            else:  # a leading token without words: a point where the first word starts
                t = timed.start[k] if k < len(timed) else float(offset_s)
            starts.append(t)
            ends.append(t)
        previous_end = ends[-1]
    return WordTimestamps(tuple(normalized.original_words), tuple(starts), tuple(ends))
