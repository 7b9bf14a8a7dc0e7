"""Errors raised by the text path (normalisation, segmentation, timestamps).

    TextError (ValueError)
    └── NormalizationModeError     ``normalization`` is not "auto", "off" or a locale code
"""

from __future__ import annotations


class TextError(ValueError):
    """Base class of the text path's deliberate errors."""


class NormalizationModeError(TextError):
    """Unknown normalisation mode; the message names it and the accepted values."""
