"""api/errors.py: every table entry, the JSON body, retry headers (and how the real SDK reacts to
them), error events with routed context ids, and the generic 500 for unknown exceptions."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from api.audio.errors import UnsupportedSampleRateError
from api.errors import (
    INTERNAL_ERROR_MESSAGE,
    ApiError,
    AuthBackendUnavailableError,
    AuthenticationError,
    BadRequestError,
    ContextClosedError,
    NotFoundError,
    PermissionDeniedError,
    PronouncedTextTooLongError,
    RateLimitedError,
    RequestTooLargeError,
    ServiceUnavailableError,
    TooManyContextsError,
    TranscriptTooLongError,
    UnknownModelError,
    describe_error,
    error_body,
    error_event,
    error_response,
    new_request_id,
    ws_close_code,
)
from api.protocol.errors import InvalidJsonError, UnsupportedVoiceModeError
from api.protocol.requests import parse_ws_message
from api.text.errors import NormalizationModeError
from codec_worker import errors as codec_errors
from engine import errors as engine_errors
from voices import errors as voice_errors
from voices.dictionaries import InvalidDictCursorError

# (exception, status, error_code, retryable)
CASES = [
    (UnknownModelError("tts-9000", ["gepard-1.0", "sonic*"]), 400, "model_not_found", False),
    (TranscriptTooLongError(6000, 5000), 400, "transcript_too_long", False),
    (PronouncedTextTooLongError("transcript", 301, 37801, 5000, "pdict_1"), 400, "transcript_too_long", False),
    (BadRequestError("expires_in: must be between 1 and 3600 seconds, got 0"), 400, "invalid_request", False),
    (ContextClosedError("ctx-1"), 400, "context_closed", False),
    (AuthenticationError("missing credentials", error_code="missing_credentials"), 401, "missing_credentials", False),
    (PermissionDeniedError("no tts grant"), 403, "permission_denied", False),
    (NotFoundError("no route /stt"), 404, "not_found", False),
    (RequestTooLargeError("request body is over 1048576 bytes"), 413, "request_too_large", False),
    (RateLimitedError("64 generations are running"), 429, "concurrency_limited", False),
    (RateLimitedError("busy", retry_after_s=2.0), 429, "concurrency_limited", True),
    (TooManyContextsError(64), 429, "too_many_contexts", False),
    (ServiceUnavailableError("starting up"), 503, "service_unavailable", True),
    (AuthBackendUnavailableError("redis down"), 503, "auth_unavailable", True),
    (InvalidJsonError("request body is not valid JSON"), 400, "invalid_json", False),
    (UnsupportedVoiceModeError("voice.mode: embeddings", field="voice.mode"), 400, "voice_embedding_not_supported", False),
    (engine_errors.InvalidRequestError("text is empty after normalisation"), 400, "invalid_request", False),
    (engine_errors.OverloadedError("engine at capacity (64 requests)"), 503, "overloaded", True),
    (engine_errors.GenerationError("sampling failed"), 500, "generation_failed", False),
    (engine_errors.EngineDeadError("backend crashed"), 503, "engine_unavailable", True),
    (engine_errors.CheckpointError("no weights"), 503, "engine_unavailable", True),
    (voice_errors.VoiceNotFoundError("abc-123"), 404, "voice_not_found", False),
    (voice_errors.VoiceExistsError("abc"), 409, "voice_exists", False),
    (voice_errors.ReadOnlyVoiceError("builtin-1", "deleted"), 403, "voice_read_only", False),
    (voice_errors.InvalidCursorError("starting_after", "zzz"), 400, "invalid_cursor", False),
    (InvalidDictCursorError("ending_before", "zzz"), 400, "invalid_cursor", False),
    (voice_errors.InvalidVoiceError("name: must not be empty"), 400, "invalid_voice", False),
    (voice_errors.VoiceStoreUnavailableError("redis timeout"), 503, "voice_store_unavailable", True),
    (voice_errors.VoiceCloningError("encoder failed"), 500, "voice_cloning_failed", False),
    (voice_errors.VoiceIncompatibleError("v1", "fp-a", "fp-b", (8, 1024)), 409, "voice_incompatible", False),
    (voice_errors.ClipTooShortError(1.2, 3.0), 400, "clip_too_short", False),
    (voice_errors.ClipSilentError(-80.0, -50.0), 400, "clip_silent", False),
    (voice_errors.ClipTooLargeError(30_000_000, 20_000_000), 400, "clip_too_large", False),
    (voice_errors.UnsupportedAudioFormatError("clip is not wav/flac/ogg/mp3"), 400, "unsupported_audio_format", False),
    (voice_errors.CorruptClipError("not a wav"), 400, "corrupt_clip", False),
    (voice_errors.InvalidClipError("clip is stereo"), 400, "invalid_clip", False),
    (codec_errors.CodecLoadError("no codec"), 503, "codec_unavailable", True),
    (codec_errors.DecodeError("decoder failed"), 500, "audio_decoding_failed", False),
    (UnsupportedSampleRateError("output_format.sample_rate", "unsupported output_format.sample_rate 1"), 400,
     "invalid_output_format", False),
    (NormalizationModeError("unsupported normalization 'x'"), 400, "invalid_normalization", False),
]


@pytest.mark.parametrize("exc, status, code, retryable", CASES, ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None)
def test_table_entry_body_and_headers(exc, status, code, retryable):
    info = describe_error(exc, "req-1")
    assert (info.status_code, info.error_code, info.retryable) == (status, code, retryable)
    assert info.message == str(exc) and info.title

    body = error_body(exc, "req-1")
    assert body == {"error_code": code, "title": info.title, "message": str(exc), "request_id": "req-1"}

    response = error_response(exc, "req-1")
    assert response.status_code == status
    assert json.loads(response.body) == body
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-request-id"] == "req-1"
    if retryable:
        assert "x-should-retry" not in response.headers
        assert int(response.headers["retry-after"]) >= 1
        assert int(response.headers["retry-after-ms"]) == round(info.retry_after_s * 1000)
    else:
        assert response.headers["x-should-retry"] == "false"
        assert "retry-after" not in response.headers


def test_messages_name_the_failing_values():
    assert str(voice_errors.VoiceNotFoundError("abc-123")) in error_body(voice_errors.VoiceNotFoundError("abc-123"), "r")["message"]
    assert "abc-123" in error_body(voice_errors.VoiceNotFoundError("abc-123"), "r")["message"]
    model = error_body(UnknownModelError("tts-9000", ["gepard-1.0", "sonic*"]), "r")
    assert model["title"] == "Invalid model"
    assert model["message"].startswith("The model is not valid, make sure it is a valid model ID.")
    assert "'tts-9000'" in model["message"] and "gepard-1.0, sonic*" in model["message"]
    assert "6000" in str(TranscriptTooLongError(6000, 5000)) and "5000" in str(TranscriptTooLongError(6000, 5000))


def test_retry_after_rounds_up_to_whole_seconds():
    response = error_response(RateLimitedError("busy", retry_after_s=0.25), "r")
    assert response.headers["retry-after"] == "1" and response.headers["retry-after-ms"] == "250"


def test_unknown_exceptions_are_generic_500s_and_logged(caplog):
    caplog.set_level(logging.ERROR, logger="api.errors")
    try:
        raise KeyError("/secret/path/model.safetensors")
    except KeyError as exc:
        response = error_response(exc, "req-7")
    body = json.loads(response.body)
    assert response.status_code == 500 and body["error_code"] == "internal_error"
    assert body["message"] == INTERNAL_ERROR_MESSAGE + " Request id: req-7."
    assert "secret" not in response.body.decode()
    assert response.headers["x-should-retry"] == "false"
    [record] = caplog.records
    assert "req-7" in record.getMessage() and record.exc_info is not None and record.exc_info[0] is KeyError


def test_known_server_errors_log_a_warning(caplog):
    caplog.set_level(logging.WARNING, logger="api.errors")
    error_body(engine_errors.GenerationError("nan logits"), "req-3")
    assert any("req-3" in r.getMessage() and "nan logits" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("exc, lines", [
    (voice_errors.VoiceNotFoundError("v9"), 1),  # a client error the event's lookup leaves alone: one INFO line
    (engine_errors.GenerationError("nan logits"), 0),  # logged by the lookup (the test above): not twice
    (KeyError("bug"), 0),  # logged by the lookup with its traceback
])
def test_a_mid_stream_failure_is_noted_only_where_the_error_lookup_does_not_log_it(exc, lines, caplog):
    from api.routes._common import note_mid_stream_failure
    caplog.set_level(logging.DEBUG, logger="api.routes._common")
    note_mid_stream_failure("sse req-9", exc)
    noted = [r for r in caplog.records if r.name == "api.routes._common"]
    assert len(noted) == lines, [r.getMessage() for r in noted]
    if lines:
        assert noted[0].levelno == logging.INFO and "sse req-9" in noted[0].getMessage()


def test_error_event_routes_to_the_context():
    event = error_event(voice_errors.VoiceNotFoundError("v9"), "req-2", "ctx-4")
    assert event.to_dict() == {"type": "error", "done": True, "status_code": 404, "error_code": "voice_not_found",
                               "title": "Voice not found", "message": "voice 'v9' not found",
                               "error": "Voice not found: voice 'v9' not found", "request_id": "req-2",
                               "context_id": "ctx-4"}


def test_error_event_takes_the_context_id_a_protocol_error_recovered():
    with pytest.raises(InvalidJsonError) as info:
        parse_ws_message('{"context_id": "ctx-8", "transcript": ')
    event = error_event(info.value, "req-5")
    assert event.context_id == "ctx-8" and event.status_code == 400 and event.error_code == "invalid_json"
    assert error_event(info.value, "req-5", "explicit").context_id == "explicit"


def test_api_error_overrides():
    exc = AuthenticationError("token expired", error_code="token_expired")
    assert exc.error_code == "token_expired" and exc.status_code == 401 and exc.title == "Unauthorized"
    assert ApiError("x").error_code == "invalid_request"


def test_ws_close_codes():
    assert ws_close_code(AuthenticationError("bad key")) == 1008
    assert ws_close_code(engine_errors.OverloadedError("full")) == 1013
    assert ws_close_code(RateLimitedError("too many sockets")) == 1013
    assert ws_close_code(engine_errors.GenerationError("x")) == 1011


def test_request_ids_are_unique_uuid4():
    import uuid

    ids = {new_request_id() for _ in range(100)}
    assert len(ids) == 100 and all(uuid.UUID(i).version == 4 for i in ids)


# --- what the real SDK does with our responses ----------------------------------------------------


def _sdk_against(exc: BaseException, max_retries: int = 2):
    from cartesia import Cartesia

    calls = []

    def transport(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        r = error_response(exc, "req-sdk")
        return httpx.Response(r.status_code, headers=dict(r.headers), content=r.body)

    client = Cartesia(api_key="k", base_url="http://gepard.test", max_retries=max_retries,
                      http_client=httpx.Client(transport=httpx.MockTransport(transport)))
    return client, calls


def test_sdk_does_not_retry_what_cannot_succeed():
    import cartesia

    client, calls = _sdk_against(RateLimitedError("64 generations are running"))
    with pytest.raises(cartesia.RateLimitError) as info:
        client.voices.get("v1")
    assert len(calls) == 1  # x-should-retry: false overrides the SDK's default retry of 429
    assert info.value.body["error_code"] == "concurrency_limited"

    client, calls = _sdk_against(voice_errors.VoiceNotFoundError("v1"))
    with pytest.raises(cartesia.NotFoundError) as info:
        client.voices.get("v1")
    assert len(calls) == 1 and info.value.body["message"] == "voice 'v1' not found"


def test_sdk_retries_retryable_errors():
    import cartesia

    client, calls = _sdk_against(RateLimitedError("busy", retry_after_s=0.01), max_retries=1)
    with pytest.raises(cartesia.RateLimitError):
        client.voices.get("v1")
    assert len(calls) == 2


def test_messages_ids_and_text_are_bounded_when_echoed():
    """Issue 9.11: a megabyte quoted by any error (an unknown model id, a voice id) is cut, an
    over-long context_id is never repeated, and a lone surrogate cannot break the response."""
    from api.errors import MAX_ERROR_MESSAGE_CHARS

    huge = "m" * (1 << 20)
    body = json.loads(error_response(UnknownModelError(huge), "req-big").body)
    assert len(body["message"]) == MAX_ERROR_MESSAGE_CHARS and body["message"].endswith("more characters)")
    event = error_event(voice_errors.VoiceNotFoundError(huge), "c:" + "x" * (1 << 20), "x" * 513)
    assert event.context_id == "" and len(event.request_id) < 600 and len(event.to_json()) < 4096
    assert error_event(voice_errors.VoiceNotFoundError("v"), "r", "x" * 512).context_id == "x" * 512
    lone = error_response(BadRequestError("bad \ud800 value"), "req-s")
    assert json.loads(lone.body)["message"] == "bad \\ud800 value"
