"""parse_speech_request: OpenAI's request shape, defaults, limits and one precise error per problem."""

from __future__ import annotations

import json

import pytest

from api.protocol.openai import (
    OpenAiRequestError,
    SpeechFormat,
    error_payload,
    is_openai_model,
    parse_speech_request,
)

BASE = {"model": "tts-1", "input": "Hello.", "voice": "alloy"}


def parse(**changes):
    return parse_speech_request(json.dumps({**BASE, **changes}))


def test_defaults_and_gepard_extras():
    req = parse()
    assert (req.response_format, req.speed, req.stream_format, req.sse) == (SpeechFormat.MP3, 1.0, "audio", False)
    assert req.sampling == {} and req.instructions is None
    req = parse(voice={"id": "v-1"}, seed=7, temperature=0.5, top_k=3.0, stream_format="sse", speed=1, language="de",
                instructions="whisper", unknown_field=[1])
    assert req.voice == "v-1" and req.sampling == {"seed": 7, "temperature": 0.5, "top_k": 3} and req.sse
    assert req.language == "de" and req.instructions == "whisper"
    # null is the default of every optional field, as the SDKs send for an unset one
    req = parse(response_format=None, speed=None, stream_format=None, instructions=None, seed=None)
    assert (req.response_format, req.speed, req.stream_format, req.sampling) == (SpeechFormat.MP3, 1.0, "audio", {})


def test_openai_model_ids():
    assert all(map(is_openai_model, ["tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15"]))
    assert not any(map(is_openai_model, ["gpt-4o", "tts-2", "whisper-1"]))


@pytest.mark.parametrize("speed", [0.25, 0.6, 1, 2.0, 4])
def test_every_speed_in_openais_range_is_taken(speed):
    # honoured by a time stretch (api/audio/tempo.py): no longer a 400 speed_not_supported
    assert parse(speed=speed).speed == float(speed)


@pytest.mark.parametrize("changes, param, code, words", [
    ({"model": None}, "model", "missing_required_parameter", "Missing required parameter: 'model'"),
    ({"input": 5}, "input", "invalid_type", "expected a string"),
    ({"voice": None}, "voice", "missing_required_parameter", "'voice'"),
    ({"voice": {"name": "x"}}, "voice", "invalid_type", "voice.id"),
    ({"voice": ""}, "voice", "invalid_value", "empty string"),
    ({"voice": "v" * 257}, "voice", "string_above_max_length", "257 characters"),
    ({"response_format": "PCM"}, "response_format", "invalid_value", "'mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'"),
    ({"speed": True}, "speed", "invalid_type", "expected a number"),
    ({"speed": "1.0"}, "speed", "invalid_type", "expected a number"),
    ({"speed": 0.24}, "speed", "invalid_value", "from 0.25 to 4"),
    ({"speed": 4.01}, "speed", "invalid_value", "4.01 is out of range"),
    ({"instructions": 3}, "instructions", "invalid_type", "expected a string"),
    ({"max_frames": 0}, "max_frames", "invalid_value", "must be in [1, 2000]"),
    ({"top_k": 1.5}, "top_k", "invalid_type", "expected an integer"),
])
def test_errors_name_the_param(changes, param, code, words):
    with pytest.raises(OpenAiRequestError) as info:
        parse(**changes)
    err = info.value
    assert (err.param, err.error_code, err.status_code) == (param, code, 400)
    assert words in err.message


def test_input_limit_is_the_lower_of_openais_and_the_servers():
    parse_speech_request({**BASE, "input": "a" * 4096})
    with pytest.raises(OpenAiRequestError, match="maximum length 4096, but got a string with length 4097"):
        parse_speech_request({**BASE, "input": "a" * 4097})
    with pytest.raises(OpenAiRequestError, match="maximum length 100,? but got"):
        parse_speech_request({**BASE, "input": "a" * 101}, max_input_chars=100)


def test_body_must_be_an_object():
    with pytest.raises(OpenAiRequestError) as info:
        parse_speech_request(b"[1, 2]")
    assert info.value.error_code == "invalid_json" and info.value.param is None


def test_error_payload_types():
    assert error_payload("m", 401, None, "invalid_credentials") == {
        "error": {"message": "m", "type": "authentication_error", "param": None, "code": "invalid_credentials"}}
    assert [error_payload("m", s, None, None)["error"]["type"] for s in (400, 403, 404, 413, 429, 500, 503)] == [
        "invalid_request_error", "permission_error", "invalid_request_error", "invalid_request_error",
        "rate_limit_error", "server_error", "server_error"]
