"""Errors raised by the text path (normalisation, segmentation, timestamps).

    TextError (ValueError)
    ├── NormalizationModeError     ``normalization`` is not "auto", "off" or a locale code
    ├── InvalidMarkupError         a transcript tag with a value it cannot take (api/text/markup.py)
    ├── UnsupportedPhonemeLanguageError  phonemes asked for in a language eSpeak NG has no voice for
    └── PhonemesUnavailableError   no eSpeak NG library to read phonemes with (api/text/phonemes.py)
"""

from __future__ import annotations


class TextError(ValueError):
    """Base class of the text path's deliberate errors."""


class NormalizationModeError(TextError):
    """Unknown normalisation mode; the message names it and the accepted values."""


class InvalidMarkupError(TextError):
    """A well-formed known tag with a bad value (``<break time="30s"/>``, ``<speed ratio="3"/>``); the
    message quotes the tag and names the value and what it may be. 400 ``invalid_markup``."""


class UnsupportedPhonemeLanguageError(TextError):
    """``add_phoneme_timestamps`` in a language eSpeak NG has no voice for; the message names it.
    400 ``unsupported_language``."""

    def __init__(self, language: str) -> None:
        super().__init__(
            f"add_phoneme_timestamps: no phonemes for language {language!r} (eSpeak NG has no voice for it); "
            "send the request without add_phoneme_timestamps, or in another language"
        )
        self.language = language


class PhonemesUnavailableError(TextError):
    """No eSpeak NG library could be loaded, so no phonemes can be read. 501 ``phonemes_unavailable``."""
