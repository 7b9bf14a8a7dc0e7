"""The gateway's audio path: codec PCM (22.05 kHz float32) -> output rate -> encoding -> container.

HTTP-free and pure; see each module's docstring for units and conventions.
"""

from api.audio.containers import (
    UNKNOWN_SIZE,
    ContainerWriter,
    Mp3Writer,
    RawWriter,
    WavWriter,
    make_writer,
    wav_header,
)
from api.audio.encoding import AudioEncoding, decode_pcm, encode_pcm
from api.audio.errors import (
    AudioFormatError,
    UnsupportedBitRateError,
    UnsupportedContainerError,
    UnsupportedEncodingError,
    UnsupportedSampleRateError,
)
from api.audio.formats import (
    SUPPORTED_BIT_RATES_BPS,
    SUPPORTED_SAMPLE_RATES_HZ,
    Container,
    OutputFormat,
)
from api.audio.pipeline import AudioSink
from api.audio.resampling import CODEC_SAMPLE_RATE_HZ, StreamingResampler

__all__ = [
    "CODEC_SAMPLE_RATE_HZ",
    "SUPPORTED_BIT_RATES_BPS",
    "SUPPORTED_SAMPLE_RATES_HZ",
    "UNKNOWN_SIZE",
    "AudioEncoding",
    "AudioFormatError",
    "AudioSink",
    "Container",
    "ContainerWriter",
    "Mp3Writer",
    "OutputFormat",
    "RawWriter",
    "StreamingResampler",
    "UnsupportedBitRateError",
    "UnsupportedContainerError",
    "UnsupportedEncodingError",
    "UnsupportedSampleRateError",
    "WavWriter",
    "decode_pcm",
    "encode_pcm",
    "make_writer",
    "wav_header",
]
