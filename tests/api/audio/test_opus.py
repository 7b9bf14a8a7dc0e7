"""Opus and the PyAV writers: frame cutting, raw Opus packets (one continuous stream whatever the
piece boundaries), Ogg Opus / AAC / FLAC files that decode to the input (PyAV's own decoders)."""

from __future__ import annotations

import io
import math

import av
import numpy as np
import pytest
import scipy.signal
import soundfile

from api.audio import OutputFormat, make_writer
from api.audio.av_writer import AvFormat, AvWriter
from api.audio.containers import OpusPacketWriter
from api.audio.encoding import float_to_s16
from api.audio.frames import FrameCutter
from api.audio.opus import OpusPacketEncoder


def signal(n: int, seed: int = 0) -> np.ndarray:
    """Band-limited noise (a speech-like spectrum without DC, which Opus would drop)."""
    x = np.random.default_rng(seed).standard_normal(n) * 0.2
    return scipy.signal.sosfilt(scipy.signal.butter(4, [0.01, 0.3], "bandpass", output="sos"), x).astype(np.float32)


def pieces(x: np.ndarray, seed: int = 1) -> list[np.ndarray]:
    cuts = np.sort(np.random.default_rng(seed).integers(0, len(x), 25))
    return np.split(x, cuts)  # includes empty and 1-sample pieces


def decode_packets(packets: list[bytes]) -> np.ndarray:
    decoder = av.CodecContext.create("libopus", "r")
    decoder.layout = "mono"
    decoder.sample_rate = 48000
    frames = [f.to_ndarray().reshape(-1) for p in packets for f in decoder.decode(av.Packet(p))]
    return np.concatenate(frames).astype(np.float32) / 32768.0


def test_frame_cutter_is_independent_of_piece_boundaries():
    x = np.arange(1000, dtype=np.float32)
    cutter = FrameCutter(64)
    frames = [f for p in pieces(x) for f in cutter.cut(p)]
    assert len(frames) == 1000 // 64 and all(len(f) == 64 for f in frames)
    assert np.array_equal(np.concatenate(frames + [cutter.rest()]), x)
    assert cutter.held == 0 and len(cutter.rest()) == 0


@pytest.mark.parametrize("rate", [8000, 16000, 24000, 48000])
def test_opus_packets_are_one_stream_whatever_the_pieces(rate):
    x = signal(rate + 123)
    whole = OpusPacketEncoder(rate)
    expected = whole.encode(x) + whole.finish()
    enc = OpusPacketEncoder(rate)
    got = [p for piece in pieces(x) for p in enc.encode(piece)] + enc.finish()
    assert got == expected  # same packets: the encoder state runs on across pieces
    assert len(got) == math.ceil(len(x) / (rate // 50)) + 1  # 20 ms each, plus the look-ahead packet
    assert enc.pre_skip_48k == 312


def test_opus_packets_decode_to_the_input():
    x = signal(48000)
    enc = OpusPacketEncoder(48000, 128000)
    y = decode_packets(enc.encode(x) + enc.finish())
    assert len(y) == (math.ceil(len(x) / 960) + 1) * 960
    y = y[enc.pre_skip_48k:][: len(x)]
    assert np.corrcoef(y, x)[0, 1] > 0.99


def test_opus_encoder_edges():
    assert OpusPacketEncoder(24000).finish() == []  # nothing in, nothing out
    enc = OpusPacketEncoder(24000)
    enc.encode(signal(100))
    assert len(enc.finish()) == 2  # the padded partial frame and the look-ahead
    with pytest.raises(RuntimeError):
        enc.encode(signal(10))
    with pytest.raises(ValueError, match="Opus encodes at"):
        OpusPacketEncoder(22050)
    with pytest.raises(ValueError, match="bit rate"):
        OpusPacketEncoder(48000, 300000)


def test_raw_opus_writer_gives_one_unit_per_packet():
    writer = make_writer(OutputFormat.parse("raw", "opus", 16000))
    assert isinstance(writer, OpusPacketWriter)
    units = writer.write_units(signal(16000)) + writer.finish_units()
    assert len(units) == 50 + 1 and all(0 < len(u) < 1276 for u in units)  # 1275: Opus's largest frame


def _decode(data: bytes) -> tuple[np.ndarray, int]:
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.audio[0]
        return np.concatenate([f.to_ndarray().reshape(-1) for f in c.decode(s)]), s.codec_context.sample_rate


def _write_all(writer, x: np.ndarray) -> tuple[list[bytes], bytes]:
    return [writer.write(p) for p in pieces(x)], writer.finish()


@pytest.mark.parametrize("rate", [16000, 24000, 48000])
def test_ogg_opus_streams_and_has_the_exact_length(rate):
    x = signal(rate + 77)
    body, tail = _write_all(AvWriter(AvFormat.OGG_OPUS, rate), x)
    data = b"".join(body) + tail
    assert data[:4] == b"OggS" and sum(1 for b in body if b) >= len(body) // 2  # pages go out as written
    y, out_rate = _decode(data)
    assert out_rate == 48000 and len(y) == len(x) * 48000 // rate  # pre-skip and end trimming


def test_ogg_opus_from_make_writer():
    writer = make_writer(OutputFormat.parse("ogg", "opus", 24000, 32000))
    assert isinstance(writer, AvWriter) and writer.format is AvFormat.OGG_OPUS


def test_aac_streams_with_its_priming():
    x = signal(24000)
    body, tail = _write_all(AvWriter(AvFormat.AAC, 24000), x)
    assert any(body)
    y, rate = _decode(b"".join(body) + tail)
    assert rate == 24000 and len(x) + 1024 <= len(y) <= len(x) + 3 * 1024


def test_flac_is_lossless_and_whole_at_the_end():
    x = signal(24000 + 5)
    body, tail = _write_all(AvWriter(AvFormat.FLAC, 24000), x)
    assert not any(body)  # its header holds the length: the file comes out of finish
    y, rate = soundfile.read(io.BytesIO(tail), dtype="int16")
    assert rate == 24000 and np.array_equal(y, float_to_s16(x))
