"""Wire models of what clients send: TTS bodies (bytes, SSE), WebSocket messages, access-token bodies.

Parsing is lenient the way Cartesia's is (protocol sections 3 and 9.5):

- unknown fields are accepted and ignored (their names are logged once per request, at DEBUG);
- ``language: null`` is accepted; ``__experimental_controls`` inside ``voice`` is accepted and ignored;
- ``voice`` may be a bare id string, ``{"id": ...}`` or ``{"mode": "id", "id": ...}``.

and strict where a wrong value would silently change the result: JSON types are checked (no
``"3"`` -> 3, no ``true`` -> 1), ranges are enforced, and ``output_format`` goes through
``api.audio.formats.OutputFormat``. SSE and WebSocket accept ``container: "raw"`` only (the SDK types
allow nothing else there, and their chunks carry bare base64 samples with no container header).

Every invalid input raises one ``ProtocolError`` whose message names the field path and the problem,
e.g. ``generation_config.speed: must be between 0.6 and 1.5, got 2.0`` or ``transcript: field required``;
several problems are joined with ``"; "``. Entry points:

    parse_tts_request(body, sse=False) -> TtsRequest | TtsSseRequest     POST /tts/bytes, /tts/sse
    parse_ws_message(raw) -> WsGenerationRequest | WsCancelRequest       one WebSocket text frame
    parse_access_token_request(body) -> AccessTokenRequest               POST /access-token

``ProtocolError.context_id`` carries the message's ``context_id`` whenever one can be recovered (even
from malformed JSON), so the WebSocket error event can be routed to the right context. A WebSocket
message whose ``context_id`` cannot be echoed (absent, not a non-empty string, longer than
``MAX_CONTEXT_ID_CHARS``, or not encodable as UTF-8) gets ``UNROUTABLE_CONTEXT_ID`` (``""``): the
error event still carries the ``context_id`` key every WebSocket message must have (pipecat indexes
it), matches no context, and never repeats an over-long id. A truncated id is deliberately not used:
it could equal the id of another, live context on the socket.

Every JSON entry point (``load_json``: these three and the voices PATCH body) is bounded before
parsing: at most ``MAX_JSON_DEPTH`` nested arrays/objects (a linear scan, brackets inside strings do
not count), and WebSocket messages at most ``MAX_WS_MESSAGE_BYTES`` (HTTP bodies are capped when
read, ``api/routes/_common.py``). Strings must be valid Unicode: an unpaired surrogate escape
(``"\\ud800"``) is refused, since nothing could send it back as UTF-8.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from typing import Annotated, Any, ClassVar, Literal, Mapping, Optional, Union

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from api.audio.errors import AudioFormatError
from api.audio.formats import Container, OutputFormat
from api.text.speech import is_blank
from engine.requests import SAMPLING_BOUNDS, SamplingParams

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_BUFFER_DELAY_MS",
    "LEGACY_SPEED_FACTORS",
    "MAX_CONTEXT_ID_CHARS",
    "MAX_JSON_DEPTH",
    "MAX_VOICE_ID_CHARS",
    "MAX_WS_MESSAGE_BYTES",
    "UNROUTABLE_CONTEXT_ID",
    "AccessTokenRequest",
    "EmptyTranscriptError",
    "GenerationConfig",
    "InvalidFieldError",
    "InvalidJsonError",
    "MessageTooLargeError",
    "MissingFieldError",
    "ProtocolError",
    "TokenGrantsSpec",
    "TtsRequest",
    "TtsSseRequest",
    "UnsupportedVoiceModeError",
    "VoiceSpec",
    "WsCancelRequest",
    "WsGenerationRequest",
    "WsMessage",
    "load_json",
    "parse_access_token_request",
    "parse_tts_request",
    "parse_ws_message",
]

DEFAULT_MAX_BUFFER_DELAY_MS = 3000
MAX_BUFFER_DELAY_MS = 5000
MAX_CONTEXT_ID_CHARS = 512
#: Longest ``voice.id``. Ours and Cartesia's are UUIDs (36 characters); generous, and the bound the
#: OpenAI route puts on its ``voice`` (api/protocol/openai.py), so a voice id quoted in a log line
#: or an error stays short.
MAX_VOICE_ID_CHARS = 256
#: Deepest nesting of arrays/objects accepted in any JSON body or message. A Cartesia message needs
#: 3 (``output_format`` inside the message, ``__experimental_controls`` lists inside ``voice``);
#: Python's json module overflows its recursion limit near 1,000.
MAX_JSON_DEPTH = 32
#: Largest WebSocket message parsed (the same bound as an HTTP JSON body); the server's own frame
#: limit (uvicorn's ``ws_max_size``, 16 MiB by default) is far above what a message needs.
MAX_WS_MESSAGE_BYTES = 1 << 20
#: ``context_id`` of a WebSocket error about a message whose own id cannot be echoed (module docstring).
UNROUTABLE_CONTEXT_ID = ""
#: Longest piece of a client's value quoted back in an error message.
MAX_ECHOED_VALUE_CHARS = 80
#: Longest language / locale code (BCP 47 tags in practice stay under 35 characters).
MAX_LANGUAGE_CODE_CHARS = 35
MAX_TOKEN_EXPIRES_IN_S = 3600
#: Legacy top-level ``speed`` -> speed factor (same scale as ``generation_config.speed``).
LEGACY_SPEED_FACTORS: dict[str, float] = {"slow": 0.8, "normal": 1.0, "fast": 1.25}

# ISO 639 code with optional subtags: "en", "pt-BR", "zh_Hans" (same rule as api/text/normalization.py)
_LANGUAGE_RE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*")
_CONTEXT_ID_IN_TEXT_RE = re.compile(r'"context_id"\s*:\s*("(?:[^"\\]|\\.)*")')


# --- errors -------------------------------------------------------------------------------------


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


# --- pydantic error -> one sentence -------------------------------------------------------------

_CUSTOM = "gepard_invalid"


def _invalid(message: str, *, suffix: Optional[str] = None, error_code: Optional[str] = None) -> PydanticCustomError:
    """A validation error whose message is final (no pydantic wording). ``suffix`` extends the
    field path ("voice" + "id" -> "voice.id"); ``error_code`` overrides "invalid_request"."""
    return PydanticCustomError(
        _CUSTOM, "{message}", {"message": message, "suffix": suffix or "", "error_code": error_code or ""}
    )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _path(loc: tuple[Union[str, int], ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def _describe(err: Mapping[str, Any]) -> tuple[str, str, type[ProtocolError], str]:
    """One pydantic error -> (field path, problem, error class, error_code)."""
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    path = _path(tuple(err["loc"]))
    if kind == _CUSTOM:
        if ctx.get("suffix"):
            path = f"{path}.{ctx['suffix']}" if path else ctx["suffix"]
        code = ctx.get("error_code") or None
        cls: type[ProtocolError] = InvalidFieldError
        if code == UnsupportedVoiceModeError.default_error_code:
            cls = UnsupportedVoiceModeError
        elif code == EmptyTranscriptError.default_error_code:
            cls = EmptyTranscriptError
        elif code == MissingFieldError.default_error_code:
            cls = MissingFieldError
        return path, ctx["message"], cls, code or cls.default_error_code
    if kind == "missing":
        return path, "field required", MissingFieldError, MissingFieldError.default_error_code
    if value is None and kind.endswith("_type"):
        return path, "field required, got null", MissingFieldError, MissingFieldError.default_error_code
    got = _json_type(value) if not isinstance(value, float) else repr(value)
    problems = {
        "string_type": f"expected a string, got {got}",
        "int_type": f"expected an integer, got {got}",
        "int_parsing": f"expected an integer, got {got}",
        "int_from_float": f"expected an integer, got {value!r}",
        "float_type": f"expected a number, got {got}",
        "float_parsing": f"expected a number, got {got}",
        "bool_type": f"expected true or false, got {got}",
        "bool_parsing": f"expected true or false, got {got}",
        "finite_number": "must be a finite number",
        "model_type": f"expected an object, got {got}",
        "model_attributes_type": f"expected an object, got {got}",
        "dict_type": f"expected an object, got {got}",
        "literal_error": f"{_shown(value)} is not supported; expected {ctx.get('expected')}",
        "greater_than_equal": f"must be >= {ctx.get('ge')}, got {value!r}",
        "greater_than": f"must be > {ctx.get('gt')}, got {value!r}",
        "less_than_equal": f"must be <= {ctx.get('le')}, got {value!r}",
        "less_than": f"must be < {ctx.get('lt')}, got {value!r}",
    }
    problem = problems.get(kind, err.get("msg", "invalid value"))
    return path, problem, InvalidFieldError, InvalidFieldError.default_error_code


def _to_protocol_error(exc: ValidationError, context_id: Optional[str]) -> ProtocolError:
    """All of a ValidationError's problems -> one ProtocolError (class and code of the first)."""
    parts: list[str] = []
    first: Optional[tuple[str, str, type[ProtocolError], str]] = None
    for err in exc.errors(include_url=False):
        described = _describe(err)
        first = first or described
        path, problem = described[0], described[1]
        text = f"{path}: {problem}" if path else problem
        if text not in parts:
            parts.append(text)
    assert first is not None  # a ValidationError always has at least one error
    return first[2]("; ".join(parts), field=first[0] or None, error_code=first[3], context_id=context_id)


# --- field types --------------------------------------------------------------------------------


def _json_int(value: object) -> object:
    """Integral JSON numbers (3000.0 from some clients) -> int; booleans are not integers."""
    if isinstance(value, bool):
        raise _invalid(f"expected an integer, got {_json_type(value)}")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _json_float(value: object) -> object:
    if isinstance(value, bool):
        raise _invalid(f"expected a number, got {_json_type(value)}")
    return value


JsonInt = Annotated[int, BeforeValidator(_json_int), Strict()]
JsonFloat = Annotated[float, BeforeValidator(_json_float), Strict()]
JsonBool = Annotated[bool, Strict()]
JsonStr = Annotated[str, Strict()]


def _range(lo: float, hi: float) -> Any:
    """After-validator: ``lo <= v <= hi`` with one precise message."""

    def check(value: Any) -> Any:
        if value is not None and not lo <= value <= hi:
            raise _invalid(f"must be between {lo:g} and {hi:g}, got {_shown(value)}")
        return value

    return AfterValidator(check)


def _bounded(name: str) -> Any:
    """After-validator: the engine's own range for sampling knob ``name`` (SAMPLING_BOUNDS), so the
    wire, the settings defaults and both engines accept exactly the same values."""
    bound = SAMPLING_BOUNDS[name]

    def check(value: Any) -> Any:
        problem = None if value is None else bound.problem(value)
        if problem is not None:
            raise _invalid(problem)
        return value

    return AfterValidator(check)


def _non_empty() -> Any:
    def check(value: Any) -> Any:
        if value is not None and not value:
            raise _invalid("must not be empty")
        return value

    return AfterValidator(check)


def _shown(value: Any, limit: int = MAX_ECHOED_VALUE_CHARS) -> str:
    """A client's value quoted in an error message: strings and numbers as ``repr`` cut to about
    ``limit`` characters, arrays and objects by their JSON type only."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} characters)"
    if isinstance(value, (list, tuple, Mapping)):
        return _json_type(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**21:
        digits = str(abs(value))  # 1e300 arrives as a 301-digit integer: show its magnitude
        return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _language_code(value: Optional[str]) -> Optional[str]:
    if value is not None and (len(value) > MAX_LANGUAGE_CODE_CHARS or not _LANGUAGE_RE.fullmatch(value)):
        raise _invalid(f"{_shown(value)} is not a language code; expected an ISO 639-1 code such as 'en' or 'pt-BR'")
    return value


# --- shared base --------------------------------------------------------------------------------


class WireModel(BaseModel):
    """Base of every client message: unknown fields are kept aside (``model_extra``) and ignored."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True, allow_inf_nan=False)

    def ignored_fields(self) -> list[str]:
        """Dotted names of every unknown field, this model and its nested models."""
        names = list((self.model_extra or {}).keys())
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, WireModel):
                names += [f"{name}.{sub}" for sub in value.ignored_fields()]
        return names


class VoiceSpec(WireModel):
    """``voice``: a bare id string, ``{"id": ...}`` or ``{"mode": "id", "id": ...}``.

    ``{"mode": "embedding", ...}`` is rejected with ``voice_embedding_not_supported``;
    ``__experimental_controls`` (the 2024-11-13 controls LiveKit sends) is accepted and ignored.
    """

    id: str
    mode: Literal["id"] = "id"
    experimental_controls: Optional[Any] = Field(default=None, alias="__experimental_controls")

    @model_validator(mode="before")
    @classmethod
    def _shape(cls, value: Any) -> Any:
        if isinstance(value, VoiceSpec):
            return value
        if isinstance(value, str):
            value = {"id": value}
        if value is None:
            raise _invalid("field required, got null", error_code=MissingFieldError.default_error_code)
        if not isinstance(value, Mapping):
            raise _invalid(
                f"expected a voice id string or an object {{\"mode\": \"id\", \"id\": ...}}, got {_json_type(value)}"
            )
        mode = value.get("mode", "id")
        if mode == "embedding":
            raise _invalid(
                "voice embeddings are not supported; reference a stored voice with "
                "{\"mode\": \"id\", \"id\": \"<voice id>\"} (clone one with POST /voices/clone)",
                suffix="mode",
                error_code=UnsupportedVoiceModeError.default_error_code,
            )
        if mode is not None and mode != "id":
            raise _invalid(f"{_shown(mode)} is not supported; expected 'id'", suffix="mode")
        voice_id = value.get("id")
        if voice_id is None:
            raise _invalid("field required", suffix="id", error_code=MissingFieldError.default_error_code)
        if not isinstance(voice_id, str):
            raise _invalid(f"expected a string, got {_json_type(voice_id)}", suffix="id")
        if not voice_id.strip():
            raise _invalid("must not be empty", suffix="id")
        if len(voice_id) > MAX_VOICE_ID_CHARS:
            raise _invalid(f"must be at most {MAX_VOICE_ID_CHARS} characters (voice ids are UUIDs), got "
                           f"{len(voice_id)}", suffix="id")
        return {**value, "mode": "id"}


class GenerationConfig(WireModel):
    """``generation_config``: speed factor 0.6–1.5, volume factor 0.5–2.0, emotion name. The speed
    is honoured by time-stretching the speech at its pitch (api/audio/tempo.py)."""

    speed: Annotated[Optional[JsonFloat], _range(0.6, 1.5)] = None
    volume: Annotated[Optional[JsonFloat], _range(0.5, 2.0)] = None
    emotion: Optional[JsonStr] = None


def _parse_output_format(value: Any) -> OutputFormat:
    if isinstance(value, OutputFormat):
        return value
    if not isinstance(value, Mapping):
        raise _invalid(f"expected an object {{\"container\", \"encoding\", \"sample_rate\"}}, got {_json_type(value)}")
    if value.get("container") is None:
        raise _invalid("field required", suffix="container", error_code=MissingFieldError.default_error_code)
    try:
        return OutputFormat.parse(
            value.get("container"), value.get("encoding"), value.get("sample_rate"), value.get("bit_rate")
        )
    except AudioFormatError as exc:
        # the message already names the field ("unsupported output_format.sample_rate 11025; ...")
        field = exc.field.split(".", 1)[1] if exc.field.startswith("output_format.") else None
        message = _strip_field_prefix(str(exc), exc.field)
        raise _invalid(message, suffix=field, error_code="invalid_output_format") from None


def _strip_field_prefix(message: str, field: str) -> str:
    """AudioFormatError wording -> ours: "unsupported output_format.x 5; expected ..." ->
    "5 is not supported; expected ...", "output_format.x is required ..." -> "field required ..."."""
    prefix = f"unsupported {field} "
    if message.startswith(prefix):
        value, _, rest = message[len(prefix):].partition("; ")
        return f"{value} is not supported" + (f"; {rest}" if rest else "")
    if message.startswith(f"{field} "):
        rest = message[len(field) + 1:]
        return "field required" + rest[len("is required"):] if rest.startswith("is required") else rest
    return message


WireOutputFormat = Annotated[OutputFormat, BeforeValidator(_parse_output_format)]


class _SynthesisFields(WireModel):
    """Fields shared by every request that synthesises (bytes, SSE, WebSocket generation)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    raw_only: ClassVar[Optional[str]] = None  # endpoint name when only container "raw" is allowed

    model_id: Annotated[JsonStr, _non_empty()]
    transcript: JsonStr
    voice: VoiceSpec
    output_format: WireOutputFormat
    language: Optional[JsonStr] = None
    locale: Optional[JsonStr] = None
    normalization: Optional[JsonStr] = None
    generation_config: Optional[GenerationConfig] = None
    speed: Optional[Literal["slow", "normal", "fast"]] = None
    pronunciation_dict_id: Optional[JsonStr] = None
    add_timestamps: JsonBool = False
    add_phoneme_timestamps: JsonBool = False
    use_normalized_timestamps: JsonBool = False
    duration: Optional[Any] = None  # legacy target length (Python 1.x/2.x); accepted and ignored

    # Gepard sampling extras (override the server's defaults; see to_sampling_params)
    # Every one is bounded on both sides (the ranges of engine.requests.SAMPLING_BOUNDS): an unbounded
    # value (top_k 2**63, temperature 1e300) used to reach a tensor in the engine's batch step.
    temperature: Annotated[Optional[JsonFloat], _bounded("temperature")] = None
    top_k: Annotated[Optional[JsonInt], _bounded("top_k")] = None
    seed: Annotated[Optional[JsonInt], _bounded("seed")] = None
    max_frames: Annotated[Optional[JsonInt], _bounded("max_frames")] = None
    cfg_scale: Annotated[Optional[JsonFloat], _bounded("cfg_scale")] = None
    cfg_frames: Annotated[Optional[JsonInt], _bounded("cfg_frames")] = None
    stop_threshold: Annotated[Optional[JsonFloat], _bounded("stop_threshold")] = None
    repetition_penalty: Annotated[Optional[JsonFloat], _bounded("repetition_penalty")] = None

    _SAMPLING_FIELDS: ClassVar[tuple[str, ...]] = (
        "temperature", "top_k", "seed", "max_frames", "cfg_scale", "cfg_frames", "stop_threshold",
        "repetition_penalty",
    )

    @field_validator("language", "locale")
    @classmethod
    def _check_language(cls, value: Optional[str]) -> Optional[str]:
        return _language_code(value)

    @field_validator("normalization")
    @classmethod
    def _check_normalization(cls, value: Optional[str]) -> Optional[str]:
        if value is None or value in ("auto", "off") or (
            len(value) <= MAX_LANGUAGE_CODE_CHARS and _LANGUAGE_RE.fullmatch(value)
        ):
            return value
        raise _invalid(f"{_shown(value)} is not supported; expected 'auto', 'off' or a locale code such as 'en-US'")

    @field_validator("output_format")
    @classmethod
    def _check_container(cls, value: OutputFormat) -> OutputFormat:
        if cls.raw_only and value.container is not Container.RAW:
            raise _invalid(
                f"{value.container.value!r} is not supported on {cls.raw_only}; expected 'raw' "
                "(chunks carry base64 samples without a container header)",
                suffix="container",
                error_code="invalid_output_format",
            )
        if not cls.raw_only and value.is_opus_packets:
            # one body of bare packets could not be split again: packets need chunk events
            raise _invalid(
                "'raw' opus packets are sent on /tts/sse and /tts/websocket only; on /tts/bytes ask for "
                "container 'ogg' (an Ogg Opus file)",
                suffix="container",
                error_code="invalid_output_format",
            )
        return value

    @model_validator(mode="after")
    def _check_locale(self) -> "_SynthesisFields":
        if self.language and self.locale:
            lang = self.language.replace("_", "-").split("-")[0].lower()
            loc = self.locale.replace("_", "-").split("-")[0].lower()
            if lang != loc:
                raise _invalid(
                    f"{self.locale!r} does not match language {self.language!r}; send one of them",
                    suffix="locale",
                )
        return self

    @property
    def voice_id(self) -> str:
        return self.voice.id

    @property
    def speed_factor(self) -> Optional[float]:
        """``generation_config.speed``, else the legacy ``speed`` mapped by LEGACY_SPEED_FACTORS,
        else None (the voice's own rate): the rate factor the speech is stretched to."""
        if self.generation_config is not None and self.generation_config.speed is not None:
            return self.generation_config.speed
        return None if self.speed is None else LEGACY_SPEED_FACTORS[self.speed]

    @property
    def effective_language(self) -> Optional[str]:
        """The language to speak: ``language``, else ``locale``, else None (server default)."""
        return self.language or self.locale

    def to_sampling_params(self, defaults: SamplingParams) -> SamplingParams:
        """The server's defaults with every Gepard extra this request sets laid over them."""
        overrides = {name: getattr(self, name) for name in self._SAMPLING_FIELDS if getattr(self, name) is not None}
        return dataclasses.replace(defaults, **overrides) if overrides else defaults


def _non_blank_transcript(value: str) -> str:
    if is_blank(value):  # zero-width and control characters count as whitespace here
        raise _invalid(
            "must contain at least one visible, non-whitespace character",
            error_code=EmptyTranscriptError.default_error_code,
        )
    return value


class TtsRequest(_SynthesisFields):
    """``POST /tts/bytes`` body (any container). SSE-only fields are accepted and ignored here."""

    save: JsonBool = False
    context_id: Optional[JsonStr] = None

    @field_validator("transcript")
    @classmethod
    def _check_transcript(cls, value: str) -> str:
        return _non_blank_transcript(value)


class TtsSseRequest(TtsRequest):
    """``POST /tts/sse`` body: like TtsRequest, container ``raw`` only; ``context_id`` is echoed
    on every event, so it is bounded like a WebSocket one (MAX_CONTEXT_ID_CHARS)."""

    raw_only = "/tts/sse"

    @field_validator("context_id")
    @classmethod
    def _check_context_id(cls, value: Optional[str]) -> Optional[str]:
        return value if value is None else _check_context_id(value)


class WsGenerationRequest(_SynthesisFields):
    """One generation message on ``/tts/websocket`` (the WS column of protocol section 3.1).

    ``transcript`` may be "" or whitespace (flush / end-of-input messages); ``continue`` (attribute
    ``continue_``) defaults to false, meaning this is the context's last input.
    """

    raw_only = "/tts/websocket"

    context_id: Annotated[JsonStr, _non_empty()]
    continue_: JsonBool = Field(default=False, alias="continue")
    flush: JsonBool = False
    max_buffer_delay_ms: Annotated[JsonInt, _range(0, MAX_BUFFER_DELAY_MS)] = DEFAULT_MAX_BUFFER_DELAY_MS

    @field_validator("context_id")
    @classmethod
    def _check_context_id(cls, value: str) -> str:
        return _check_context_id(value)

    @property
    def has_text(self) -> bool:
        """False for "" / whitespace-only transcripts (zero-width and control characters count as
        whitespace), which carry no speech (flush or close)."""
        return not is_blank(self.transcript)


def _check_context_id(value: str) -> str:
    if len(value) > MAX_CONTEXT_ID_CHARS:
        raise _invalid(f"must be at most {MAX_CONTEXT_ID_CHARS} characters, got {len(value)}")
    return value


class WsCancelRequest(WireModel):
    """``{"context_id": "...", "cancel": true}``: stop that context's output."""

    context_id: Annotated[JsonStr, _non_empty()]
    cancel: Literal[True] = True

    @field_validator("context_id")
    @classmethod
    def _check_context_id(cls, value: str) -> str:
        return _check_context_id(value)


WsMessage = Union[WsGenerationRequest, WsCancelRequest]


class TokenGrantsSpec(WireModel):
    """``grants`` of POST /access-token. Unknown grant names are dropped (not kept as extras), so
    ``model_dump()`` is always exactly ``{"tts", "stt", "agent"}``."""

    model_config = ConfigDict(extra="ignore")

    tts: JsonBool = False
    stt: JsonBool = False
    agent: JsonBool = False


class AccessTokenRequest(WireModel):
    """``POST /access-token`` body; every field is optional. Missing ``grants`` means tts only."""

    grants: Optional[TokenGrantsSpec] = None
    expires_in: Annotated[Optional[JsonInt], _range(1, MAX_TOKEN_EXPIRES_IN_S)] = None


# --- entry points -------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# +1 for an opening bracket, -1 for a closing one, 0 for every other byte (UTF-8 continuation
# bytes are >= 0x80, so never a bracket).
_BRACKET_STEPS = np.zeros(256, dtype=np.int8)
_BRACKET_STEPS[[ord("["), ord("{")]] = 1
_BRACKET_STEPS[[ord("]"), ord("}")]] = -1
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F]")


def _outside_strings(text: str) -> str:
    """``text`` without its JSON strings. Escaped backslashes, then escaped quotes, are dropped first,
    so every '"' left opens or closes a string; an unterminated string runs to the end. Outside a
    string a backslash is already a syntax error, and json.loads stops there, so what this makes of
    the text after one cannot matter."""
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    return "".join(unescaped.split('"')[0::2])


def _nesting_exceeds(text: str, limit: int) -> bool:
    """True when arrays/objects in ``text`` nest deeper than ``limit`` (brackets inside strings do
    not count). Linear and C-speed (str methods and numpy, about 10 ms for 1 MiB of brackets): a
    text with at most ``limit`` opening brackets returns at once; otherwise the running depth of the
    brackets outside strings is computed."""
    if text.count("[") + text.count("{") <= limit:
        return False
    outside = np.frombuffer(_outside_strings(text).encode("utf-8", "surrogatepass"), dtype=np.uint8)
    return int(np.cumsum(_BRACKET_STEPS[outside], dtype=np.int32).max(initial=0)) > limit


def _has_lone_surrogate(value: Any) -> bool:
    """True when a string anywhere in ``value`` (keys included) cannot be encoded as UTF-8."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def load_json(raw: Union[str, bytes, bytearray, Mapping[str, Any]], what: str) -> Any:
    """Parse one JSON body or message (``what`` names it in errors: "request body", "message").

    Raises InvalidJsonError for text that is not UTF-8, not JSON, nested deeper than
    ``MAX_JSON_DEPTH``, or holding an unpaired surrogate escape. A Mapping passes through.
    """
    if isinstance(raw, Mapping):
        return raw
    if isinstance(raw, (bytes, bytearray)):
        try:  # the encodings json.loads itself accepts (UTF-8, or UTF-16/32 with their BOMs)
            text = bytes(raw).decode(json.detect_encoding(raw))
        except UnicodeDecodeError:
            raise InvalidJsonError(f"{what} is not valid JSON: it is not UTF-8 text") from None
    else:
        text = raw
    if _nesting_exceeds(text, MAX_JSON_DEPTH):
        raise InvalidJsonError(
            f"{what} is not accepted: arrays and objects nest more than {MAX_JSON_DEPTH} levels deep"
        )
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:  # unreachable under MAX_JSON_DEPTH; kept so no input can escape as a 500
        raise InvalidJsonError(f"{what} is not accepted: arrays and objects nest too deeply") from None
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise InvalidJsonError(f"{what} is not valid JSON: {exc}") from None
    if _SURROGATE_ESCAPE_RE.search(text) and _has_lone_surrogate(data):
        raise InvalidJsonError(
            f"{what} is not valid JSON text: it has an unpaired UTF-16 surrogate escape (\\ud800-\\udfff "
            "without its pair), which is not a Unicode character"
        )
    return data


_load_json = load_json


def _object(data: Any, what: str, context_id: Optional[str] = None) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise InvalidJsonError(f"{what} must be a JSON object, got {_json_type(data)}", context_id=context_id)
    return data


def _log_ignored(model: WireModel, label: str) -> None:
    if logger.isEnabledFor(logging.DEBUG):
        ignored = model.ignored_fields()
        if ignored:
            logger.debug("%s: ignoring unknown fields %s", label, ", ".join(sorted(ignored)))


def parse_tts_request(
    body: Union[str, bytes, bytearray, Mapping[str, Any]],
    *,
    sse: bool = False,
    request_id: Optional[str] = None,
) -> TtsRequest:
    """A /tts/bytes (``sse=False``) or /tts/sse (``sse=True``) body -> its model; raises ProtocolError."""
    data = _object(_load_json(body, "request body"), "request body")
    model_cls = TtsSseRequest if sse else TtsRequest
    try:
        request = model_cls.model_validate(data)
    except ValidationError as exc:
        raise _to_protocol_error(exc, None) from None
    _log_ignored(request, f"request {request_id or '-'}")
    return request


def _echoable_context_id(value: Any) -> Optional[str]:
    """``value`` when it can be repeated on an error event: a non-empty string of at most
    MAX_CONTEXT_ID_CHARS characters that encodes as UTF-8; else None."""
    if not isinstance(value, str) or not value or len(value) > MAX_CONTEXT_ID_CHARS:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


def _recover_context_id(raw: Union[str, bytes, bytearray]) -> Optional[str]:
    """The context_id of a message that is not valid JSON, when its text still shows one."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else raw
    match = _CONTEXT_ID_IN_TEXT_RE.search(text)
    if not match:
        return None
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return None
    return _echoable_context_id(value)


def _utf8_size(raw: Union[str, bytes, bytearray]) -> int:
    if not isinstance(raw, str):
        return len(raw)
    if len(raw) > MAX_WS_MESSAGE_BYTES or 4 * len(raw) <= MAX_WS_MESSAGE_BYTES:
        return len(raw)  # over the limit in characters already, or far under it in bytes
    return len(raw.encode("utf-8", "surrogatepass"))


def parse_ws_message(raw: Union[str, bytes, bytearray, Mapping[str, Any]]) -> WsMessage:
    """One WebSocket frame -> a generation or a cancel request; raises ProtocolError.

    A message with ``"cancel": true`` is a cancel (any other field is ignored). The error's
    ``context_id`` is the message's own whenever it names one that can be echoed, else
    UNROUTABLE_CONTEXT_ID (see the module docstring), so every error event can be routed.
    """
    if isinstance(raw, (bytes, bytearray, str)):
        size = _utf8_size(raw)
        if size > MAX_WS_MESSAGE_BYTES:
            raise MessageTooLargeError(
                f"message is over {MAX_WS_MESSAGE_BYTES} bytes (at least {size}), the most one message may be; "
                "send long text in several messages with continue: true",
                context_id=_recover_context_id(raw) or UNROUTABLE_CONTEXT_ID,
            )
    try:
        data = _load_json(raw, "message")
    except InvalidJsonError as exc:
        recovered = None if isinstance(raw, Mapping) else _recover_context_id(raw)
        raise exc.with_context_id(recovered or UNROUTABLE_CONTEXT_ID) from None
    context_id = _echoable_context_id(data.get("context_id")) if isinstance(data, Mapping) else None
    context_id = context_id or UNROUTABLE_CONTEXT_ID
    data = _object(data, "message", context_id)
    model_cls: type[WireModel] = WsCancelRequest if data.get("cancel") is True else WsGenerationRequest
    if "cancel" in data and not isinstance(data["cancel"], bool):
        raise InvalidFieldError(
            f"cancel: expected true or false, got {_json_type(data['cancel'])}", field="cancel", context_id=context_id
        )
    try:
        message = model_cls.model_validate(data)
    except ValidationError as exc:
        raise _to_protocol_error(exc, context_id) from None
    _log_ignored(message, f"context {context_id}")
    return message  # type: ignore[return-value]


def parse_access_token_request(
    body: Union[str, bytes, bytearray, Mapping[str, Any]], *, request_id: Optional[str] = None
) -> AccessTokenRequest:
    """A POST /access-token body ("" or empty means all defaults) -> its model; raises ProtocolError."""
    if isinstance(body, (bytes, bytearray, str)) and not body.strip():
        return AccessTokenRequest()
    data = _object(_load_json(body, "request body"), "request body")
    try:
        request = AccessTokenRequest.model_validate(data)
    except ValidationError as exc:
        raise _to_protocol_error(exc, None) from None
    _log_ignored(request, f"request {request_id or '-'}")
    return request
