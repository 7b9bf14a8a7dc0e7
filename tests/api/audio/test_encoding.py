"""Byte-exact checks of api/audio/encoding.py against known values and the G.711 definition."""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest

from api.audio.encoding import (
    AudioEncoding,
    alaw_to_linear,
    decode_pcm,
    encode_pcm,
    float_to_s16,
    linear_to_alaw,
    linear_to_mulaw,
    mulaw_to_linear,
)
from api.audio.errors import UnsupportedEncodingError

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        import audioop  # stdlib up to 3.12; used here only as an independent reference
    except ImportError:  # pragma: no cover - Python >= 3.13
        audioop = None

ALL_S16 = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16)
ALL_CODES = np.arange(256, dtype=np.int32).astype(np.uint8)


def test_sample_widths_and_wire_values():
    assert {e.value: e.sample_width for e in AudioEncoding} == {
        "pcm_f32le": 4,
        "pcm_s16le": 2,
        "pcm_mulaw": 1,
        "pcm_alaw": 1,
    }
    assert AudioEncoding.parse("pcm_alaw") is AudioEncoding.PCM_ALAW


def test_parse_rejects_unknown_encoding_naming_it():
    with pytest.raises(UnsupportedEncodingError, match="'pcm_s24le'.*pcm_f32le"):
        AudioEncoding.parse("pcm_s24le")


def test_s16_known_values():
    pcm = np.array([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -3.0, 1 / 32768, 0.25 + 0.4 / 32768], np.float32)
    data = encode_pcm(pcm, AudioEncoding.PCM_S16LE)
    expected = [0, 16384, -16384, 32767, -32768, 32767, -32768, 1, 8192]
    assert data == struct.pack("<9h", *expected)


def test_s16_rounds_to_nearest():
    # 0.6 and 1.4 LSB round to 1; -0.6 LSB rounds to -1.
    pcm = np.array([0.6, 1.4, -0.6], np.float64) / 32768
    assert float_to_s16(pcm).tolist() == [1, 1, -1]


def test_s16_round_trip_is_exact_for_every_int16():
    data = ALL_S16.astype("<i2").tobytes()
    assert encode_pcm(decode_pcm(data, "pcm_s16le"), "pcm_s16le") == data


def test_non_finite_samples_become_finite():
    data = encode_pcm(np.array([np.nan, np.inf, -np.inf], np.float32), AudioEncoding.PCM_F32LE)
    assert struct.unpack("<3f", data) == (0.0, 1.0, -1.0)
    assert encode_pcm(np.array([np.nan, np.inf], np.float32), "pcm_s16le") == struct.pack("<2h", 0, 32767)


def test_f32le_bytes_are_ieee_little_endian():
    pcm = np.array([0.0, 1.0, -0.5, 0.1], np.float32)
    assert encode_pcm(pcm, AudioEncoding.PCM_F32LE) == struct.pack("<4f", *pcm.tolist())
    assert encode_pcm(pcm, "pcm_f32le")[4:8] == b"\x00\x00\x80\x3f"


def test_f32le_round_trip_is_exact():
    pcm = np.random.default_rng(0).uniform(-1.0, 1.0, 1000).astype(np.float32)
    pcm[:2] = (1.0, -1.0)
    np.testing.assert_array_equal(decode_pcm(encode_pcm(pcm, "pcm_f32le"), "pcm_f32le"), pcm)


def test_f32le_clips_to_the_nominal_range_like_the_integer_encodings():
    pcm = np.array([1.0000001, 1.17, -1.05, -3.0, 0.25], np.float32)
    assert struct.unpack("<5f", encode_pcm(pcm, "pcm_f32le")) == (1.0, 1.0, -1.0, -1.0, 0.25)


@pytest.mark.parametrize(
    "s16, code",
    [
        (0, 0xFF), (-1, 0x7E), (-4, 0x7E), (-9, 0x7D), (32767, 0x80), (-32768, 0x00),
        (1000, 0xCE), (-1000, 0x4E), (100, 0xF2),
    ],
)
def test_mulaw_known_code_points(s16, code):
    # 0 -> 0xFF and full scale -> 0x80/0x00 by the G.711 tables (all bits inverted).
    assert linear_to_mulaw(np.array([s16], np.int16))[0] == code


@pytest.mark.parametrize(
    "s16, code",
    [(0, 0xD5), (-1, 0x55), (32767, 0xAA), (-32768, 0x2A), (1000, 0xFA), (-1000, 0x7A), (100, 0xD3)],
)
def test_alaw_known_code_points(s16, code):
    # 0 -> 0xD5 and full scale -> 0xAA/0x2A by the G.711 tables (even bits inverted).
    assert linear_to_alaw(np.array([s16], np.int16))[0] == code


def test_g711_decoder_known_values():
    assert mulaw_to_linear(np.array([0xFF, 0x7F, 0x80, 0x00], np.uint8)).tolist() == [0, 0, 32124, -32124]
    assert alaw_to_linear(np.array([0xD5, 0x55, 0xAA, 0x2A], np.uint8)).tolist() == [8, -8, 32256, -32256]


@pytest.mark.skipif(audioop is None, reason="audioop (reference G.711) not available")
def test_mulaw_matches_audioop_for_every_int16_and_code():
    data = ALL_S16.astype("<i2").tobytes()
    ref = np.frombuffer(audioop.lin2ulaw(data, 2), np.uint8)
    np.testing.assert_array_equal(linear_to_mulaw(ALL_S16), ref)
    ref_lin = np.frombuffer(audioop.ulaw2lin(ALL_CODES.tobytes(), 2), "<i2")
    np.testing.assert_array_equal(mulaw_to_linear(ALL_CODES), ref_lin)


@pytest.mark.skipif(audioop is None, reason="audioop (reference G.711) not available")
def test_alaw_matches_audioop_for_every_int16_and_code():
    data = ALL_S16.astype("<i2").tobytes()
    ref = np.frombuffer(audioop.lin2alaw(data, 2), np.uint8)
    np.testing.assert_array_equal(linear_to_alaw(ALL_S16), ref)
    ref_lin = np.frombuffer(audioop.alaw2lin(ALL_CODES.tobytes(), 2), "<i2")
    np.testing.assert_array_equal(alaw_to_linear(ALL_CODES), ref_lin)


@pytest.mark.parametrize("encoding", [AudioEncoding.PCM_MULAW, AudioEncoding.PCM_ALAW])
def test_g711_codes_are_fixed_points_of_decode_encode(encoding):
    # Every code decodes to a value inside its own interval: decode -> encode is the identity.
    to_lin, to_code = (
        (mulaw_to_linear, linear_to_mulaw)
        if encoding is AudioEncoding.PCM_MULAW
        else (alaw_to_linear, linear_to_alaw)
    )
    codes = ALL_CODES
    if encoding is AudioEncoding.PCM_MULAW:
        codes = codes[codes != 0x7F]  # "negative zero" decodes to 0, which encodes as 0xFF
    np.testing.assert_array_equal(to_code(to_lin(codes)), codes)


@pytest.mark.parametrize("encoding", ["pcm_mulaw", "pcm_alaw"])
def test_g711_round_trip_error_is_within_half_a_step(encoding):
    # G.711 steps grow with amplitude (4-bit mantissa per chord): the error is at most half a
    # step, i.e. about |x|/32 (|x|/30 allows for the bias at chord edges), plus 2**-10 near zero.
    x = np.linspace(-0.999, 0.999, 20001, dtype=np.float32)
    y = decode_pcm(encode_pcm(x, encoding), encoding)
    err = np.abs(y - x)
    assert np.all(err <= np.abs(x) / 30 + 2.0**-10)
    assert np.sign(y[np.abs(x) > 0.01]).tolist() == np.sign(x[np.abs(x) > 0.01]).tolist()


def test_decode_rejects_partial_samples():
    with pytest.raises(ValueError, match="multiple of 4 bytes, got 6"):
        decode_pcm(b"\x00" * 6, "pcm_f32le")


def test_encode_rejects_non_mono():
    with pytest.raises(ValueError, match=r"shape \[T\], got shape \(2, 3\)"):
        encode_pcm(np.zeros((2, 3), np.float32), "pcm_s16le")


def test_empty_input_gives_empty_bytes():
    for enc in AudioEncoding:
        assert encode_pcm(np.zeros(0, np.float32), enc) == b""
        assert decode_pcm(b"", enc).shape == (0,)
