"""POST /tts/bytes on a live server: every container/encoding/rate byte-exactly, G.711 round trips,
streamed resampling against each segment resampled whole, request fields, every 4xx, and client
disconnects stopping the engine."""

from __future__ import annotations

import io
import time

import httpx
import numpy as np
import pytest
import soundfile
import soxr

from tests.api.routes.audio_checks import (
    RATES,
    SAMPLE_WIDTH,
    SAMPLES_PER_SEGMENT,
    WAV_FORMAT_TAG,
    decode,
    expected_bytes,
    expected_samples,
    g711_decode,
    g711_encode,
    parse_mp3,
    parse_wav,
    spectral_centroid_hz,
    stretched_samples,
)
from tests.api.routes.ws_helpers import engine_idle

ONE = "Hello there."  # one segment
TWO = "Hello there. How are you today?"  # two segments


def body(voice: str, transcript: str = ONE, container: str = "raw", encoding: str = "pcm_s16le",
         rate: int = 22050, **extra) -> dict:
    fmt = {"container": container, "encoding": encoding, "sample_rate": rate}
    return {"model_id": "sonic-3", "transcript": transcript, "voice": voice, "output_format": fmt, **extra}


def post(server, payload, **kw) -> httpx.Response:
    return httpx.post(server.url + "/tts/bytes", json=payload, timeout=60, **kw)


def ok(server, payload) -> bytes:
    r = post(server, payload)
    assert r.status_code == 200, r.text
    return r.content


# --- formats, byte-exactly ------------------------------------------------------------------------


@pytest.mark.parametrize("encoding,rate", [
    *[("pcm_s16le", r) for r in RATES],
    ("pcm_f32le", 44100), ("pcm_mulaw", 8000), ("pcm_alaw", 16000), ("pcm_f32le", 24000),
])
def test_raw_length_is_exact_for_encoding_and_rate(gateway, default_voice_id, encoding, rate):
    r = post(gateway, body(default_voice_id, encoding=encoding, rate=rate))
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["x-request-id"]
    assert len(r.content) == expected_bytes(1, encoding, rate)


def test_two_sentences_are_two_segments_in_one_stream(gateway, default_voice_id):
    data = ok(gateway, body(default_voice_id, TWO, encoding="pcm_f32le", rate=48000))
    assert len(data) == expected_bytes(2, "pcm_f32le", 48000)
    pcm = decode(data, "pcm_f32le")
    assert np.isfinite(pcm).all() and np.abs(pcm).max() <= 1.0 and np.abs(pcm).max() > 0.01


@pytest.mark.parametrize("encoding", ["pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw"])
def test_wav_header_and_data_match_the_raw_stream(gateway, default_voice_id, encoding):
    rate = 16000
    wav = post(gateway, body(default_voice_id, container="wav", encoding=encoding, rate=rate, seed=11))
    assert wav.status_code == 200 and wav.headers["content-type"] == "audio/wav"
    info = parse_wav(wav.content)
    width = SAMPLE_WIDTH[encoding]
    assert (info.format_tag, info.channels, info.sample_rate_hz) == (WAV_FORMAT_TAG[encoding], 1, rate)
    assert (info.bits, info.block_align, info.byte_rate) == (8 * width, width, rate * width)
    # streamed: sizes unknown up front, the 0xFFFFFFFF convention; the data runs to the end
    assert info.riff_size == info.data_size == 0xFFFFFFFF
    assert len(info.data) == expected_bytes(1, encoding, rate)
    raw = ok(gateway, body(default_voice_id, encoding=encoding, rate=rate, seed=11))
    assert info.data == raw  # same seed: the container only wraps the same samples
    if encoding in ("pcm_s16le", "pcm_f32le"):  # libsndfile reads the streaming header too
        samples, sr = soundfile.read(io.BytesIO(wav.content), dtype="float32")
        assert sr == rate and len(samples) == expected_samples(1, rate)
        np.testing.assert_allclose(samples, decode(raw, encoding), atol=1e-6)


@pytest.mark.parametrize("rate,bit_rate,kbps", [(44100, 128000, 128), (24000, 64000, 64), (8000, 32000, 32)])
def test_mp3_frames_tile_the_body_at_the_requested_rates(gateway, default_voice_id, rate, bit_rate, kbps):
    payload = body(default_voice_id, container="mp3", rate=rate)
    payload["output_format"] = {"container": "mp3", "sample_rate": rate, "bit_rate": bit_rate}
    r = post(gateway, payload)
    assert r.status_code == 200 and r.headers["content-type"] == "audio/mpeg"
    frames = parse_mp3(r.content)
    assert {(f.sample_rate_hz, f.bit_rate_kbps, f.mono) for f in frames} == {(rate, kbps, True)}
    decoded_samples = sum(f.samples for f in frames)
    want = expected_samples(1, rate)
    # every sample is there, plus LAME's encoder delay and padding to whole frames (< 3 frames)
    assert want <= decoded_samples < want + 3 * frames[0].samples


# --- sample-level checks ---------------------------------------------------------------------------


def test_g711_reference_matches_the_stdlib():
    audioop = pytest.importorskip("audioop")  # removed in Python 3.13; the reference stands alone there
    lin, codes = np.arange(-32768, 32768, dtype="<i2").tobytes(), bytes(range(256))
    assert g711_encode(lin, "pcm_mulaw") == audioop.lin2ulaw(lin, 2)
    assert g711_encode(lin, "pcm_alaw") == audioop.lin2alaw(lin, 2)
    assert g711_decode(codes, "pcm_mulaw") == audioop.ulaw2lin(codes, 2)
    assert g711_decode(codes, "pcm_alaw") == audioop.alaw2lin(codes, 2)


@pytest.mark.parametrize("encoding", ["pcm_mulaw", "pcm_alaw"])
def test_g711_round_trip(gateway, default_voice_id, encoding):
    s16 = ok(gateway, body(default_voice_id, encoding="pcm_s16le", rate=8000, seed=5))
    law = ok(gateway, body(default_voice_id, encoding=encoding, rate=8000, seed=5))
    assert len(law) * 2 == len(s16) == expected_bytes(1, "pcm_s16le", 8000)
    # the G.711 stream is the s16 stream encoded by the reference encoder...
    assert law == g711_encode(s16, encoding)
    # ...decodes back within G.711's quantisation step, and re-encodes to itself
    lin = g711_decode(law, encoding)
    assert law == g711_encode(lin, encoding)
    a = np.frombuffer(s16, "<i2").astype(np.int32)
    b = np.frombuffer(lin, "<i2").astype(np.int32)
    step = np.maximum(16, np.abs(a) // 8)  # 4 mantissa bits per segment: error <= 1/16 of |x| (+ small floor)
    assert (np.abs(a - b) <= step).all()
    assert np.abs(a).max() > 1000  # real audio, not silence


def test_resampled_stream_equals_each_segment_resampled_whole(gateway, default_voice_id):
    """Each segment (one engine request) is resampled on its own, in one piece with its tail
    released at the segment's end: what the WebSocket must do (a segment's audio all goes out
    before its flush_done) and so what every route does, for the same samples on every route.
    The streamed audio equals each segment resampled whole, one after the other."""
    native = decode(ok(gateway, body(default_voice_id, TWO, encoding="pcm_f32le", rate=22050, seed=3)), "pcm_f32le")
    assert len(native) == expected_samples(2, 22050)
    segments = (native[:SAMPLES_PER_SEGMENT], native[SAMPLES_PER_SEGMENT:])
    for rate in (8000, 16000, 24000, 44100, 48000):
        streamed = decode(ok(gateway, body(default_voice_id, TWO, encoding="pcm_f32le", rate=rate, seed=3)), "pcm_f32le")
        whole = np.concatenate([soxr.resample(seg, 22050, rate, quality="HQ") for seg in segments])
        assert len(streamed) == len(whole) == expected_samples(2, rate)
        assert np.abs(streamed - whole).max() < 1e-4, rate


def test_same_seed_same_audio_and_encodings_agree(gateway, default_voice_id):
    f32 = decode(ok(gateway, body(default_voice_id, encoding="pcm_f32le", seed=9)), "pcm_f32le")
    again = decode(ok(gateway, body(default_voice_id, encoding="pcm_f32le", seed=9)), "pcm_f32le")
    other = decode(ok(gateway, body(default_voice_id, encoding="pcm_f32le", seed=10)), "pcm_f32le")
    s16 = decode(ok(gateway, body(default_voice_id, encoding="pcm_s16le", seed=9)), "pcm_s16le")
    np.testing.assert_array_equal(f32, again)
    assert np.abs(f32 - other).max() > 1e-3  # the seed is honoured
    assert np.abs(f32 - s16).max() <= 1 / 32768 + 1e-7


@pytest.mark.parametrize("volume", [0.5, 2.0])
def test_generation_config_volume_is_applied(gateway, default_voice_id, volume):
    plain = decode(ok(gateway, body(default_voice_id, encoding="pcm_f32le", seed=4)), "pcm_f32le")
    loud = decode(ok(gateway, body(default_voice_id, encoding="pcm_f32le", seed=4,
                                   generation_config={"volume": volume})), "pcm_f32le")
    np.testing.assert_allclose(loud, np.clip(plain * volume, -1.0, 1.0), atol=1e-6)


# --- request fields ----------------------------------------------------------------------------------


def test_gepard_knobs_are_accepted_and_max_frames_is_honoured(gateway, default_voice_id):
    data = ok(gateway, body(default_voice_id, TWO, encoding="pcm_s16le", rate=22050, temperature=0.7,
                            cfg_scale=1.5, seed=123, top_k=50, max_frames=5))
    assert len(data) == 2 * 2 * 5 * 1024  # two segments of 5 frames each


def test_every_cartesia_field_is_accepted_and_unknown_ones_ignored(gateway, default_voice_id):
    payload = body(default_voice_id) | {
        "voice": {"mode": "id", "id": default_voice_id, "__experimental_controls": {"speed": "fast", "emotion": []}},
        "language": None, "generation_config": {"speed": 1.0, "volume": 1.0, "emotion": "calm"},
        "speed": "normal", "pronunciation_dict_id": None, "save": False, "duration": 3,
        "add_timestamps": True, "use_normalized_timestamps": False, "normalization": "auto",
        "context_id": "ignored-here", "some_future_field": {"nested": [1, 2]},
    }
    headers = {"Cartesia-Version": "2024-06-10", "X-Stainless-Lang": "python", "User-Agent": "x/1"}
    r = post(gateway, payload, headers=headers)
    assert r.status_code == 200, r.text
    assert len(r.content) == expected_bytes(1, "pcm_s16le", 22050)


def test_save_is_accepted_and_ignored(gateway, default_voice_id):
    """No files API here to fetch a saved file from, so no Cartesia-File-ID header (README)."""
    r = post(gateway, body(default_voice_id) | {"save": True})
    assert r.status_code == 200, r.text
    assert "cartesia-file-id" not in r.headers
    assert len(r.content) == expected_bytes(1, "pcm_s16le", 22050)


@pytest.mark.parametrize("voice_shape", ["string", "id", "mode-id"])
def test_voice_shapes(gateway, default_voice_id, voice_shape):
    voice = {"string": default_voice_id, "id": {"id": default_voice_id},
             "mode-id": {"mode": "id", "id": default_voice_id}}[voice_shape]
    assert len(ok(gateway, body(voice, encoding="pcm_alaw", rate=8000))) == expected_bytes(1, "pcm_alaw", 8000)


def test_locale_and_language_codes(gateway, default_voice_id):
    for extra in ({"language": "en"}, {"locale": "en-GB"}, {"language": "es"}, {"normalization": "off"}):
        assert len(ok(gateway, body(default_voice_id, **extra))) == expected_bytes(1, "pcm_s16le", 22050)


# --- errors ---------------------------------------------------------------------------------------------


def assert_error(r: httpx.Response, status: int, error_code: str, *needles: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()
    assert set(err) >= {"error_code", "title", "message", "request_id"}
    assert err["error_code"] == error_code, err
    assert err["request_id"] == r.headers["x-request-id"]
    for needle in needles:
        assert needle in err["message"], (needle, err["message"])
    assert r.headers.get("x-should-retry") == "false"  # a retry cannot help
    return err


def raw_post(server, content: bytes, path: str = "/tts/bytes") -> httpx.Response:
    return httpx.post(server.url + path, content=content, headers={"content-type": "application/json"}, timeout=30)


@pytest.mark.parametrize("path", ["/tts/bytes", "/tts/sse"])
def test_malformed_json_and_non_objects(gateway, path):
    assert_error(raw_post(gateway, b'{"model_id": "sonic-3",', path), 400, "invalid_json", "not valid JSON")
    assert_error(raw_post(gateway, b"[1, 2]", path), 400, "invalid_json", "JSON object")
    assert_error(raw_post(gateway, b"\xff\xfe", path), 400, "invalid_json")
    assert_error(raw_post(gateway, b"", path), 400, "invalid_json")


@pytest.mark.parametrize("field", ["model_id", "transcript", "voice", "output_format"])
def test_missing_field_is_named(gateway, default_voice_id, field):
    payload = body(default_voice_id)
    del payload[field]
    assert_error(post(gateway, payload), 400, "missing_field", field)


def test_unknown_voice_is_404_naming_the_id(gateway):
    vid = "00000000-dead-beef-0000-000000000000"
    assert_error(post(gateway, body(vid)), 404, "voice_not_found", vid)
    assert_error(post(gateway, body({"mode": "id", "id": vid})), 404, "voice_not_found", vid)


def test_unknown_model_id(gateway, default_voice_id):
    err = assert_error(post(gateway, body(default_voice_id) | {"model_id": "eleven_turbo_v2"}), 400,
                       "model_not_found", "eleven_turbo_v2")
    assert err["title"] == "Invalid model"


@pytest.mark.parametrize("fmt,needle", [
    ({"container": "ogg", "encoding": "pcm_s16le", "sample_rate": 16000}, "container"),
    ({"container": "raw", "encoding": "pcm_s24le", "sample_rate": 16000}, "encoding"),
    ({"container": "raw", "encoding": "pcm_s16le", "sample_rate": 11025}, "sample_rate"),
    ({"container": "wav", "encoding": "pcm_s16le", "sample_rate": 96000}, "sample_rate"),
    ({"container": "mp3", "sample_rate": 44100, "bit_rate": 100000}, "bit_rate"),
    ({"container": "raw", "encoding": "pcm_s16le"}, "sample_rate: field required"),
])
def test_unsupported_format_or_rate(gateway, default_voice_id, fmt, needle):
    payload = body(default_voice_id) | {"output_format": fmt}
    err = assert_error(post(gateway, payload), 400, "invalid_output_format", needle)
    assert "output_format." in err["message"]


def test_transcript_over_the_maximum(gateway, default_voice_id):
    limit = gateway.runtime.settings.max_transcript_chars
    assert_error(post(gateway, body(default_voice_id, "a" * (limit + 1))), 400, "transcript_too_long",
                 str(limit), str(limit + 1))


@pytest.mark.parametrize("transcript", ["", "   \n\t", "\u200b", "\ufeff \u200d\x00 \x1b"])
def test_empty_transcript(gateway, default_voice_id, transcript):
    # zero-width, format and control characters are as blank as whitespace
    assert_error(post(gateway, body(default_voice_id, transcript)), 400, "empty_transcript", "transcript")


@pytest.mark.parametrize("transcript", ["Hello there. \U0001F60A", "Hello there. :)", '"Hello there." "'])
def test_a_sentence_of_only_punctuation_or_emoji_gets_no_engine_request(gateway, default_voice_id, transcript):
    # given no letter to read the model voices arbitrary audio for seconds: the emoji after the
    # sentence is a segment of its own, and it is left out (one segment's worth of audio, not two)
    data = ok(gateway, body(default_voice_id, transcript))
    assert len(data) == expected_bytes(1, "pcm_s16le", 22050)


@pytest.mark.parametrize("transcript", ["...", ":)", "\U0001F60A\U0001F44D", '"?!"'])
def test_a_transcript_with_nothing_to_speak_is_a_precise_400(gateway, default_voice_id, transcript):
    assert_error(post(gateway, body(default_voice_id, transcript)), 400, "empty_transcript", "nothing to speak")


@pytest.mark.parametrize("fields, speed", [
    ({"generation_config": {"speed": 1.5}}, 1.5),
    ({"generation_config": {"speed": 0.6}}, 0.6),
    ({"speed": "fast"}, 1.25),  # the deprecated field, by LEGACY_SPEED_FACTORS
    ({"speed": "slow"}, 0.8),
    ({"speed": "slow", "generation_config": {"speed": 1.5}}, 1.5),  # generation_config wins
])
def test_speed_stretches_the_speech_at_its_pitch(gateway, default_voice_id, fields, speed):
    """Each segment's speech is round(N / speed) samples, time-stretched (not cut short), at the
    pitch of the same greedy request spoken at speed 1.0 (played faster, its spectrum would scale)."""
    plain = decode(ok(gateway, body(default_voice_id, TWO, encoding="pcm_f32le", temperature=0.0)), "pcm_f32le")
    fast = decode(ok(gateway, body(default_voice_id, TWO, encoding="pcm_f32le", temperature=0.0, **fields)),
                  "pcm_f32le")
    assert plain.size == expected_samples(2, 22050)
    assert fast.size == stretched_samples(2, speed) != plain.size
    cut = min(fast.size, plain.size)
    assert not np.allclose(fast[:cut], plain[:cut], atol=1e-3)
    assert spectral_centroid_hz(fast) == pytest.approx(spectral_centroid_hz(plain), rel=0.05)
    assert np.sqrt(np.mean(fast ** 2)) == pytest.approx(np.sqrt(np.mean(plain ** 2)), rel=0.2)


def test_speed_one_and_normal_are_the_voices_own_rate(gateway, default_voice_id):
    plain = ok(gateway, body(default_voice_id, encoding="pcm_f32le", temperature=0.0))
    assert ok(gateway, body(default_voice_id, encoding="pcm_f32le", temperature=0.0,
                            generation_config={"speed": 1.0})) == plain
    assert ok(gateway, body(default_voice_id, encoding="pcm_f32le", temperature=0.0, speed="normal")) == plain


@pytest.mark.parametrize("encoding, rate", [("pcm_s16le", 16000), ("pcm_mulaw", 8000)])
def test_speed_at_another_rate_is_exact(gateway, default_voice_id, encoding, rate):
    data = ok(gateway, body(default_voice_id, TWO, encoding=encoding, rate=rate, generation_config={"speed": 1.25}))
    assert len(data) == stretched_samples(2, 1.25, rate) * SAMPLE_WIDTH[encoding]


@pytest.mark.parametrize("speed", [1.6, 0.59, 3])
def test_speed_out_of_range_is_a_precise_400(gateway, default_voice_id, speed):
    assert_error(post(gateway, body(default_voice_id, generation_config={"speed": speed})), 400,
                 "invalid_request", f"generation_config.speed: must be between 0.6 and 1.5, got {speed}")
    assert_error(post(gateway, body(default_voice_id, speed="faster")), 400, "invalid_request", "speed")


def test_wrong_types_and_ranges_are_named(gateway, default_voice_id):
    assert_error(post(gateway, body(default_voice_id) | {"transcript": 5}), 400, "invalid_request", "transcript")
    assert_error(post(gateway, body(default_voice_id, generation_config={"volume": 9})), 400,
                 "invalid_request", "generation_config.volume")
    assert_error(post(gateway, body(default_voice_id, temperature=-1)), 400, "invalid_request", "temperature")
    assert_error(post(gateway, body({"mode": "embedding", "embedding": [0.0] * 192})), 400,
                 "voice_embedding_not_supported", "voice")


def test_body_over_one_mib_is_413(gateway, default_voice_id):
    payload = body(default_voice_id) | {"padding": "x" * (1 << 20)}
    assert_error(post(gateway, payload), 413, "request_too_large")


# --- disconnects ------------------------------------------------------------------------------------------


def test_client_disconnect_stops_engine_work(gateway, default_voice_id):
    text = " ".join(f"Sentence number {w}." for w in "one two three four five six seven eight".split())
    assert engine_idle(gateway, hold_s=0.0)
    with httpx.Client(timeout=60) as client:
        with client.stream("POST", gateway.url + "/tts/bytes",
                           json=body(default_voice_id, text, encoding="pcm_f32le", rate=48000)) as r:
            assert r.status_code == 200
            got = 0
            for piece in r.iter_raw():
                got += len(piece)
                if got >= 4 * 48000:  # about a second of the eight segments' audio
                    break
    t0 = time.monotonic()
    # a full read takes eight segments; the server must drop the rest as soon as the socket closes
    assert engine_idle(gateway, timeout_s=3.0, hold_s=1.0), "engine still busy after the client left"
    assert time.monotonic() - t0 < 3.0
