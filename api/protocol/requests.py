"""Wire models of what clients send: TTS bodies (bytes, SSE), WebSocket messages, access-token bodies.

Parsing is lenient the way Cartesia's is (protocol sections 3 and 9.5):

- unknown fields are accepted and ignored (their names are logged once per request, at DEBUG);
- ``language: null`` is accepted; ``__experimental_controls`` inside ``voice`` is accepted and ignored;
- ``voice`` may be a bare id string, ``{"id": ...}`` or ``{"mode": "id", "id": ...}``.

and strict where a wrong value would silently change the result: JSON types are checked (no
``"3"`` -> 3, no ``true`` -> 1), ranges are enforced, and ``output_format`` goes through
``api.audio.formats.OutputFormat``. SSE and WebSocket accept ``container: "raw"`` only (the SDK types
allow nothing else there, and their chunks carry bare base64 samples with no container header).

Every invalid input raises one ``ProtocolError`` (api/protocol/errors.py) whose message names the
field path and the problem (api/protocol/validation.py words it), e.g. ``generation_config.speed:
must be between 0.6 and 1.5, got 2.0`` or ``transcript: field required``; several problems are
joined with ``"; "``. Entry points:

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

Every JSON entry point (``load_json``, api/protocol/json_body.py: these three and the voices PATCH
body) is bounded before parsing: at most ``MAX_JSON_DEPTH`` nested arrays/objects (a linear scan,
brackets inside strings do not count), and WebSocket messages at most ``MAX_WS_MESSAGE_BYTES``
(HTTP bodies are capped when read, ``api/routes/_common.py``). Strings must be valid Unicode: an
unpaired surrogate escape (``"\\ud800"``) is refused, since nothing could send it back as UTF-8.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from typing import Annotated, Any, ClassVar, Literal, Mapping, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from api.audio.errors import AudioFormatError
from api.audio.formats import Container, OutputFormat
from api.protocol.errors import (
    EmptyTranscriptError, InvalidFieldError, InvalidJsonError, MessageTooLargeError, MissingFieldError,
    UnsupportedVoiceModeError,
)
from api.protocol.json_body import load_json
from api.protocol.validation import (
    JsonBool, JsonFloat, JsonInt, JsonStr, bounded, field_error, in_range, is_language_code, json_type,
    language_code, non_empty, shown, to_protocol_error,
)
from api.text.speech import is_blank
from engine.requests import SamplingParams

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_BUFFER_DELAY_MS",
    "LEGACY_SPEED_FACTORS",
    "MAX_CONTEXT_ID_CHARS",
    "MAX_VOICE_ID_CHARS",
    "MAX_WS_MESSAGE_BYTES",
    "UNROUTABLE_CONTEXT_ID",
    "AccessTokenRequest",
    "GenerationConfig",
    "TokenGrantsSpec",
    "TtsRequest",
    "TtsSseRequest",
    "VoiceSpec",
    "WsCancelRequest",
    "WsGenerationRequest",
    "WsMessage",
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
#: Largest WebSocket message parsed (the same bound as an HTTP JSON body); the server's own frame
#: limit (uvicorn's ``ws_max_size``, 16 MiB by default) is far above what a message needs.
MAX_WS_MESSAGE_BYTES = 1 << 20
#: ``context_id`` of a WebSocket error about a message whose own id cannot be echoed (module docstring).
UNROUTABLE_CONTEXT_ID = ""
MAX_TOKEN_EXPIRES_IN_S = 3600
#: Legacy top-level ``speed`` -> speed factor (same scale as ``generation_config.speed``).
LEGACY_SPEED_FACTORS: dict[str, float] = {"slow": 0.8, "normal": 1.0, "fast": 1.25}

_CONTEXT_ID_IN_TEXT_RE = re.compile(r'"context_id"\s*:\s*("(?:[^"\\]|\\.)*")')


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
            raise field_error("field required, got null", error_code=MissingFieldError.default_error_code)
        if not isinstance(value, Mapping):
            raise field_error(
                f"expected a voice id string or an object {{\"mode\": \"id\", \"id\": ...}}, got {json_type(value)}"
            )
        mode = value.get("mode", "id")
        if mode == "embedding":
            raise field_error(
                "voice embeddings are not supported; reference a stored voice with "
                "{\"mode\": \"id\", \"id\": \"<voice id>\"} (clone one with POST /voices/clone)",
                suffix="mode",
                error_code=UnsupportedVoiceModeError.default_error_code,
            )
        if mode is not None and mode != "id":
            raise field_error(f"{shown(mode)} is not supported; expected 'id'", suffix="mode")
        voice_id = value.get("id")
        if voice_id is None:
            raise field_error("field required", suffix="id", error_code=MissingFieldError.default_error_code)
        if not isinstance(voice_id, str):
            raise field_error(f"expected a string, got {json_type(voice_id)}", suffix="id")
        if not voice_id.strip():
            raise field_error("must not be empty", suffix="id")
        if len(voice_id) > MAX_VOICE_ID_CHARS:
            raise field_error(f"must be at most {MAX_VOICE_ID_CHARS} characters (voice ids are UUIDs), got "
                           f"{len(voice_id)}", suffix="id")
        return {**value, "mode": "id"}


class GenerationConfig(WireModel):
    """``generation_config``: speed factor 0.6–1.5, volume factor 0.5–2.0, emotion name. The speed
    is honoured by time-stretching the speech at its pitch (api/audio/tempo.py)."""

    speed: Annotated[Optional[JsonFloat], in_range(0.6, 1.5)] = None
    volume: Annotated[Optional[JsonFloat], in_range(0.5, 2.0)] = None
    emotion: Optional[JsonStr] = None


def _parse_output_format(value: Any) -> OutputFormat:
    if isinstance(value, OutputFormat):
        return value
    if not isinstance(value, Mapping):
        raise field_error(f"expected an object {{\"container\", \"encoding\", \"sample_rate\"}}, got {json_type(value)}")
    if value.get("container") is None:
        raise field_error("field required", suffix="container", error_code=MissingFieldError.default_error_code)
    try:
        return OutputFormat.parse(
            value.get("container"), value.get("encoding"), value.get("sample_rate"), value.get("bit_rate")
        )
    except AudioFormatError as exc:
        # the message already names the field ("unsupported output_format.sample_rate 11025; ...")
        field = exc.field.split(".", 1)[1] if exc.field.startswith("output_format.") else None
        message = _strip_field_prefix(str(exc), exc.field)
        raise field_error(message, suffix=field, error_code="invalid_output_format") from None


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

    model_id: Annotated[JsonStr, non_empty()]
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
    temperature: Annotated[Optional[JsonFloat], bounded("temperature")] = None
    top_k: Annotated[Optional[JsonInt], bounded("top_k")] = None
    seed: Annotated[Optional[JsonInt], bounded("seed")] = None
    max_frames: Annotated[Optional[JsonInt], bounded("max_frames")] = None
    cfg_scale: Annotated[Optional[JsonFloat], bounded("cfg_scale")] = None
    cfg_frames: Annotated[Optional[JsonInt], bounded("cfg_frames")] = None
    stop_threshold: Annotated[Optional[JsonFloat], bounded("stop_threshold")] = None
    repetition_penalty: Annotated[Optional[JsonFloat], bounded("repetition_penalty")] = None

    _SAMPLING_FIELDS: ClassVar[tuple[str, ...]] = (
        "temperature", "top_k", "seed", "max_frames", "cfg_scale", "cfg_frames", "stop_threshold",
        "repetition_penalty",
    )

    @field_validator("language", "locale")
    @classmethod
    def _check_language(cls, value: Optional[str]) -> Optional[str]:
        return language_code(value)

    @field_validator("normalization")
    @classmethod
    def _check_normalization(cls, value: Optional[str]) -> Optional[str]:
        if value is None or value in ("auto", "off") or is_language_code(value):
            return value
        raise field_error(f"{shown(value)} is not supported; expected 'auto', 'off' or a locale code such as 'en-US'")

    @field_validator("output_format")
    @classmethod
    def _check_container(cls, value: OutputFormat) -> OutputFormat:
        if cls.raw_only and value.container is not Container.RAW:
            raise field_error(
                f"{value.container.value!r} is not supported on {cls.raw_only}; expected 'raw' "
                "(chunks carry base64 samples without a container header)",
                suffix="container",
                error_code="invalid_output_format",
            )
        if not cls.raw_only and value.is_opus_packets:
            # one body of bare packets could not be split again: packets need chunk events
            raise field_error(
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
                raise field_error(
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
        raise field_error(
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

    context_id: Annotated[JsonStr, non_empty()]
    continue_: JsonBool = Field(default=False, alias="continue")
    flush: JsonBool = False
    max_buffer_delay_ms: Annotated[JsonInt, in_range(0, MAX_BUFFER_DELAY_MS)] = DEFAULT_MAX_BUFFER_DELAY_MS

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
        raise field_error(f"must be at most {MAX_CONTEXT_ID_CHARS} characters, got {len(value)}")
    return value


class WsCancelRequest(WireModel):
    """``{"context_id": "...", "cancel": true}``: stop that context's output."""

    context_id: Annotated[JsonStr, non_empty()]
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
    expires_in: Annotated[Optional[JsonInt], in_range(1, MAX_TOKEN_EXPIRES_IN_S)] = None


# --- entry points -------------------------------------------------------------------------------




def _object(data: Any, what: str, context_id: Optional[str] = None) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise InvalidJsonError(f"{what} must be a JSON object, got {json_type(data)}", context_id=context_id)
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
    data = _object(load_json(body, "request body"), "request body")
    model_cls = TtsSseRequest if sse else TtsRequest
    try:
        request = model_cls.model_validate(data)
    except ValidationError as exc:
        raise to_protocol_error(exc, None) from None
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
        data = load_json(raw, "message")
    except InvalidJsonError as exc:
        recovered = None if isinstance(raw, Mapping) else _recover_context_id(raw)
        raise exc.with_context_id(recovered or UNROUTABLE_CONTEXT_ID) from None
    context_id = _echoable_context_id(data.get("context_id")) if isinstance(data, Mapping) else None
    context_id = context_id or UNROUTABLE_CONTEXT_ID
    data = _object(data, "message", context_id)
    model_cls: type[WireModel] = WsCancelRequest if data.get("cancel") is True else WsGenerationRequest
    if "cancel" in data and not isinstance(data["cancel"], bool):
        raise InvalidFieldError(
            f"cancel: expected true or false, got {json_type(data['cancel'])}", field="cancel", context_id=context_id
        )
    try:
        message = model_cls.model_validate(data)
    except ValidationError as exc:
        raise to_protocol_error(exc, context_id) from None
    _log_ignored(message, f"context {context_id}")
    return message  # type: ignore[return-value]


def parse_access_token_request(
    body: Union[str, bytes, bytearray, Mapping[str, Any]], *, request_id: Optional[str] = None
) -> AccessTokenRequest:
    """A POST /access-token body ("" or empty means all defaults) -> its model; raises ProtocolError."""
    if isinstance(body, (bytes, bytearray, str)) and not body.strip():
        return AccessTokenRequest()
    data = _object(load_json(body, "request body"), "request body")
    try:
        request = AccessTokenRequest.model_validate(data)
    except ValidationError as exc:
        raise to_protocol_error(exc, None) from None
    _log_ignored(request, f"request {request_id or '-'}")
    return request
