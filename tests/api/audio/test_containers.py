"""WAV headers parsed back by `wave`/soundfile, raw passthrough, and MP3 that decodes."""

from __future__ import annotations

import io
import struct
import wave

import numpy as np
import pytest
import soundfile as sf

from api.audio.containers import (
    UNKNOWN_SIZE,
    Mp3Writer,
    RawWriter,
    WavWriter,
    make_writer,
    wav_header,
)
from api.audio.encoding import AudioEncoding, decode_pcm, encode_pcm
from api.audio.formats import SUPPORTED_BIT_RATES_BPS, SUPPORTED_SAMPLE_RATES_HZ, OutputFormat

SUBTYPES = {
    AudioEncoding.PCM_S16LE: "PCM_16",
    AudioEncoding.PCM_F32LE: "FLOAT",
    AudioEncoding.PCM_MULAW: "ULAW",
    AudioEncoding.PCM_ALAW: "ALAW",
}


def _tone(n: int, rate: int, freq: float = 440.0) -> np.ndarray:
    return (0.4 * np.sin(2 * np.pi * freq * np.arange(n) / rate)).astype(np.float32)


def _write_all(writer, x: np.ndarray, pieces: int = 3) -> bytes:
    return b"".join(writer.write(p) for p in np.array_split(x, pieces)) + writer.finish()


def test_pcm_header_layout_is_the_canonical_44_bytes():
    h = wav_header(AudioEncoding.PCM_S16LE, 16000, 1000)
    assert len(h) == 44
    assert h[:4] == b"RIFF" and h[8:16] == b"WAVEfmt "
    riff, = struct.unpack("<I", h[4:8])
    assert riff == 36 + 2000
    tag, ch, rate, byte_rate, align, bits = struct.unpack("<HHIIHH", h[20:36])
    assert (tag, ch, rate, byte_rate, align, bits) == (1, 1, 16000, 32000, 2, 16)
    assert h[36:40] == b"data" and struct.unpack("<I", h[40:44]) == (2000,)


@pytest.mark.parametrize(
    "encoding, tag, bits", [("pcm_f32le", 3, 32), ("pcm_alaw", 6, 8), ("pcm_mulaw", 7, 8)]
)
def test_non_pcm_headers_have_cbsize_and_fact(encoding, tag, bits):
    h = wav_header(AudioEncoding(encoding), 8000, 11)
    assert struct.unpack("<I", h[16:20]) == (18,)
    assert struct.unpack("<HHIIHHH", h[20:38]) == (tag, 1, 8000, 8000 * bits // 8, bits // 8, bits, 0)
    assert h[38:42] == b"fact" and struct.unpack("<II", h[42:50]) == (4, 11)
    assert h[50:54] == b"data" and struct.unpack("<I", h[54:58]) == (11 * bits // 8,)


def test_unknown_length_uses_ffffffff_sizes():
    h = wav_header(AudioEncoding.PCM_MULAW, 8000, None)
    assert struct.unpack("<I", h[4:8]) == (UNKNOWN_SIZE,)
    assert struct.unpack("<I", h[-4:]) == (UNKNOWN_SIZE,)
    assert struct.unpack("<I", h[46:50]) == (UNKNOWN_SIZE,)  # fact count


@pytest.mark.parametrize("encoding", list(AudioEncoding))
@pytest.mark.parametrize("known_length", [True, False])
def test_wav_reads_back_with_soundfile(encoding, known_length):
    x = _tone(1001, 16000)
    data = _write_all(WavWriter(encoding, 16000, len(x) if known_length else None), x)
    info = sf.info(io.BytesIO(data))
    assert (info.samplerate, info.channels, info.frames, info.subtype) == (16000, 1, 1001, SUBTYPES[encoding])
    y, rate = sf.read(io.BytesIO(data), dtype="float32")
    np.testing.assert_allclose(y, decode_pcm(encode_pcm(x, encoding), encoding), atol=1e-6)
    if known_length:
        assert struct.unpack("<I", data[4:8]) == (len(data) - 8,)  # pad byte included


def test_s16_wav_reads_back_with_wave_module():
    x = _tone(2000, 24000)
    data = _write_all(WavWriter(AudioEncoding.PCM_S16LE, 24000, len(x)), x)
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()) == (1, 2, 24000, 2000)
        assert w.readframes(2000) == encode_pcm(x, "pcm_s16le")


def test_streaming_s16_wav_is_readable_by_wave_module_too():
    x = _tone(300, 8000)
    data = _write_all(WavWriter(AudioEncoding.PCM_S16LE, 8000, None), x)
    with wave.open(io.BytesIO(data)) as w:
        assert w.readframes(10**6) == encode_pcm(x, "pcm_s16le")


def test_header_comes_once_and_first():
    w = WavWriter(AudioEncoding.PCM_S16LE, 8000)
    first, second = w.write(np.zeros(4, np.float32)), w.write(np.zeros(4, np.float32))
    assert first[:4] == b"RIFF" and len(first) == 44 + 8 and len(second) == 8
    assert w.finish() == b""


def test_empty_wav_is_still_a_valid_file():
    data = WavWriter(AudioEncoding.PCM_F32LE, 22050, 0).finish()
    assert sf.info(io.BytesIO(data)).frames == 0


def test_known_length_is_enforced():
    w = WavWriter(AudioEncoding.PCM_S16LE, 8000, 10)
    w.write(np.zeros(6, np.float32))
    with pytest.raises(ValueError, match="declared 10 samples; writing 5 more after 6"):
        w.write(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="declared 10 samples but 6 were written"):
        w.finish()


def test_raw_writer_is_plain_encoding_and_closes():
    x = _tone(100, 8000)
    w = RawWriter(AudioEncoding.PCM_ALAW)
    assert _write_all(w, x) == encode_pcm(x, "pcm_alaw")
    with pytest.raises(RuntimeError, match="finished"):
        w.write(x)


def _mp3_bytes(rate: int, bit_rate: int, seconds: float) -> bytes:
    n = int(rate * seconds)
    return _write_all(Mp3Writer(rate, bit_rate), _tone(n, rate, 440.0), pieces=7)


@pytest.mark.parametrize("rate", SUPPORTED_SAMPLE_RATES_HZ)
def test_mp3_decodes_at_the_requested_rate_with_plausible_duration(rate):
    data = _mp3_bytes(rate, 64000, 1.0)
    y, got_rate = sf.read(io.BytesIO(data), dtype="float32")
    assert got_rate == rate
    # Encoder delay + frame padding add at most ~3 MPEG frames (1152 samples each at >= 32 kHz).
    assert 1.0 <= len(y) / rate <= 1.0 + 3 * 1152 / rate
    # The tone survives: the spectral peak is at 440 Hz.
    spectrum = np.abs(np.fft.rfft(y * np.hanning(len(y))))
    assert abs(np.argmax(spectrum) * rate / len(y) - 440) < 5


@pytest.mark.parametrize("bit_rate", SUPPORTED_BIT_RATES_BPS)
def test_mp3_bit_rate_sets_the_stream_size(bit_rate):
    data = _mp3_bytes(48000, bit_rate, 2.0)
    measured = len(data) * 8 / 2.0
    assert 0.9 * bit_rate <= measured <= 1.25 * bit_rate


def test_mp3_without_input_still_finishes():
    assert isinstance(Mp3Writer(22050, 128000).finish(), bytes)


def test_make_writer_picks_by_container():
    assert isinstance(make_writer(OutputFormat.parse("raw", "pcm_s16le", 8000)), RawWriter)
    assert isinstance(make_writer(OutputFormat.parse("wav", "pcm_s16le", 8000)), WavWriter)
    assert isinstance(make_writer(OutputFormat.parse("mp3", None, 8000, 32000)), Mp3Writer)
