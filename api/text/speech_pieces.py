"""A segment's speech, cut into pieces one engine request can finish.

The segmenter (api/text/segmentation.py) cuts a transcript at sentences and at 400 characters, which
in prose is at most ~80 spoken words. Reading can multiply the words of a segment, though: 400
digits without a space are read one by one as 400 words, a 200-character ``<spell>`` as 200 or
more. Each engine request has a frame cap (engine/prompt.py ``adaptive_max_frames``: at most 2,000
frames, ~93 s), and Gepard's upstream duration heuristic (0.7 s + 0.4 s a word) puts 400 words at
~160 s: the cap would cut the segment's second half off, and text the server had accepted would
never be spoken. So a segment's speech longer than ``MAX_PIECE_WORDS`` is read as several engine
requests in a row, each within it.

There are as few pieces as the budget allows. Cuts fall between words, as evenly as the count
allows, and where a word ends in punctuation (",", ".", ";", ":", "!", "?") near the even cut, after
it: a pause the model would make anyway.
Speech within the budget is one piece, unchanged.
"""

from __future__ import annotations

__all__ = ["MAX_PIECE_WORDS", "speech_pieces"]

#: The most words one engine request reads: ~49 s at the upstream heuristic, about half the frame
#: cap, so a voice up to ~1.9x slower than the heuristic still finishes. Prose segments never reach it.
MAX_PIECE_WORDS = 120

_PAUSE_MARKS = frozenset(",.;:!?")


def speech_pieces(text: str, max_words: int = MAX_PIECE_WORDS) -> list[str]:
    """``text`` as pieces of at most ``max_words`` words each (module docstring); ``[text]`` when
    it is within the budget."""
    if max_words < 1:
        raise ValueError(f"max_words must be >= 1, got {max_words}")
    words = text.split()
    if len(words) <= max_words:
        return [text]
    pieces: list[str] = []
    start = 0
    while start < len(words):
        end = _cut(words, start, max_words)
        pieces.append(" ".join(words[start:end]))
        start = end
    return pieces


def _cut(words: list[str], start: int, max_words: int) -> int:
    """Where the piece starting at ``words[start]`` ends (exclusive): the rest when it fits, else
    the even share of the pieces left, moved to the nearest word ending in punctuation within a
    quarter of the budget, never past the budget nor so early that the rest needs another piece."""
    left = len(words) - start
    if left <= max_words:
        return len(words)
    count = -(-left // max_words)  # the fewest pieces the rest fits in
    even = start + -(-left // count)
    lo = max(start + 1, even - max_words // 4, len(words) - (count - 1) * max_words)
    hi = min(start + max_words, even + max_words // 4)
    marked = [i + 1 for i in range(lo - 1, hi) if words[i][-1] in _PAUSE_MARKS]
    return min(marked, key=lambda end: abs(end - even)) if marked else even
