"""api/protocol/requests.py: every field rule, voice shape and WebSocket message error, plus the
exact bodies and frames the real cartesia 4.2.0 SDK produces."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from api.audio.encoding import AudioEncoding
from api.audio.formats import Container, OutputFormat
from api.protocol.errors import (
    EmptyTranscriptError,
    InvalidFieldError,
    InvalidJsonError,
    MissingFieldError,
    ProtocolError,
    UnsupportedVoiceModeError,
)
from api.protocol.requests import (
    DEFAULT_MAX_BUFFER_DELAY_MS,
    MAX_VOICE_ID_CHARS,
    AccessTokenRequest,
    TtsRequest,
    TtsSseRequest,
    WsCancelRequest,
    WsGenerationRequest,
    parse_access_token_request,
    parse_tts_request,
    parse_ws_message,
)
from engine.requests import SamplingParams

RAW = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}
BODY = {"model_id": "sonic-3", "transcript": "Hello there.", "voice": "v-1", "output_format": RAW}
WS = {**BODY, "context_id": "ctx-1"}


def tts(**changes):
    body = {**BODY, **changes}
    return parse_tts_request(json.dumps({k: v for k, v in body.items() if v is not DROP}))


def ws(**changes):
    body = {**WS, **changes}
    return parse_ws_message(json.dumps({k: v for k, v in body.items() if v is not DROP}))


DROP = object()


def error_of(fn, *args, **kwargs) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        fn(*args, **kwargs)
    return info.value


# --- the happy path and leniency ------------------------------------------------------------------


def test_minimal_body_parses_with_defaults():
    req = tts()
    assert isinstance(req, TtsRequest) and not isinstance(req, TtsSseRequest)
    assert req.model_id == "sonic-3" and req.transcript == "Hello there." and req.voice_id == "v-1"
    assert req.output_format == OutputFormat(Container.RAW, AudioEncoding.PCM_S16LE, 24000)
    assert req.language is None and req.locale is None and req.normalization is None
    assert req.add_timestamps is False and req.add_phoneme_timestamps is False
    assert req.use_normalized_timestamps is False and req.save is False
    assert req.generation_config is None and req.speed_factor is None


@pytest.mark.parametrize("body", [json.dumps(BODY), json.dumps(BODY).encode(), BODY])
def test_accepts_str_bytes_and_mapping(body):
    assert parse_tts_request(body).voice_id == "v-1"


def test_unknown_fields_are_ignored_and_logged_once(caplog):
    caplog.set_level(logging.DEBUG, logger="api.protocol.requests")
    req = parse_tts_request(
        json.dumps({**BODY, "foo": 1, "voice": {"id": "v", "bar": 2}, "generation_config": {"speed": 1, "baz": 3}}),
        request_id="req-9",
    )
    assert req.ignored_fields() == ["foo", "voice.bar", "generation_config.baz"]
    lines = [r.getMessage() for r in caplog.records if "ignoring unknown fields" in r.getMessage()]
    assert lines == ["request req-9: ignoring unknown fields foo, generation_config.baz, voice.bar"]


def test_language_null_and_legacy_duration_accepted():
    req = tts(language=None, duration=3.5)
    assert req.language is None and req.effective_language is None


@pytest.mark.parametrize(
    "body, expected",
    [
        ({"output_format": {"container": "wav", "encoding": "pcm_f32le", "sample_rate": 44100}},
         OutputFormat(Container.WAV, AudioEncoding.PCM_F32LE, 44100)),
        ({"output_format": {"container": "mp3", "sample_rate": 48000, "bit_rate": 192000}},
         OutputFormat(Container.MP3, None, 48000, 192000)),
        ({"output_format": {"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000.0}},
         OutputFormat(Container.RAW, AudioEncoding.PCM_MULAW, 8000)),
    ],
)
def test_output_formats_for_bytes(body, expected):
    assert tts(**body).output_format == expected


# --- voice shapes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "voice",
    ["abc", {"id": "abc"}, {"mode": "id", "id": "abc"}, {"mode": "id", "id": "abc", "__experimental_controls": {"speed": "fast", "emotion": ["positivity"]}}],
)
def test_voice_shapes(voice):
    req = tts(voice=voice)
    assert req.voice.id == "abc" and req.voice.mode == "id"
    assert "voice.__experimental_controls" not in req.ignored_fields()


def test_voice_ids_up_to_the_bound_are_accepted():
    assert tts(voice="v" * MAX_VOICE_ID_CHARS).voice_id == "v" * MAX_VOICE_ID_CHARS
    uuid = "a0e99841-438c-4a64-b679-ae501e7d6091"  # ours are UUIDs (voices.models.new_voice_id), as Cartesia's are
    assert tts(voice={"mode": "id", "id": uuid}).voice_id == uuid


def test_a_long_voice_id_on_a_websocket_is_answered_on_its_context():
    err = error_of(ws, context_id="c-1", voice="v" * 300)
    assert isinstance(err, InvalidFieldError) and err.field == "voice.id" and err.context_id == "c-1"
    assert err.status_code == 400 and err.error_code == "invalid_request" and "got 300" in str(err)


def test_voice_embedding_is_rejected_precisely():
    err = error_of(tts, voice={"mode": "embedding", "embedding": [0.1] * 192})
    assert isinstance(err, UnsupportedVoiceModeError)
    assert err.error_code == "voice_embedding_not_supported" and err.field == "voice.mode"
    assert str(err).startswith("voice.mode: voice embeddings are not supported")


@pytest.mark.parametrize(
    "voice, cls, message",
    [
        ({"mode": "id"}, MissingFieldError, "voice.id: field required"),
        ({}, MissingFieldError, "voice.id: field required"),
        ({"id": ""}, InvalidFieldError, "voice.id: must not be empty"),
        ("  ", InvalidFieldError, "voice.id: must not be empty"),
        ({"id": 7}, InvalidFieldError, "voice.id: expected a string, got a number"),
        ("v" * 257, InvalidFieldError, "voice.id: must be at most 256 characters (voice ids are UUIDs), got 257"),
        ({"mode": "id", "id": "V\n" + "A" * 900_000}, InvalidFieldError, "voice.id: must be at most 256 characters"),
        ({"mode": "clone", "id": "a"}, InvalidFieldError, "voice.mode: 'clone' is not supported; expected 'id'"),
        (5, InvalidFieldError, "voice: expected a voice id string or an object"),
        ([], InvalidFieldError, "voice: expected a voice id string or an object"),
        (DROP, MissingFieldError, "voice: field required"),
        (None, MissingFieldError, "voice: field required, got null"),
    ],
)
def test_bad_voices(voice, cls, message):
    err = error_of(tts, voice=voice)
    assert isinstance(err, cls)
    assert str(err).startswith(message)


# --- field rules ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, field, message",
    [
        ({"model_id": DROP}, "model_id", "model_id: field required"),
        ({"model_id": ""}, "model_id", "model_id: must not be empty"),
        ({"model_id": 3}, "model_id", "model_id: expected a string, got a number"),
        ({"transcript": DROP}, "transcript", "transcript: field required"),
        ({"transcript": None}, "transcript", "transcript: field required, got null"),
        ({"transcript": ["a"]}, "transcript", "transcript: expected a string, got an array"),
        ({"output_format": DROP}, "output_format", "output_format: field required"),
        ({"output_format": "raw"}, "output_format", "output_format: expected an object"),
        ({"output_format": {"container": "raw", "encoding": "pcm_s16le"}}, "output_format.sample_rate",
         "output_format.sample_rate: field required"),
        ({"output_format": {"encoding": "pcm_s16le", "sample_rate": 8000}}, "output_format.container",
         "output_format.container: field required"),
        ({"output_format": {**RAW, "sample_rate": 11025}}, "output_format.sample_rate",
         "output_format.sample_rate: 11025 is not supported; expected one of: 8000, 16000, 22050, 24000, 44100, 48000"),
        ({"output_format": {**RAW, "encoding": "pcm_u8"}}, "output_format.encoding",
         "output_format.encoding: 'pcm_u8' is not supported; expected one of: pcm_f32le, pcm_s16le, pcm_mulaw, pcm_alaw"),
        ({"output_format": {"container": "raw", "sample_rate": 8000}}, "output_format.encoding",
         "output_format.encoding: field required for container 'raw'"),
        ({"output_format": {**RAW, "container": "flac"}}, "output_format.container",
         "output_format.container: 'flac' is not supported; expected one of: raw, wav, mp3, ogg"),
        ({"output_format": {**RAW, "container": "ogg"}}, "output_format.encoding",
         "output_format.encoding: 'pcm_s16le' for container 'ogg' is not supported; expected one of: opus"),
        ({"output_format": {"container": "raw", "encoding": "opus", "sample_rate": 48000}}, "output_format.container",
         "output_format.container: 'raw' opus packets are sent on /tts/sse and /tts/websocket only; on /tts/bytes ask "
         "for container 'ogg'"),
        ({"output_format": {"container": "mp3", "sample_rate": 8000, "bit_rate": 1000}}, "output_format.bit_rate",
         "output_format.bit_rate: 1000 is not supported"),
        ({"language": "english"}, "language", "language: 'english' is not a language code"),
        ({"language": 1}, "language", "language: expected a string, got a number"),
        ({"locale": "en GB"}, "locale", "locale: 'en GB' is not a language code"),
        ({"language": "fr", "locale": "en-GB"}, "locale", "locale: 'en-GB' does not match language 'fr'"),
        ({"normalization": "sometimes"}, "normalization",
         "normalization: 'sometimes' is not supported; expected 'auto', 'off' or a locale code"),
        ({"generation_config": {"speed": 1.6}}, "generation_config.speed",
         "generation_config.speed: must be between 0.6 and 1.5, got 1.6"),
        ({"generation_config": {"speed": 0.59}}, "generation_config.speed", "must be between 0.6 and 1.5, got 0.59"),
        ({"generation_config": {"volume": 2.5}}, "generation_config.volume",
         "generation_config.volume: must be between 0.5 and 2, got 2.5"),
        ({"generation_config": {"speed": "fast"}}, "generation_config.speed",
         "generation_config.speed: expected a number, got a string"),
        ({"generation_config": {"emotion": ["happy"]}}, "generation_config.emotion",
         "generation_config.emotion: expected a string, got an array"),
        ({"generation_config": 3}, "generation_config", "generation_config: expected an object, got a number"),
        ({"speed": "medium"}, "speed", "speed: 'medium' is not supported; expected 'slow', 'normal' or 'fast'"),
        ({"add_timestamps": "yes"}, "add_timestamps", "add_timestamps: expected true or false, got a string"),
        ({"save": 1}, "save", "save: expected true or false, got a number"),
        ({"pronunciation_dict_id": 5}, "pronunciation_dict_id", "pronunciation_dict_id: expected a string"),
        ({"temperature": -0.1}, "temperature", "temperature: must be in [0, 10], got -0.1"),
        ({"temperature": "hot"}, "temperature", "temperature: expected a number, got a string"),
        ({"top_k": -1}, "top_k", "top_k: must be in [0, 1024], got -1"),
        ({"top_k": 2.5}, "top_k", "top_k: expected an integer, got 2.5"),
        ({"top_k": True}, "top_k", "top_k: expected an integer, got a boolean"),
        ({"seed": -5}, "seed", "seed: must be in [0, 2**63 - 1], got -5"),
        ({"seed": "42"}, "seed", "seed: expected an integer, got a string"),
        ({"max_frames": 0}, "max_frames", "max_frames: must be in [1, 2000], got 0"),
        ({"cfg_scale": 0}, "cfg_scale", "cfg_scale: must be in (0, 20], got 0.0"),
        ({"cfg_frames": -1}, "cfg_frames", "cfg_frames: must be in [0, 2000], got -1"),
        ({"stop_threshold": 1.5}, "stop_threshold", "stop_threshold: must be in (0, 1), got 1.5"),
        ({"repetition_penalty": 0.0}, "repetition_penalty", "repetition_penalty: must be in (0, 10], got 0.0"),
    ],
)
def test_field_rules(changes, field, message):
    err = error_of(tts, **changes)
    assert err.field == field
    assert message in str(err)
    assert err.context_id is None


def test_output_format_errors_carry_their_own_code():
    assert error_of(tts, output_format={**RAW, "sample_rate": 1}).error_code == "invalid_output_format"
    assert error_of(tts, output_format=DROP).error_code == "missing_field"
    assert error_of(tts, temperature=-1).error_code == "invalid_request"


def test_several_problems_make_one_message():
    err = error_of(tts, model_id=DROP, transcript=DROP, temperature=-1)
    assert str(err) == "model_id: field required; transcript: field required; temperature: must be in [0, 10], got -1.0"
    assert err.field == "model_id" and isinstance(err, MissingFieldError)


@pytest.mark.parametrize("transcript", ["", "   ", "\n\t"])
def test_bytes_and_sse_need_text(transcript):
    err = error_of(tts, transcript=transcript)
    assert isinstance(err, EmptyTranscriptError) and err.error_code == "empty_transcript"
    assert str(err) == "transcript: must contain at least one visible, non-whitespace character"


def test_ranges_accept_their_bounds():
    req = tts(generation_config={"speed": 0.6, "volume": 2.0, "emotion": "calm"}, temperature=0, top_k=0,
              cfg_frames=0, max_frames=1, seed=0)
    assert req.generation_config.speed == 0.6 and req.generation_config.volume == 2.0
    assert req.generation_config.emotion == "calm"


@pytest.mark.parametrize("speed, factor", [("slow", 0.8), ("normal", 1.0), ("fast", 1.25)])
def test_legacy_speed_maps_to_a_factor(speed, factor):
    assert tts(speed=speed).speed_factor == factor
    assert tts(speed=speed, generation_config={"speed": 1.1}).speed_factor == 1.1


def test_locale_and_language():
    assert tts(locale="en-GB").effective_language == "en-GB"
    assert tts(language="en", locale="en-GB").effective_language == "en"
    assert tts(language="pt", locale="pt_BR").locale == "pt_BR"
    assert tts(normalization="off").normalization == "off"
    assert tts(normalization="en-US").normalization == "en-US"


@pytest.mark.parametrize("container", ["wav", "mp3"])
def test_sse_is_raw_only(container):
    body = {**BODY, "output_format": {"container": container, "encoding": "pcm_s16le", "sample_rate": 24000}}
    assert parse_tts_request(body).output_format.container.value == container
    err = error_of(parse_tts_request, body, sse=True)
    assert err.field == "output_format.container" and err.error_code == "invalid_output_format"
    assert f"'{container}' is not supported on /tts/sse; expected 'raw'" in str(err)


def test_opus_is_an_extension_on_its_routes():
    ogg = {"container": "ogg", "encoding": "opus", "sample_rate": 48000}
    raw = {"container": "raw", "encoding": "opus", "sample_rate": 24000, "bit_rate": 32000}
    assert parse_tts_request({**BODY, "output_format": ogg}).output_format.container is Container.OGG
    assert parse_tts_request({**BODY, "output_format": raw}, sse=True).output_format.is_opus_packets
    assert ws(output_format=raw).output_format.bit_rate_bps == 32000
    err = error_of(parse_tts_request, {**BODY, "output_format": ogg}, sse=True)  # a file cannot be chunked
    assert "'ogg' is not supported on /tts/sse; expected 'raw'" in str(err)


def test_sse_echoes_context_id_and_takes_timestamp_flags():
    req = parse_tts_request({**BODY, "context_id": "c-7", "add_timestamps": True, "add_phoneme_timestamps": True,
                             "use_normalized_timestamps": True}, sse=True)
    assert isinstance(req, TtsSseRequest)
    assert req.context_id == "c-7" and req.add_timestamps and req.add_phoneme_timestamps and req.use_normalized_timestamps


@pytest.mark.parametrize(
    "body, message",
    [
        ("{nope", "request body is not valid JSON: Expecting property name"),
        ("", "request body is not valid JSON"),
        (b"\xff\x00\x01", "request body is not valid JSON"),
        ('{"transcript": NaN}', "request body is not valid JSON: NaN is not valid JSON"),
        ("[1, 2]", "request body must be a JSON object, got an array"),
        ('"text"', "request body must be a JSON object, got a string"),
        ("null", "request body must be a JSON object, got null"),
    ],
)
def test_bad_json_bodies(body, message):
    err = error_of(parse_tts_request, body)
    assert isinstance(err, InvalidJsonError) and err.error_code == "invalid_json"
    assert str(err).startswith(message)


def test_models_are_frozen():
    req = tts()
    with pytest.raises(Exception):
        req.transcript = "x"  # type: ignore[misc]


# --- sampling extras ------------------------------------------------------------------------------


def test_to_sampling_params_lays_extras_over_defaults():
    defaults = SamplingParams(temperature=0.4, top_k=0, stop_threshold=0.5, cfg_scale=1.0)
    assert tts().to_sampling_params(defaults) is defaults
    params = tts(temperature=0.9, top_k=20, seed=7, max_frames=300, cfg_scale=2.5, cfg_frames=10,
                 stop_threshold=0.8, repetition_penalty=1.2).to_sampling_params(defaults)
    assert params == SamplingParams(temperature=0.9, top_k=20, seed=7, max_frames=300, cfg_scale=2.5, cfg_frames=10,
                                    stop_threshold=0.8, repetition_penalty=1.2)
    assert params.repetition_window == defaults.repetition_window
    partial = tts(seed=1).to_sampling_params(SamplingParams(temperature=0.3))
    assert partial.temperature == 0.3 and partial.seed == 1


# --- WebSocket messages ---------------------------------------------------------------------------


def test_ws_generation_defaults():
    msg = ws()
    assert isinstance(msg, WsGenerationRequest)
    assert msg.context_id == "ctx-1" and msg.continue_ is False and msg.flush is False
    assert msg.max_buffer_delay_ms == DEFAULT_MAX_BUFFER_DELAY_MS == 3000 and msg.has_text


def test_ws_continue_alias_and_python_construction():
    msg = ws(**{"continue": True, "flush": True, "max_buffer_delay_ms": 0})
    assert msg.continue_ is True and msg.flush is True and msg.max_buffer_delay_ms == 0
    built = WsGenerationRequest(context_id="c", model_id="m", transcript="", voice="v", output_format=RAW, continue_=True)
    assert built.continue_ is True and built.output_format.sample_rate_hz == 24000


@pytest.mark.parametrize("transcript", ["", " ", "\n"])
def test_ws_accepts_empty_and_whitespace_transcripts(transcript):
    msg = ws(transcript=transcript, **{"continue": False})
    assert msg.transcript == transcript and not msg.has_text


def test_ws_cancel():
    msg = parse_ws_message('{"context_id": "ctx-1", "cancel": true}')
    assert msg == WsCancelRequest(context_id="ctx-1", cancel=True)
    # cancel wins over everything else in the message
    assert isinstance(parse_ws_message(json.dumps({**WS, "cancel": True})), WsCancelRequest)
    # cancel: false is a plain generation request
    assert isinstance(parse_ws_message(json.dumps({**WS, "cancel": False})), WsGenerationRequest)


@pytest.mark.parametrize(
    "raw, cls, message, context_id",
    [
        ("{not json", InvalidJsonError, "message is not valid JSON", ""),  # UNROUTABLE_CONTEXT_ID
        ('{"context_id": "c-9", "transcript": oops}', InvalidJsonError, "message is not valid JSON", "c-9"),
        ('{"context_id": "c\\"q", "transcript": }', InvalidJsonError, "message is not valid JSON", 'c"q'),
        ('["context_id"]', InvalidJsonError, "message must be a JSON object, got an array", ""),  # UNROUTABLE_CONTEXT_ID
        ("42", InvalidJsonError, "message must be a JSON object, got a number", ""),  # UNROUTABLE_CONTEXT_ID
        (json.dumps({k: v for k, v in WS.items() if k != "context_id"}), MissingFieldError, "context_id: field required", ""),  # UNROUTABLE_CONTEXT_ID
        (json.dumps({**WS, "context_id": ""}), InvalidFieldError, "context_id: must not be empty", ""),  # UNROUTABLE_CONTEXT_ID
        (json.dumps({**WS, "context_id": 12}), InvalidFieldError, "context_id: expected a string, got a number", ""),  # UNROUTABLE_CONTEXT_ID
        (json.dumps({**WS, "context_id": "x" * 513}), InvalidFieldError, "context_id: must be at most 512 characters", ""),  # never echoed
        (json.dumps({**WS, "continue": "yes"}), InvalidFieldError, "continue: expected true or false, got a string", "ctx-1"),
        (json.dumps({**WS, "flush": 1}), InvalidFieldError, "flush: expected true or false, got a number", "ctx-1"),
        (json.dumps({**WS, "max_buffer_delay_ms": 5001}), InvalidFieldError,
         "max_buffer_delay_ms: must be between 0 and 5000, got 5001", "ctx-1"),
        (json.dumps({**WS, "max_buffer_delay_ms": -1}), InvalidFieldError, "max_buffer_delay_ms: must be between 0 and 5000", "ctx-1"),
        (json.dumps({**WS, "max_buffer_delay_ms": "100"}), InvalidFieldError,
         "max_buffer_delay_ms: expected an integer, got a string", "ctx-1"),
        (json.dumps({**WS, "transcript": None}), MissingFieldError, "transcript: field required, got null", "ctx-1"),
        (json.dumps({k: v for k, v in WS.items() if k != "model_id"}), MissingFieldError, "model_id: field required", "ctx-1"),
        (json.dumps({**WS, "voice": {"mode": "embedding", "embedding": [0.0]}}), UnsupportedVoiceModeError,
         "voice.mode: voice embeddings are not supported", "ctx-1"),
        (json.dumps({**WS, "output_format": {**RAW, "container": "wav"}}), InvalidFieldError,
         "output_format.container: 'wav' is not supported on /tts/websocket; expected 'raw'", "ctx-1"),
        (json.dumps({**WS, "output_format": {**RAW, "sample_rate": 96000}}), InvalidFieldError,
         "output_format.sample_rate: 96000 is not supported", "ctx-1"),
        (json.dumps({**WS, "seed": 1.5}), InvalidFieldError, "seed: expected an integer, got 1.5", "ctx-1"),
        ('{"context_id": "c-2", "cancel": "true"}', InvalidFieldError, "cancel: expected true or false, got a string", "c-2"),
        ('{"cancel": true}', MissingFieldError, "context_id: field required", ""),  # UNROUTABLE_CONTEXT_ID
        ('{"cancel": true, "context_id": ""}', InvalidFieldError, "context_id: must not be empty", ""),  # UNROUTABLE_CONTEXT_ID
    ],
)
def test_ws_message_errors(raw, cls, message, context_id):
    err = error_of(parse_ws_message, raw)
    assert type(err) is cls
    assert str(err).startswith(message)
    assert err.context_id == context_id


def test_ws_accepts_bytes_frames():
    assert parse_ws_message(json.dumps(WS).encode()).context_id == "ctx-1"
    err = error_of(parse_ws_message, b'{"context_id": "c-3", \xff')
    assert isinstance(err, InvalidJsonError) and err.context_id == "c-3"


def test_ws_ignored_fields_logged_with_context(caplog):
    caplog.set_level(logging.DEBUG, logger="api.protocol.requests")
    parse_ws_message(json.dumps({**WS, "cartesia_extra": 1}))
    assert any(r.getMessage() == "context ctx-1: ignoring unknown fields cartesia_extra" for r in caplog.records)


def test_livekit_style_message():
    """LiveKit: X-API-Key auth, language null, voice object with mode, ' ' end message."""
    msg = ws(language=None, voice={"mode": "id", "id": "lk-voice"}, transcript=" ", **{"continue": False})
    assert msg.language is None and msg.voice_id == "lk-voice" and not msg.has_text and not msg.continue_


# --- access-token bodies --------------------------------------------------------------------------


def test_access_token_bodies():
    assert parse_access_token_request(b"") == AccessTokenRequest()
    req = parse_access_token_request('{"grants": {"tts": true, "stt": false}, "expires_in": 3600}')
    assert req.grants.tts and not req.grants.stt and not req.grants.agent and req.expires_in == 3600
    future = parse_access_token_request({"grants": {"tts": True, "voice_design": True}})
    assert future.grants.model_dump() == {"tts": True, "stt": False, "agent": False}
    for body, message in [
        ({"expires_in": 0}, "expires_in: must be between 1 and 3600, got 0"),
        ({"expires_in": 3601}, "expires_in: must be between 1 and 3600, got 3601"),
        ({"expires_in": "60"}, "expires_in: expected an integer, got a string"),
        ({"grants": {"tts": "yes"}}, "grants.tts: expected true or false, got a string"),
        ({"grants": []}, "grants: expected an object, got an array"),
    ]:
        assert str(error_of(parse_access_token_request, body)) == message
    assert isinstance(error_of(parse_access_token_request, "[]"), InvalidJsonError)


# --- what the real SDK sends ----------------------------------------------------------------------


class _Recorder:
    """Stands in for the socket under cartesia's TTSResourceConnection: records each sent frame."""

    def __init__(self) -> None:
        self.frames: list[str] = []

    def send(self, data: str) -> None:
        self.frames.append(data)


def test_frames_of_the_python_sdk_context_helper_parse():
    from cartesia.lib._tts import TTSResourceConnection

    recorder = _Recorder()
    conn = TTSResourceConnection(recorder)  # type: ignore[arg-type]
    ctx = conn.context(model_id="sonic-3", voice={"mode": "id", "id": "vid"}, output_format=RAW,
                       language="en", max_buffer_delay_ms=0, add_timestamps=True, use_normalized_timestamps=False,
                       generation_config={"speed": 1.2, "volume": 1.0, "emotion": "calm"})
    ctx.push("Hello ")
    ctx.push("", flush=True)
    ctx.push("world.")
    ctx.no_more_inputs()
    ctx.cancel()
    parsed = [parse_ws_message(frame) for frame in recorder.frames]
    gens, cancel = parsed[:-1], parsed[-1]
    assert [m.transcript for m in gens] == ["Hello ", "", "world.", ""]
    assert [m.continue_ for m in gens] == [True, True, True, False]
    assert [m.flush for m in gens] == [False, True, False, False]
    assert all(m.max_buffer_delay_ms == 0 and m.add_timestamps and m.voice_id == "vid" for m in gens)
    assert gens[0].generation_config.speed == 1.2
    assert all(m.ignored_fields() == [] for m in gens)
    assert isinstance(cancel, WsCancelRequest) and cancel.context_id == gens[0].context_id


def test_frames_of_the_python_sdk_defaults_parse():
    """Without output_format the SDK sends raw/pcm_f32le/44100 and model 'sonic-latest'."""
    from cartesia.lib._tts import TTSResourceConnection

    recorder = _Recorder()
    ctx = TTSResourceConnection(recorder).context(voice="vid")  # type: ignore[arg-type]
    ctx.push("Hi.")
    ctx.no_more_inputs()
    first, last = (parse_ws_message(f) for f in recorder.frames)
    assert first.model_id == "sonic-latest"
    assert first.output_format == OutputFormat(Container.RAW, AudioEncoding.PCM_F32LE, 44100)
    assert last.transcript == "" and last.continue_ is False


def test_bodies_of_the_python_sdk_http_calls_parse():
    from cartesia import Cartesia

    bodies: dict[str, bytes] = {}

    def transport(request: httpx.Request) -> httpx.Response:
        bodies[request.url.path] = request.content
        if request.url.path == "/access-token":
            return httpx.Response(200, json={"token": "t"})
        if request.url.path == "/tts/sse":
            return httpx.Response(200, content=b'data: {"type":"done","done":true,"status_code":206}\n\n',
                                  headers={"content-type": "text/event-stream"})
        return httpx.Response(200, content=b"\x00\x00")

    client = Cartesia(api_key="k", base_url="http://gepard.test", http_client=httpx.Client(transport=httpx.MockTransport(transport)))
    client.tts.generate(model_id="sonic-3", transcript="Hi there.", voice={"mode": "id", "id": "v"},
                        output_format={"container": "mp3", "sample_rate": 44100, "bit_rate": 128000},
                        generation_config={"speed": 1.1}, language="en").read()
    list(client.tts.generate_sse(model_id="sonic-3", transcript="Hi.", voice={"mode": "id", "id": "v"},
                                 output_format=RAW, add_timestamps=True))
    client.access_token.create(grants={"tts": True}, expires_in=120)

    mp3 = parse_tts_request(bodies["/tts/bytes"])
    assert mp3.output_format == OutputFormat(Container.MP3, None, 44100, 128000) and mp3.speed_factor == 1.1
    sse = parse_tts_request(bodies["/tts/sse"], sse=True)
    assert sse.add_timestamps and sse.output_format.container is Container.RAW
    token = parse_access_token_request(bodies["/access-token"])
    assert token.grants.tts and token.expires_in == 120


# --- hostile inputs: nesting, size, surrogates, over-long ids (issue 9: 3 and 11) ----------------


def _deep(depth: int, context_id: str = "deep-1") -> str:
    return json.dumps({**WS, "context_id": context_id})[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize("depth", [33, 1100, 100_000])
def test_deep_nesting_is_a_precise_error_on_every_entry_point(depth):
    from api.protocol.json_body import MAX_JSON_DEPTH

    raw = _deep(depth)
    for parse in (parse_ws_message, parse_tts_request, parse_access_token_request):
        for form in (raw, raw.encode()):
            err = error_of(parse, form)  # a RecursionError here was a dropped socket / a 500
            assert type(err) is InvalidJsonError and err.error_code == "invalid_json"
            assert f"more than {MAX_JSON_DEPTH} levels deep" in str(err)
    assert error_of(parse_ws_message, raw).context_id == "deep-1"  # still routed to its context


def test_nesting_limit_counts_only_brackets_outside_strings():
    from api.protocol.json_body import MAX_JSON_DEPTH, load_json

    ok = _deep(MAX_JSON_DEPTH - 1)  # the message object itself is one level
    assert load_json(ok, "message")["x"] is not None
    assert parse_ws_message(json.dumps({**WS, "transcript": "[[[{{{" * 1000})).transcript.startswith("[[[")
    assert load_json('["' + "\\\"[" * 1000 + '"]', "body") == ["\"[" * 1000]
    err = error_of(load_json, '["' + "[" * 1000, "body")  # unterminated string: brackets in it do not count
    assert "not valid JSON" in str(err)
    # an escaped backslash ends right before the closing quote: the brackets after it do count
    deep_after = '["a\\\\", ' + "[" * 40 + "]" * 40 + "]"
    assert json.loads(deep_after)[0] == "a\\"
    assert f"more than {MAX_JSON_DEPTH} levels deep" in str(error_of(load_json, deep_after, "body"))
    assert load_json('["\\\\\\"' + "[" * 40 + '"]', "body") == ['\\"' + "[" * 40]  # \\ then \" inside


def test_ws_message_over_the_size_limit_is_refused_before_parsing():
    from api.protocol.errors import MessageTooLargeError
    from api.protocol.requests import MAX_WS_MESSAGE_BYTES

    big = json.dumps({**WS, "context_id": "big-1", "transcript": "a" * MAX_WS_MESSAGE_BYTES})
    err = error_of(parse_ws_message, big)
    assert type(err) is MessageTooLargeError and err.status_code == 413 and err.error_code == "request_too_large"
    assert err.context_id == "big-1" and str(MAX_WS_MESSAGE_BYTES) in str(err)
    assert type(error_of(parse_ws_message, big.encode())) is MessageTooLargeError


def test_unpaired_surrogate_escapes_are_invalid_json_but_pairs_are_fine():
    assert parse_ws_message(json.dumps({**WS, "transcript": "hi \U0001F600"})).transcript == "hi \U0001F600"
    for raw in ('{"context_id": "c-s", "transcript": "\\ud800"}', '{"context_id": "\\udfff", "model_id": "m"}',
                '{"context_id": "c-s", "\\ud83d": 1}'):
        err = error_of(parse_ws_message, raw)
        assert type(err) is InvalidJsonError and "surrogate" in str(err)
    assert error_of(parse_ws_message, '{"context_id": "\\udfff"}').context_id == ""  # not echoable
    assert error_of(parse_ws_message, b'{"context_id": "c-s", "transcript": "\xed\xa0\x80"}').context_id == "c-s"


@pytest.mark.parametrize("raw", [
    json.dumps({**WS, "context_id": "x" * (1 << 20)}),
    json.dumps({"context_id": "x" * (1 << 19), "cancel": True}),
    '{"context_id": "' + "x" * (1 << 19) + '", "transcript": oops',  # recovered from malformed JSON
    '{"context_id": "' + "x" * 600 + '", ' + "[" * 1100,
])
def test_over_long_context_ids_are_never_echoed(raw):
    from api.errors import error_event
    from api.protocol.requests import UNROUTABLE_CONTEXT_ID

    err = error_of(parse_ws_message, raw)
    assert err.context_id == UNROUTABLE_CONTEXT_ID
    event = error_event(err, f"conn:{err.context_id}").to_json()
    assert len(event) < 2048 and "x" * 100 not in event


def test_sse_context_id_is_bounded_like_a_websocket_one():
    assert parse_tts_request({**BODY, "context_id": "c" * 512}, sse=True).context_id == "c" * 512
    err = error_of(parse_tts_request, {**BODY, "context_id": "c" * 513}, sse=True)
    assert err.field == "context_id" and "at most 512 characters, got 513" in str(err) and "ccc" not in str(err)
    assert parse_tts_request({**BODY, "context_id": "c" * 513}).context_id  # /tts/bytes never echoes it


@pytest.mark.parametrize("changes", [
    {"language": "en-" + "x" * 100_000}, {"normalization": "z" * 100_000}, {"speed": "s" * 100_000},
    {"voice": {"mode": "m" * 100_000, "id": "v"}}, {"voice": {"mode": ["x"] * 10_000, "id": "v"}},
])
def test_error_messages_quote_at_most_a_short_piece_of_a_value(changes):
    err = error_of(tts, **changes)
    assert len(str(err)) < 400, str(err)[:500]


# --- sampling knobs are bounded on both sides (issue 9) -------------------------------------------
# Unbounded values used to reach the engine: top_k 2**63 overflowed a tensor in its batch step,
# temperature 3.4e38 became NaN and then an invalid code, stop_threshold 0 or 1 passed here.


def test_sampling_knobs_accept_their_closed_bounds():
    from engine.requests import sampling_problems

    req = tts(temperature=10, top_k=1024, max_frames=2000, cfg_scale=20, cfg_frames=2000, repetition_penalty=10,
              seed=2**63 - 1, stop_threshold=0.999)
    params = req.to_sampling_params(SamplingParams())
    assert (params.temperature, params.top_k, params.max_frames, params.seed) == (10.0, 1024, 2000, 2**63 - 1)
    assert sampling_problems(params) == []


@pytest.mark.parametrize("changes, field, message", [
    ({"top_k": 2**63}, "top_k", "top_k: must be in [0, 1024], got 2**63"),
    ({"top_k": 1e300}, "top_k", "top_k: must be in [0, 1024], got 1e+300"),
    # an integer past a float's range (JSON allows 4,300 digits) is no 500: the fuzz found it
    ({"top_k": -int("9" * 400)}, "top_k", "top_k: must be in [0, 1024], got -9.99999e+399"),
    ({"seed": 12345 * 10**400}, "seed", "seed: must be in [0, 2**63 - 1], got 1.2345e+404"),
    ({"top_k": 1025}, "top_k", "top_k: must be in [0, 1024], got 1025"),
    ({"temperature": 3.4e38}, "temperature", "temperature: must be in [0, 10], got 3.4e+38"),
    ({"temperature": 1e300}, "temperature", "temperature: must be in [0, 10], got 1e+300"),
    ({"temperature": 10.5}, "temperature", "temperature: must be in [0, 10], got 10.5"),
    ({"stop_threshold": 0}, "stop_threshold", "stop_threshold: must be in (0, 1), got 0.0"),
    ({"stop_threshold": 1}, "stop_threshold", "stop_threshold: must be in (0, 1), got 1"),
    ({"stop_threshold": 1.0}, "stop_threshold", "stop_threshold: must be in (0, 1), got 1.0"),
    ({"repetition_penalty": 10.5}, "repetition_penalty", "repetition_penalty: must be in (0, 10], got 10.5"),
    ({"cfg_scale": 20.5}, "cfg_scale", "cfg_scale: must be in (0, 20], got 20.5"),
    ({"cfg_frames": 2001}, "cfg_frames", "cfg_frames: must be in [0, 2000], got 2001"),
    ({"max_frames": 2001}, "max_frames", "max_frames: must be in [1, 2000], got 2001"),
    ({"seed": 2**63}, "seed", "seed: must be in [0, 2**63 - 1], got 2**63"),
])
@pytest.mark.parametrize("parse", [tts, ws])
def test_sampling_knobs_past_their_range_are_rejected_naming_the_field(parse, changes, field, message):
    err = error_of(parse, **changes)
    assert err.field == field and isinstance(err, InvalidFieldError) and err.error_code == "invalid_request"
    assert message in str(err)
    assert err.context_id == (None if parse is tts else "ctx-1")


def test_the_wire_and_the_engine_accept_exactly_the_same_sampling_ranges():
    import dataclasses
    import math

    from engine.requests import SAMPLING_BOUNDS, sampling_problems

    for name, bound in SAMPLING_BOUNDS.items():
        if name == "repetition_window":
            continue  # engine API only, not a wire field
        step = (lambda v, d: v + d) if bound.integer else (lambda v, d: math.nextafter(v, v + d))
        edges = [bound.lo, bound.hi, step(bound.lo, -1), step(bound.hi, 1), step(bound.lo, 1), step(bound.hi, -1)]
        for value in edges:
            try:
                wire = getattr(tts(**{name: value}).to_sampling_params(SamplingParams()), name)
                wire_ok = True
            except ProtocolError:
                wire, wire_ok = value, False
            engine_ok = not sampling_problems(dataclasses.replace(SamplingParams(), **{name: wire}))
            assert wire_ok == engine_ok, (name, value, wire_ok, engine_ok)
