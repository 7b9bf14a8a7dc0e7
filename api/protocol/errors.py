"""Errors of the wire layer: a client message that cannot be served as sent.

    ProtocolError                  400 invalid_request: names the field path and the problem
    ├── InvalidJsonError           400 invalid_json: not JSON, not an object, too deep, bad Unicode
    ├── MessageTooLargeError       413 request_too_large: a WebSocket message over its bound
    ├── MissingFieldError          400 missing_field
    ├── InvalidFieldError          400 invalid_request: wrong type, out of range, unsupported
    ├── UnsupportedVoiceModeError  400 voice_embedding_not_supported
    └── EmptyTranscriptError       400 empty_transcript

``api/errors.py`` turns each into an HTTP body or an in-band WebSocket error event.
"""

from __future__ import annotations

from typing import ClassVar, Optional

__all__ = [
    "EmptyTranscriptError",
    "InvalidFieldError",
    "InvalidJsonError",
    "MessageTooLargeError",
    "MissingFieldError",
    "ProtocolError",
    "UnsupportedVoiceModeError",
]


class ProtocolError(ValueError):
    """A client message that cannot be served as sent (HTTP 400 / an in-band error event).

    message: one human sentence naming the field path and the problem.
    field: dotted path of the (first) offending field ("output_format.sample_rate"), None for the
        body as a whole.
    error_code: machine-readable code for the error body ("invalid_request", "invalid_json", ...).
    context_id: the WebSocket message's context_id when it could be recovered, else None.
    """

    status_code: ClassVar[int] = 400
    title: ClassVar[str] = "Invalid request"
    retryable: ClassVar[bool] = False
    default_error_code: ClassVar[str] = "invalid_request"

    def __init__(
        self,
        message: str,
        *,
        field: Optional[str] = None,
        error_code: Optional[str] = None,
        context_id: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.error_code = error_code or self.default_error_code
        self.context_id = context_id

    def with_context_id(self, context_id: Optional[str]) -> "ProtocolError":
        """Attach the recovered context_id (keeps an id already set); returns self."""
        if self.context_id is None:
            self.context_id = context_id
        return self


class InvalidJsonError(ProtocolError):
    """The body or message is not JSON, or not a JSON object."""

    default_error_code = "invalid_json"
    title = "Invalid JSON"


class MessageTooLargeError(ProtocolError):
    """A WebSocket message over ``MAX_WS_MESSAGE_BYTES`` (HTTP bodies get the route's 413)."""

    status_code = 413
    default_error_code = "request_too_large"
    title = "Request too large"


class MissingFieldError(ProtocolError):
    """A required field is absent (or null)."""

    default_error_code = "missing_field"


class InvalidFieldError(ProtocolError):
    """A field has the wrong type or an out-of-range / unsupported value."""


class UnsupportedVoiceModeError(ProtocolError):
    """``voice.mode`` is not "id" (embeddings are not accepted, as in Cartesia's 2026-08-14 API)."""

    default_error_code = "voice_embedding_not_supported"
    title = "Unsupported voice"


class EmptyTranscriptError(ProtocolError):
    """A /tts/bytes or /tts/sse transcript has no non-whitespace character."""

    default_error_code = "empty_transcript"
