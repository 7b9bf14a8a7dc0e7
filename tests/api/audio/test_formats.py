"""OutputFormat validation: accepted values and errors naming the bad value."""

from __future__ import annotations

import pytest

from api.audio.encoding import AudioEncoding
from api.audio.errors import (
    AudioFormatError,
    UnsupportedBitRateError,
    UnsupportedContainerError,
    UnsupportedEncodingError,
    UnsupportedSampleRateError,
)
from api.audio.formats import SUPPORTED_SAMPLE_RATES_HZ, Container, OutputFormat


@pytest.mark.parametrize("rate", SUPPORTED_SAMPLE_RATES_HZ)
@pytest.mark.parametrize("encoding", [e.value for e in AudioEncoding])
def test_raw_and_wav_accept_every_rate_and_encoding(rate, encoding):
    for container in ("raw", "wav"):
        fmt = OutputFormat.parse(container, encoding, rate)
        assert fmt.container is Container(container)
        assert fmt.encoding is AudioEncoding(encoding)
        assert fmt.sample_rate_hz == rate and fmt.bit_rate_bps is None


def test_mp3_ignores_encoding_and_defaults_bit_rate():
    fmt = OutputFormat.parse("mp3", "pcm_f32le", 44100)
    assert (fmt.encoding, fmt.bit_rate_bps) == (None, 128000)
    assert OutputFormat.parse("mp3", None, 8000, 32000).bit_rate_bps == 32000
    assert fmt.media_type == "audio/mpeg" and fmt.bytes_per_sample is None


def test_raw_ignores_bit_rate_and_reports_media_type():
    fmt = OutputFormat.parse("raw", "pcm_s16le", 16000, 128000)
    assert fmt.bit_rate_bps is None
    assert fmt.media_type == "application/octet-stream" and fmt.bytes_per_sample == 2
    assert OutputFormat.parse("wav", "pcm_mulaw", 8000).media_type == "audio/wav"


def test_integral_float_rate_is_accepted():
    assert OutputFormat.parse("raw", "pcm_f32le", 24000.0).sample_rate_hz == 24000


@pytest.mark.parametrize(
    "args, error, pattern",
    [
        (("flac", "pcm_s16le", 16000), UnsupportedContainerError, "container 'flac'; expected one of: raw, wav, mp3, ogg"),
        # Opus (extension): ogg carries Opus only, Opus takes its own rates and bit rates
        (("ogg", "pcm_s16le", 16000), UnsupportedEncodingError, "encoding 'pcm_s16le' for container 'ogg'; expected one of: opus"),
        (("ogg", None, 16000), UnsupportedEncodingError, "encoding is required for container 'ogg'"),
        (("wav", "opus", 16000), UnsupportedEncodingError, "'opus' for container 'wav'; Opus goes in container 'ogg'"),
        (("raw", "opus", 22050), UnsupportedSampleRateError, "sample_rate 22050 for opus; expected one of: 8000, 16000, 24000, 48000"),
        (("ogg", "opus", 44100), UnsupportedSampleRateError, "sample_rate 44100 for opus"),
        (("raw", "opus", 48000, 5000), UnsupportedBitRateError, r"bit_rate 5000 for opus; expected an integer in \[6000, 256000\]"),
        (("raw", "pcm_s24le", 16000), UnsupportedEncodingError, "encoding 'pcm_s24le'"),
        (("raw", None, 16000), UnsupportedEncodingError, "encoding is required for container 'raw'"),
        (("wav", "pcm_s16le", 11025), UnsupportedSampleRateError, "sample_rate 11025; expected one of: 8000"),
        (("wav", "pcm_s16le", "16000"), UnsupportedSampleRateError, "sample_rate '16000'"),
        (("wav", "pcm_s16le", True), UnsupportedSampleRateError, "sample_rate True"),
        (("raw", "pcm_s16le", None), UnsupportedSampleRateError, "sample_rate is required"),
        (("mp3", None, 44100, 320000), UnsupportedBitRateError, "bit_rate 320000; expected one of: 32000"),
    ],
)
def test_invalid_values_raise_naming_the_value(args, error, pattern):
    with pytest.raises(error, match=pattern) as info:
        OutputFormat.parse(*args)
    assert isinstance(info.value, AudioFormatError) and isinstance(info.value, ValueError)
    assert info.value.field.startswith("output_format.")


def test_constructor_validates_too():
    with pytest.raises(UnsupportedSampleRateError):
        OutputFormat(Container.RAW, AudioEncoding.PCM_S16LE, 12345)
    with pytest.raises(UnsupportedEncodingError, match="mp3 output has no encoding"):
        OutputFormat(Container.MP3, AudioEncoding.PCM_S16LE, 16000, 64000)
    with pytest.raises(UnsupportedBitRateError, match="mp3 only"):
        OutputFormat(Container.WAV, AudioEncoding.PCM_S16LE, 16000, 64000)


@pytest.mark.parametrize("container", ["raw", "ogg"])
@pytest.mark.parametrize("rate", [8000, 16000, 24000, 48000])
def test_opus_formats(container, rate):
    fmt = OutputFormat.parse(container, "opus", rate)
    assert (fmt.opus, fmt.encoding, fmt.sample_rate_hz, fmt.bit_rate_bps) == (True, None, rate, 64000)
    assert fmt.is_opus_packets is (container == "raw")
    assert fmt.unit_bytes == 1 and fmt.bytes_per_sample is None
    assert OutputFormat.parse(container, "opus", rate, 24000).bit_rate_bps == 24000


def test_sdk_formats_are_not_opus():
    for args in [("raw", "pcm_s16le", 16000), ("wav", "pcm_f32le", 44100), ("mp3", None, 44100, 128000)]:
        fmt = OutputFormat.parse(*args)
        assert not fmt.opus and not fmt.is_opus_packets
