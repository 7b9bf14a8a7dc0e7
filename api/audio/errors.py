"""Errors raised by the audio path (encodings, containers, resampling, output formats).

    AudioFormatError (ValueError)     the requested output format cannot be served as given
    ├── UnsupportedEncodingError      ``encoding`` is not one of pcm_f32le/pcm_s16le/pcm_mulaw/pcm_alaw
    ├── UnsupportedContainerError     ``container`` is not one of raw/wav/mp3
    ├── UnsupportedSampleRateError    ``sample_rate`` is not one of 8000/16000/22050/24000/44100/48000
    └── UnsupportedBitRateError       ``bit_rate`` (mp3) is not one of 32000/64000/96000/128000/192000

Every message names the offending value and the accepted ones, so ``api/errors.py`` can pass it
to the client unchanged (HTTP 400 / an in-band error event).
"""

from __future__ import annotations


class AudioFormatError(ValueError):
    """The output format (or one of its fields) is not supported; the message says which."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field  # dotted wire name, e.g. "output_format.sample_rate"


class UnsupportedEncodingError(AudioFormatError):
    """Unknown or missing PCM encoding."""


class UnsupportedContainerError(AudioFormatError):
    """Unknown container."""


class UnsupportedSampleRateError(AudioFormatError):
    """Sample rate outside the protocol's set."""


class UnsupportedBitRateError(AudioFormatError):
    """MP3 bit rate outside the protocol's set."""
