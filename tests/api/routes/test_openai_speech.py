"""The OpenAI-compatible speech API on a live server, through the official ``openai`` SDK: every
response_format decoded and measured, streaming (chunked audio and SSE), model listing, voice ids
and names, and every error in OpenAI's shape with the status the SDK maps to its exceptions."""

from __future__ import annotations

import base64
import io
import json
import logging

import av
import httpx
import numpy as np
import openai
import pytest
import soundfile
from prometheus_client.parser import text_string_to_metric_families

from api.errors import RateLimitedError, ServiceUnavailableError
from api.routes.openai_speech import openai_error_response
from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer
from tests.api.routes.audio_checks import expected_samples, spectral_centroid_hz, stretched_samples
from tests.api.routes.conftest import API_KEY
from tests.voices.redis_server import RedisServer

RATE = 24000
ONE = expected_samples(1, RATE)  # 24 kHz samples of one segment (tiny checkpoint)
TEXT = "Hello there."  # one segment


@pytest.fixture(scope="module")
def client(gateway) -> openai.OpenAI:
    with openai.OpenAI(api_key="unused-auth-is-off", base_url=gateway.url + "/v1", max_retries=0) as c:
        yield c


def speech(client: openai.OpenAI, fmt: str = "pcm", voice: str = "alloy", **extra) -> bytes:
    return client.audio.speech.create(model="tts-1", voice=voice, input=TEXT, response_format=fmt,
                                      extra_body={"seed": 5, **extra}).content


def decode_av(data: bytes) -> tuple[np.ndarray, int]:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        assert stream.codec_context.channels == 1
        frames = [f.to_ndarray() for f in container.decode(stream)]
        return np.concatenate([f.reshape(-1) for f in frames]), stream.codec_context.sample_rate


def test_models_list_and_retrieve(client):
    ids = [m.id for m in client.models.list()]
    assert {"tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gepard-1.0"} <= set(ids)
    assert not any("*" in i for i in ids)  # patterns of GEPARD_MODEL_IDS are not models
    model = client.models.retrieve("tts-1-hd")
    assert (model.id, model.object, model.owned_by) == ("tts-1-hd", "model", "gepard")
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("whisper-1")
    assert info.value.code == "model_not_found" and info.value.type == "invalid_request_error"


def test_every_format_decodes_to_the_same_audio(client):
    """pcm is the reference: wav and flac carry exactly its samples, the lossy formats decode to
    24 kHz (Opus: 48 kHz, as every Opus decoder outputs) with their codec's delay and padding."""
    pcm = np.frombuffer(speech(client, "pcm"), "<i2")
    assert len(pcm) == ONE

    wav, rate = soundfile.read(io.BytesIO(speech(client, "wav")), dtype="int16")
    assert rate == RATE and np.array_equal(wav, pcm)  # streamed header (0xFFFFFFFF sizes)
    flac, rate = soundfile.read(io.BytesIO(speech(client, "flac")), dtype="int16")
    assert rate == RATE and np.array_equal(flac, pcm)

    mp3, rate = decode_av(speech(client, "mp3"))
    assert rate == RATE and ONE <= len(mp3) <= ONE + 3 * 576 + 1152  # LAME delay + frame padding
    aac, rate = decode_av(speech(client, "aac"))
    assert rate == RATE and ONE <= len(aac) <= ONE + 1024 + 2 * 1024  # AAC priming + frame padding
    opus, rate = decode_av(speech(client, "opus"))
    assert rate == 48000 and len(opus) == 2 * ONE  # Ogg trims pre-skip and padding exactly


def test_voice_names_ids_and_openai_voices(client, default_voice_id):
    """A stored id, its voice's name in any case, and OpenAI's built-in names (no stored voice has
    them) all speak with that voice: the same seed gives the same samples."""
    by_id = speech(client, voice=default_voice_id)
    assert speech(client, voice="alloy") == by_id
    assert speech(client, voice="GEPARD") == by_id  # the default voice is named "Gepard"
    custom = client.audio.speech.create(model="gpt-4o-mini-tts", voice={"id": default_voice_id}, input=TEXT,
                                        response_format="pcm", instructions="Speak cheerfully.",
                                        extra_body={"seed": 5})
    assert custom.content == by_id  # instructions are accepted and change nothing


@pytest.mark.parametrize("speed", [2.0, 0.25, 4.0, 1.0])
def test_speed_stretches_the_speech_at_its_pitch(client, speed):
    """OpenAI's speed (0.25-4.0, wider than Cartesia's 0.6-1.5) is honoured: the segment is
    round(N / speed) samples before resampling to 24 kHz, and its spectrum is the voice's own."""
    plain = np.frombuffer(speech(client, "pcm", temperature=0.0), "<i2") / 32768.0
    fast = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="pcm", speed=speed,
                                      extra_body={"seed": 5, "temperature": 0.0}).content
    fast = np.frombuffer(fast, "<i2") / 32768.0
    assert plain.size == ONE and fast.size == stretched_samples(1, speed, RATE)
    assert spectral_centroid_hz(fast, RATE) == pytest.approx(spectral_centroid_hz(plain, RATE), rel=0.05)


def test_streaming_response_is_chunked(client):
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="nova", input="Hello there. Bye now.",
                                                            response_format="pcm") as response:
        assert response.headers["content-type"] == "audio/pcm"
        assert response.headers.get("transfer-encoding") == "chunked" and "content-length" not in response.headers
        body = b"".join(response.iter_bytes())
    assert len(body) == 2 * expected_samples(2, RATE)  # each segment resampled on its own


def test_sse_stream(client):
    with client.audio.speech.with_streaming_response.create(model="gpt-4o-mini-tts", voice="alloy", input=TEXT,
                                                            response_format="pcm", stream_format="sse",
                                                            extra_body={"seed": 5}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    frames = [f for f in text.split("\n\n") if f]
    events = []
    for frame in frames:
        kind, data = frame.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert kind == f"event: {event['type']}"
        events.append(event)
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1) and len(events) > 1
    done = events[-1]
    assert done["type"] == "speech.audio.done"
    usage = done["usage"]
    assert usage["input_tokens"] == len(TEXT) and usage["output_tokens"] == 24  # frames of the tiny checkpoint
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert audio == speech(client, "pcm")


ERRORS = [
    # (request changes, SDK exception, status, param, code)
    ({"voice": "nobody-has-this-voice"}, openai.NotFoundError, 404, "voice", "voice_not_found"),
    ({"response_format": "ogg"}, openai.BadRequestError, 400, "response_format", "invalid_value"),
    ({"speed": 4.5}, openai.BadRequestError, 400, "speed", "invalid_value"),
    ({"speed": 0.1}, openai.BadRequestError, 400, "speed", "invalid_value"),
    ({"speed": 4.01}, openai.BadRequestError, 400, "speed", "invalid_value"),  # any speed inside is spoken
    ({"input": ""}, openai.BadRequestError, 400, "input", "empty_input"),
    ({"input": "   "}, openai.BadRequestError, 400, "input", "empty_input"),
    ({"input": "a" * 4097}, openai.BadRequestError, 400, "input", "string_above_max_length"),
    ({"input": "!!!"}, openai.BadRequestError, 400, "input", "empty_transcript"),  # nothing to speak
    ({"input": "\U0001F600 ..."}, openai.BadRequestError, 400, "input", "empty_transcript"),
    ({"input": "\u0000"}, openai.BadRequestError, 400, "input", "empty_transcript"),  # blank to the Cartesia check
    ({"model": "gpt-4o"}, openai.NotFoundError, 404, "model", "model_not_found"),
    ({"stream_format": "ws"}, openai.BadRequestError, 400, "stream_format", "invalid_value"),
    ({"extra_body": {"seed": -1}}, openai.BadRequestError, 400, "seed", "invalid_value"),
    ({"extra_body": {"temperature": "hot"}}, openai.BadRequestError, 400, "temperature", "invalid_type"),
]


@pytest.mark.parametrize("changes, exc_type, status, param, code", ERRORS, ids=[e[4] + ":" + e[3] for e in ERRORS])
def test_errors_have_openai_shape(client, changes, exc_type, status, param, code):
    args = {"model": "tts-1", "voice": "alloy", "input": TEXT, **changes}
    with pytest.raises(exc_type) as info:
        client.audio.speech.create(**args)
    err = info.value
    assert err.status_code == status
    assert set(err.body) == {"message", "type", "param", "code"}, err.body  # the SDK unwraps {"error": ...}
    assert (err.type, err.param, err.code) == ("invalid_request_error", param, code)
    assert err.body["message"] and "transcript" not in err.body["message"]  # Cartesia's name of input


def test_error_body_is_wrapped_and_not_retried(gateway):
    r = httpx.post(gateway.url + "/v1/audio/speech", content=b"{not json", timeout=10)
    assert r.status_code == 400 and r.headers["x-should-retry"] == "false"
    assert set(r.json()) == {"error"} and r.json()["error"]["type"] == "invalid_request_error"
    assert r.json()["error"]["code"] == "invalid_json"


def test_rate_limit_and_server_errors_map_to_openai_types():
    limited = openai_error_response(RateLimitedError("too many streams", retry_after_s=1.0), "rid")
    assert limited.status_code == 429 and limited.headers["retry-after"] == "1"
    assert json.loads(limited.body)["error"]["type"] == "rate_limit_error"
    busy = openai_error_response(ServiceUnavailableError("starting up"), "rid")
    assert busy.status_code == 503 and json.loads(busy.body)["error"]["type"] == "server_error"
    assert busy.headers["retry-after"] == "1"
    crash = openai_error_response(RuntimeError("secret internals"), "rid")
    body = json.loads(crash.body)["error"]
    assert crash.status_code == 500 and body["type"] == "server_error" and "secret" not in body["message"]


def test_auth_uses_the_same_keys(secure_gateway, tls_files):
    def make(key: str) -> openai.OpenAI:
        return openai.OpenAI(api_key=key, base_url=secure_gateway.url + "/v1", max_retries=0,
                             http_client=openai.DefaultHttpxClient(verify=tls_files.client_context()))

    with make("sk_wrong_key_0123456789") as bad, pytest.raises(openai.AuthenticationError) as info:
        bad.audio.speech.create(model="tts-1", voice="alloy", input=TEXT)
    assert info.value.type == "authentication_error" and set(info.value.body) == {"message", "type", "param", "code"}
    with make(API_KEY) as good:
        assert len(good.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="pcm").content) == 2 * ONE
        assert "tts-1" in [m.id for m in good.models.list()]


# --- a voice store outage, pattern-only model ids, /v1/ paths without a route, null defaults ---


def openai_errors_total(url: str) -> dict[tuple[str, str], float]:
    """(route, error_code) -> gepard_errors_total, from a scrape of /metrics."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return {(s.labels["route"], s.labels["error_code"]): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "gepard_errors_total"}


@pytest.mark.redis
def test_builtin_voices_speak_while_the_voice_store_is_down(tiny_ckpt_dir, tmp_path, default_voice_id, caplog):
    """OpenAI's voice names and the built-in voices' names need no store: with Redis gone they
    speak (one WARNING per outage says the store was skipped), as the Cartesia routes' built-in ids
    do; a name only the store could resolve is still 503 voice_store_unavailable."""
    redis = RedisServer.start()
    try:
        with LiveServer(gateway_settings(tiny_ckpt_dir, tmp_path, redis_url=redis.url)) as server, \
                openai.OpenAI(api_key="unused", base_url=server.url + "/v1", max_retries=0) as c:
            reference = speech(c, voice=default_voice_id)
            redis.stop()
            caplog.set_level(logging.WARNING, logger="api.routes.openai_speech")
            assert speech(c, voice="alloy") == reference
            assert speech(c, voice="GEPARD") == reference  # the default voice's name
            assert speech(c, voice="nova") == reference
            unconditioned = speech(c, voice="Gepard (unconditioned)")
            assert len(unconditioned) == 2 * ONE and unconditioned != reference
            skipped = [r for r in caplog.records if r.name == "api.routes.openai_speech"]
            assert len(skipped) == 1 and skipped[0].levelno == logging.WARNING, skipped
            assert "store" in skipped[0].getMessage()
            with pytest.raises(openai.InternalServerError) as info:
                speech(c, voice="my-cloned-voice")
            err = info.value
            assert err.status_code == 503 and (err.code, err.type) == ("voice_store_unavailable", "server_error")
    finally:
        redis.stop()


def test_openai_ids_speak_when_gepard_model_ids_are_only_patterns(tiny_ckpt_dir, tmp_path):
    """OpenAI's ids always mean Gepard, even when GEPARD_MODEL_IDS names no concrete id."""
    with LiveServer(gateway_settings(tiny_ckpt_dir, tmp_path, model_ids=("sonic-*",))) as server, \
            openai.OpenAI(api_key="unused", base_url=server.url + "/v1", max_retries=0) as c:
        assert [m.id for m in c.models.list()] == ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"]
        for model in ("tts-1", "gpt-4o-mini-tts-2025-12-15", "sonic-2"):
            audio = c.audio.speech.create(model=model, voice="alloy", input=TEXT, response_format="pcm").content
            assert len(audio) == 2 * ONE, model
        with pytest.raises(openai.NotFoundError) as info:
            c.audio.speech.create(model="gepard-1.0", voice="alloy", input=TEXT)
        assert info.value.code == "model_not_found" and info.value.param == "model"


def test_v1_paths_without_a_route_answer_in_openai_shape(gateway, client):
    """No route under /v1/ (or the wrong method) is an OpenAI error the SDK reads, counted as before;
    other paths keep Cartesia's shape."""
    before = openai_errors_total(gateway.url)
    with pytest.raises(openai.NotFoundError) as info:
        client.audio.transcriptions.create(model="whisper-1", file=("a.wav", b"RIFF", "audio/wav"))
    assert (info.value.code, info.value.type) == ("not_found", "invalid_request_error")
    assert "/v1/audio/transcriptions" in info.value.body["message"]
    r = httpx.get(gateway.url + "/v1/audio/speech", timeout=10)
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["error"] | {"message": ""} == {"message": "", "type": "invalid_request_error", "param": None,
                                                    "code": "method_not_allowed"}
    assert r.headers["x-should-retry"] == "false" and r.headers["x-request-id"]
    r = httpx.get(gateway.url + "/v1x/models", timeout=10)
    assert r.status_code == 404 and r.json()["error_code"] == "not_found"  # not /v1/: Cartesia's shape
    after = openai_errors_total(gateway.url)
    moved = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
    assert moved == {("other", "not_found"): 2, ("openai", "method_not_allowed"): 1}


def test_null_response_format_is_the_default(gateway):
    r = httpx.post(gateway.url + "/v1/audio/speech", timeout=60,
                   json={"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": None})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "audio/mpeg"
    _, rate = decode_av(r.content)
    assert rate == RATE
