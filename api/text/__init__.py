"""The gateway's text path: transcript tags, normalisation (with alignment), segmentation of
streamed transcripts, and word timestamps estimated from the synthesised audio. HTTP-free and pure."""

from api.text.errors import InvalidMarkupError, NormalizationModeError, TextError
from api.text.markup import MarkupState
from api.text.normalization import (
    NormalizationMode,
    NormalizedText,
    WordAlignment,
    known_abbreviations,
    normalize,
    rules_for,
)
from api.text.segmentation import TextBuffer
from api.text.speech import has_speech, is_blank
from api.text.timestamps import (
    TimestampConfig,
    WordTimestamps,
    estimate_word_timestamps,
    segment_timestamps,
    word_weight,
)

__all__ = [
    "InvalidMarkupError",
    "MarkupState",
    "NormalizationMode",
    "NormalizationModeError",
    "NormalizedText",
    "TextBuffer",
    "TextError",
    "TimestampConfig",
    "WordAlignment",
    "WordTimestamps",
    "estimate_word_timestamps",
    "has_speech",
    "is_blank",
    "known_abbreviations",
    "normalize",
    "rules_for",
    "segment_timestamps",
    "word_weight",
]
