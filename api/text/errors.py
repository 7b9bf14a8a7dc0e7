"""Errors raised by the text path (normalisation, segmentation, timestamps).

    TextError (ValueError)
    ├── NormalizationModeError     ``normalization`` is not "auto", "off" or a locale code
    └── InvalidMarkupError         a transcript tag with a value it cannot take (api/text/markup.py)
"""

from __future__ import annotations


class TextError(ValueError):
    """Base class of the text path's deliberate errors."""


class NormalizationModeError(TextError):
    """Unknown normalisation mode; the message names it and the accepted values."""


class InvalidMarkupError(TextError):
    """A well-formed known tag with a bad value (``<break time="30s"/>``, ``<speed ratio="3"/>``); the
    message quotes the tag and names the value and what it may be. 400 ``invalid_markup``."""
