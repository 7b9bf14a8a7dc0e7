"""The one table from exceptions to what the client sees: HTTP status, error_code, title, retry advice.

Gateway errors raised by ``api/`` itself (HTTP status in brackets):

    ApiError
    ├── BadRequestError              [400] invalid_request: a value the route cannot use
    │   ├── UnknownModelError        [400] model_not_found: model_id is not served here
    │   └── TranscriptTooLongError   [400] transcript_too_long: over GEPARD_MAX_TRANSCRIPT_CHARS
    │       └── PronouncedTextTooLongError  [400] transcript_too_long: over it once a
    │                                    pronunciation dictionary's aliases replaced their keys
    ├── ContextClosedError           [400] context_closed: input after the context's continue=false
    ├── AuthenticationError          [401] missing / invalid credentials, expired token
    ├── PermissionDeniedError        [403] the credential lacks the grant (token without "tts"...)
    ├── NotFoundError                [404] not_found (also: no route at that path)
    ├── MethodNotAllowedError        [405] method_not_allowed: a route, but not for that method
    ├── RequestTimeoutError          [408] request_timeout: a request head or body came too slowly
    ├── RequestTooLargeError         [413] request_too_large
    ├── RateLimitedError             [429] concurrency_limited (retryable only with retry_after_s)
    │   └── TooManyContextsError     [429] too_many_contexts on one WebSocket
    ├── CloningUnavailableError      [501] cloning_unavailable: the codec here is decode-only
    ├── NotServedError               [501] not_implemented: a Cartesia endpoint this server lacks
    └── ServiceUnavailableError      [503] service_unavailable, retryable (starting, draining)
        └── AuthBackendUnavailableError  [503] the API-key store (Redis) cannot be reached

plus ``api.protocol.ProtocolError`` and its subclasses (InvalidJsonError, MissingFieldError,
InvalidFieldError, UnsupportedVoiceModeError, EmptyTranscriptError; all 400, re-exported here), and
the errors of the packages below, mapped in ``_TABLE`` (engine, voices, codec_worker, api.audio,
api.text: 400 ``unsupported_language`` for phonemes in a language eSpeak NG lacks, 501
``phonemes_unavailable`` without eSpeak NG). Anything else is a bug: 500 ``internal_error`` with a generic message, logged with its
traceback, never shown to the client.

Echo bounds: a message is cut to ``MAX_ERROR_MESSAGE_CHARS`` (it may quote a client's value), and
an event's ``context_id`` longer than ``MAX_CONTEXT_ID_CHARS`` is replaced by
``UNROUTABLE_CONTEXT_ID`` (""), so no error ever repeats a megabyte the client sent.

Retry advice (the SDKs retry 408/409/429/5xx twice by default, protocol section 6): a retryable
error gets ``retry-after`` (seconds) and ``retry-after-ms``; every other error gets
``x-should-retry: false``, so a bad request or a concurrency limit is not sent three times.

    error_body(exc, request_id)              -> {"error_code","title","message","request_id"}
    error_response(exc, request_id)          -> starlette JSONResponse with the headers above
    error_event(exc, request_id, context_id) -> api.protocol.events.ErrorEvent (SSE / WebSocket)
    ws_close_code(exc)                       -> WebSocket close code for errors that end a socket
    is_mapped(exc)                           -> whether the table describes exc (else: a bug)
"""

from __future__ import annotations

import dataclasses
import logging
import math
import uuid
from dataclasses import dataclass
from typing import ClassVar, Iterable, Optional

from starlette.responses import JSONResponse

from api.audio.errors import AudioFormatError
from api.protocol.events import ErrorEvent
from api.protocol.errors import (
    EmptyTranscriptError,
    InvalidFieldError,
    InvalidJsonError,
    MessageTooLargeError,
    MissingFieldError,
    ProtocolError,
    UnsupportedVoiceModeError,
)
from api.protocol.requests import MAX_CONTEXT_ID_CHARS, UNROUTABLE_CONTEXT_ID
from api.text.errors import (
    InvalidMarkupError,
    NormalizationModeError,
    PhonemesUnavailableError,
    TextError,
    UnsupportedPhonemeLanguageError,
)
from codec_worker import errors as codec_errors
from engine import errors as engine_errors
from voices import errors as voice_errors

logger = logging.getLogger(__name__)

__all__ = [
    "ApiError",
    "AuthBackendUnavailableError",
    "AuthenticationError",
    "BadRequestError",
    "ContextClosedError",
    "EmptyTranscriptError",
    "ErrorInfo",
    "InvalidFieldError",
    "InvalidJsonError",
    "MAX_ERROR_MESSAGE_CHARS",
    "MessageTooLargeError",
    "MethodNotAllowedError",
    "MissingFieldError",
    "NotFoundError",
    "NotServedError",
    "PermissionDeniedError",
    "PronouncedTextTooLongError",
    "ProtocolError",
    "RateLimitedError",
    "RequestTimeoutError",
    "RequestTooLargeError",
    "ServiceUnavailableError",
    "TooManyContextsError",
    "TranscriptTooLongError",
    "UnknownModelError",
    "UnsupportedVoiceModeError",
    "describe_error",
    "error_body",
    "error_event",
    "error_response",
    "is_mapped",
    "new_request_id",
    "ws_close_code",
]

INTERNAL_ERROR_MESSAGE = "The server hit an unexpected error while handling this request."
#: Longest error message sent; the rest is cut (messages quote values, and a value may be huge).
MAX_ERROR_MESSAGE_CHARS = 1024
#: Longest request id echoed (server-made: a uuid, or "<connection uuid>:<context_id>").
_MAX_REQUEST_ID_CHARS = 37 + MAX_CONTEXT_ID_CHARS


def new_request_id() -> str:
    """A fresh request id (uuid4 string), for error bodies, events and log lines."""
    return str(uuid.uuid4())


# --- gateway errors -----------------------------------------------------------------------------


class ApiError(Exception):
    """A gateway-level error; the class says status, code and title, the instance the message.

    retry_after_s: when set, the error is retryable after that many seconds (``retry-after``).
    """

    status_code: ClassVar[int] = 400
    default_error_code: ClassVar[str] = "invalid_request"
    title: ClassVar[str] = "Invalid request"
    retryable: ClassVar[bool] = False
    default_retry_after_s: ClassVar[Optional[float]] = None

    def __init__(
        self, message: str, *, error_code: Optional[str] = None, retry_after_s: Optional[float] = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.error_code = error_code or self.default_error_code
        self.retry_after_s = retry_after_s if retry_after_s is not None else self.default_retry_after_s


class BadRequestError(ApiError):
    """A request value the gateway cannot use; the message names the field."""


class UnknownModelError(BadRequestError):
    """``model_id`` is not one this server accepts (see Settings.model_ids)."""

    default_error_code = "model_not_found"
    title = "Invalid model"

    def __init__(self, model_id: str, accepted: Iterable[str] = ()) -> None:
        accepted = list(accepted)
        message = f"The model is not valid, make sure it is a valid model ID. Got {model_id!r}"
        message += f"; this server accepts: {', '.join(accepted)}." if accepted else "."
        super().__init__(message)
        self.model_id = model_id


class TranscriptTooLongError(BadRequestError):
    default_error_code = "transcript_too_long"
    title = "Transcript too long"

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(
            f"transcript: {length} characters is over the limit of {limit}; split the text into several requests"
        )
        self.length = length
        self.limit = limit


class PronouncedTextTooLongError(TranscriptTooLongError):
    """The text is within GEPARD_MAX_TRANSCRIPT_CHARS as sent, but not once its pronunciation
    dictionary replaced keys by their aliases (``what``: "transcript" for a whole HTTP request,
    "sentence" for one segment of a WebSocket context)."""

    title = "Transcript too long after its pronunciation dictionary"

    def __init__(self, what: str, sent: int, pronounced: int, limit: int, dict_id: str) -> None:
        advice = ("split the text into several requests" if what == "transcript" else
                  "send shorter sentences")
        BadRequestError.__init__(
            self,
            f"{what}: {sent} characters read as {pronounced} after pronunciation dictionary {dict_id!r}, "
            f"over the limit of {limit} (GEPARD_MAX_TRANSCRIPT_CHARS, which applies to the text after the "
            f"dictionary too); shorten the dictionary's aliases or {advice}")
        self.length = pronounced
        self.limit = limit
        self.dict_id = dict_id


class ContextClosedError(ApiError):
    """Input arrived for a WebSocket context that already got ``continue: false`` (or finished)."""

    default_error_code = "context_closed"
    title = "Context has closed"

    def __init__(self, context_id: str, refused: bool = False) -> None:
        why = ("its id was refused or failed earlier (see that error)" if refused
               else "it received continue=false or finished")
        super().__init__(f"context {context_id!r} has closed ({why}); use a new context_id")
        self.context_id = context_id


class AuthenticationError(ApiError):
    """No credential, or one that is neither a known API key nor a valid access token."""

    status_code = 401
    default_error_code = "invalid_credentials"
    title = "Unauthorized"


class PermissionDeniedError(ApiError):
    status_code = 403
    default_error_code = "permission_denied"
    title = "Forbidden"


class NotFoundError(ApiError):
    status_code = 404
    default_error_code = "not_found"
    title = "Not found"


class RequestTimeoutError(ApiError):
    """A request head or body that did not arrive in time (api/http_protocol.py, clone uploads)."""

    status_code = 408
    default_error_code = "request_timeout"
    title = "Request timeout"


class MethodNotAllowedError(ApiError):
    """The path is served, but not with this method; ``allow`` lists the methods that are."""

    status_code = 405
    default_error_code = "method_not_allowed"
    title = "Method not allowed"

    def __init__(self, message: str, allow: str = "") -> None:
        super().__init__(message)
        self.allow = allow


class RequestTooLargeError(ApiError):
    """The body is over the route's limit; the message states the limit."""

    status_code = 413
    default_error_code = "request_too_large"
    title = "Request too large"


class RateLimitedError(ApiError):
    """Over a concurrency limit. Not retried by the SDKs unless ``retry_after_s`` is given."""

    status_code = 429
    default_error_code = "concurrency_limited"
    title = "Too many requests"


class TooManyContextsError(RateLimitedError):
    default_error_code = "too_many_contexts"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"this WebSocket already has {limit} active contexts, the most allowed; wait for one to finish "
            "or open another connection"
        )
        self.limit = limit


class CloningUnavailableError(ApiError):
    """This server's codec is the torch decoder (GEPARD_CODEC_IMPL), which cannot encode clips."""

    status_code = 501
    default_error_code = "cloning_unavailable"
    title = "Voice cloning unavailable"


class NotServedError(ApiError):
    """A Cartesia endpoint the SDKs call that this server does not implement (api/routes/not_served.py)."""

    status_code = 501
    default_error_code = "not_implemented"
    title = "Not implemented"


class ServiceUnavailableError(ApiError):
    """The server cannot serve right now (starting up, draining); retry shortly."""

    status_code = 503
    default_error_code = "service_unavailable"
    title = "Service unavailable"
    retryable = True
    default_retry_after_s = 1.0


class AuthBackendUnavailableError(ServiceUnavailableError):
    default_error_code = "auth_unavailable"


# --- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Rule:
    status_code: int
    error_code: str
    title: str
    retry_after_s: Optional[float] = None  # set means retryable

    @property
    def retryable(self) -> bool:
        return self.retry_after_s is not None


_E, _V, _C = engine_errors, voice_errors, codec_errors

#: Errors of the packages below ``api/``. The most specific class in an exception's MRO wins.
_TABLE: dict[type[BaseException], _Rule] = {
    # engine
    _E.InvalidRequestError: _Rule(400, "invalid_request", "Invalid request"),
    _E.OverloadedError: _Rule(503, "overloaded", "Server overloaded", retry_after_s=1.0),
    _E.GenerationError: _Rule(500, "generation_failed", "Generation failed"),
    _E.EngineDeadError: _Rule(503, "engine_unavailable", "Engine unavailable", retry_after_s=5.0),
    _E.CheckpointError: _Rule(503, "engine_unavailable", "Engine unavailable", retry_after_s=5.0),
    _E.EngineError: _Rule(500, "engine_error", "Engine error"),
    # voices
    _V.VoiceNotFoundError: _Rule(404, "voice_not_found", "Voice not found"),
    _V.VoiceExistsError: _Rule(409, "voice_exists", "Voice already exists"),
    _V.ReadOnlyVoiceError: _Rule(403, "voice_read_only", "Voice is read-only"),
    _V.InvalidCursorError: _Rule(400, "invalid_cursor", "Invalid cursor"),
    _V.InvalidVoiceError: _Rule(400, "invalid_voice", "Invalid voice"),
    _V.VoiceStoreUnavailableError: _Rule(503, "voice_store_unavailable", "Voice store unavailable", retry_after_s=1.0),
    _V.VoiceCloningError: _Rule(500, "voice_cloning_failed", "Voice cloning failed"),
    # the voice was made by another checkpoint and cannot be recomputed (voices/recompute.py): the
    # state of the voice, not the request, is at fault, and no retry helps
    _V.VoiceIncompatibleError: _Rule(409, "voice_incompatible", "Voice made for another model"),
    _V.ClipTooLargeError: _Rule(400, "clip_too_large", "Clip too large"),
    _V.UnsupportedAudioFormatError: _Rule(400, "unsupported_audio_format", "Unsupported audio format"),
    _V.ClipTooShortError: _Rule(400, "clip_too_short", "Invalid clip"),
    _V.ClipSilentError: _Rule(400, "clip_silent", "Invalid clip"),
    _V.CorruptClipError: _Rule(400, "corrupt_clip", "Invalid clip"),
    _V.InvalidClipError: _Rule(400, "invalid_clip", "Invalid clip"),
    _V.PronunciationDictNotFoundError: _Rule(404, "pronunciation_dict_not_found", "Pronunciation dictionary not found"),
    _V.IpaNotSupportedError: _Rule(400, "ipa_not_supported", "IPA pronunciations not supported"),
    _V.InvalidPronunciationDictError: _Rule(400, "invalid_pronunciation_dict", "Invalid pronunciation dictionary"),
    _V.VoiceStoreError: _Rule(500, "voice_store_error", "Voice store error"),
    # codec worker
    _C.CodecLoadError: _Rule(503, "codec_unavailable", "Codec unavailable", retry_after_s=5.0),
    _C.CodecClosedError: _Rule(503, "codec_unavailable", "Codec unavailable", retry_after_s=1.0),
    _C.CodecError: _Rule(500, "audio_decoding_failed", "Audio decoding failed"),
    # audio and text paths
    AudioFormatError: _Rule(400, "invalid_output_format", "Invalid output format"),
    NormalizationModeError: _Rule(400, "invalid_normalization", "Invalid request"),
    InvalidMarkupError: _Rule(400, "invalid_markup", "Invalid transcript tag"),
    UnsupportedPhonemeLanguageError: _Rule(400, "unsupported_language", "Unsupported language"),
    # this install cannot read phonemes at all (no eSpeak NG library): the server lacks the feature
    PhonemesUnavailableError: _Rule(501, "phonemes_unavailable", "Phoneme timestamps unavailable"),
    TextError: _Rule(400, "invalid_text", "Invalid request"),
}

_INTERNAL = _Rule(500, "internal_error", "Internal server error")


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """What the client is told about one exception."""

    status_code: int
    error_code: str
    title: str
    message: str
    retryable: bool
    retry_after_s: Optional[float]


def _rule_for(exc: BaseException) -> Optional[_Rule]:
    for cls in type(exc).__mro__:
        rule = _TABLE.get(cls)
        if rule is not None:
            return rule
    return None


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = f"... ({len(text) - limit} more characters)"
    return text[: limit - len(cut)] + cut


def is_mapped(exc: BaseException) -> bool:
    """Whether this table describes ``exc`` (anything else is a bug: 500 ``internal_error``)."""
    return isinstance(exc, (ApiError, ProtocolError)) or _rule_for(exc) is not None


def describe_error(exc: BaseException, request_id: Optional[str] = None, *, log: bool = True) -> ErrorInfo:
    """The table lookup behind error_body / error_response / error_event.

    Unknown exceptions are logged here with their traceback (once per call) and described
    generically, so internals never reach the client; mapped 5xx errors are one WARNING line.
    ``log=False`` logs nothing: the caller counts or reports the error its own way. The message is
    at most MAX_ERROR_MESSAGE_CHARS long.
    """
    info = _describe(exc, request_id, log)
    message = _bounded(info.message, MAX_ERROR_MESSAGE_CHARS)
    try:
        message.encode("utf-8")
    except UnicodeEncodeError:  # a quoted lone surrogate would fail the response itself
        message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return info if message is info.message else dataclasses.replace(info, message=message)


def _describe(exc: BaseException, request_id: Optional[str], log: bool) -> ErrorInfo:
    if isinstance(exc, ApiError):
        retry = exc.retry_after_s
        retryable = exc.retryable or retry is not None
        return ErrorInfo(exc.status_code, exc.error_code, exc.title, exc.message, retryable, retry)
    if isinstance(exc, ProtocolError):
        return ErrorInfo(exc.status_code, exc.error_code, exc.title, exc.message, False, None)
    rule = _rule_for(exc)
    if rule is None:
        if log:
            logger.error("request %s failed with an unexpected error", request_id or "-", exc_info=exc)
        rule = _INTERNAL
        message = INTERNAL_ERROR_MESSAGE + (f" Request id: {request_id}." if request_id else "")
    else:
        message = str(exc) or rule.title
        if log and rule.status_code >= 500:
            logger.warning("request %s failed: %s: %s", request_id or "-", type(exc).__name__, message)
    return ErrorInfo(rule.status_code, rule.error_code, rule.title, message, rule.retryable, rule.retry_after_s)


def error_body(exc: BaseException, request_id: str) -> dict:
    """Cartesia's JSON error body: ``{"error_code", "title", "message", "request_id"}``."""
    info = describe_error(exc, request_id)
    return {"error_code": info.error_code, "title": info.title, "message": info.message, "request_id": request_id}


def _retry_headers(info: ErrorInfo) -> dict[str, str]:
    if not info.retryable:
        return {"x-should-retry": "false"}
    seconds = info.retry_after_s if info.retry_after_s is not None else 1.0
    return {"retry-after": str(max(1, math.ceil(seconds))), "retry-after-ms": str(int(round(seconds * 1000)))}


def error_response(exc: BaseException, request_id: str) -> JSONResponse:
    """The HTTP error response: status, JSON body, retry headers and ``x-request-id``."""
    info = describe_error(exc, request_id)
    body = {"error_code": info.error_code, "title": info.title, "message": info.message, "request_id": request_id}
    headers = {"x-request-id": request_id, **_retry_headers(info)}
    if isinstance(exc, MethodNotAllowedError) and exc.allow:
        headers["allow"] = exc.allow  # RFC 9110: a 405 says which methods the path has
    return JSONResponse(body, status_code=info.status_code, headers=headers)


def error_event(exc: BaseException, request_id: str, context_id: Optional[str] = None) -> ErrorEvent:
    """The in-band error (SSE ``event: error`` / WebSocket message); ``done`` is true.

    ``context_id`` defaults to the one a ProtocolError recovered from the message.
    """
    info = describe_error(exc, request_id)
    if context_id is None and isinstance(exc, ProtocolError):
        context_id = exc.context_id
    if context_id is not None and len(context_id) > MAX_CONTEXT_ID_CHARS:
        context_id = UNROUTABLE_CONTEXT_ID  # never echo an over-long id (callers bound it already)
    request_id = _bounded(request_id, _MAX_REQUEST_ID_CHARS)
    return ErrorEvent(
        status_code=info.status_code,
        error_code=info.error_code,
        title=info.title,
        message=info.message,
        request_id=request_id,
        context_id=context_id,
    )


#: RFC 6455 close codes for errors that end a whole WebSocket.
WS_CLOSE_POLICY_VIOLATION = 1008
WS_CLOSE_INTERNAL_ERROR = 1011
WS_CLOSE_TRY_AGAIN_LATER = 1013


def ws_close_code(exc: BaseException) -> int:
    """Close code for an error that ends the socket: 1013 when retrying later helps (429, 503),
    1011 for other server faults, 1008 for the client's (bad credentials, bad frames)."""
    info = describe_error(exc)
    if info.retryable or info.status_code == 429:
        return WS_CLOSE_TRY_AGAIN_LATER
    if info.status_code >= 500:
        return WS_CLOSE_INTERNAL_ERROR
    return WS_CLOSE_POLICY_VIOLATION
