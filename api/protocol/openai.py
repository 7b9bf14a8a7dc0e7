"""Wire shapes of the OpenAI-compatible speech API: ``POST /v1/audio/speech``, ``GET /v1/models``.

Request (``parse_speech_request``), as OpenAI documents it, with these decisions:

- ``model``: OpenAI's ids (``tts-1``, ``tts-1-hd``, ``gpt-4o-mini-tts`` and its dated variants
  ``gpt-4o-mini-tts-YYYY-MM-DD``) all mean Gepard, like every id ``GEPARD_MODEL_IDS`` accepts;
- ``input``: 1 .. ``MAX_INPUT_CHARS`` (4096, OpenAI's limit) characters, and never more than the
  server's own transcript limit (``GEPARD_MAX_TRANSCRIPT_CHARS``) when that is lower;
- ``voice``: a stored voice id or a voice name (string, or ``{"id": ...}`` as the SDK sends custom
  voices); resolving it is the route's job (``api/routes/openai_speech.py``);
- ``response_format``: ``mp3`` (default) | ``opus`` | ``aac`` | ``flac`` | ``wav`` | ``pcm``, all at
  24 kHz mono like OpenAI's (``pcm``: raw 16-bit little-endian samples, no header);
- ``speed``: a number in [0.25, 4.0] (else 400 ``invalid_value``), the speech rate factor: Gepard's
  speech is time-stretched to it at the same pitch (``api/audio/tempo.py``), as on the Cartesia routes;
- ``instructions``: accepted (a string) and ignored: Gepard has no instruction conditioning, the
  voice prompt alone sets the style;
- ``stream_format``: ``audio`` (default: the encoded bytes, chunked as they are made) or ``sse``
  (``speech.audio.delta`` events with base64 audio, then ``speech.audio.done`` with usage), for
  every model (OpenAI refuses sse for tts-1/tts-1-hd; here they are all the same model);
- Gepard's own knobs ride along as extra fields (the SDK's ``extra_body``): ``temperature``,
  ``top_k``, ``seed``, ``max_frames``, ``cfg_scale``, ``cfg_frames``, ``stop_threshold``,
  ``repetition_penalty`` (the ranges of ``engine.requests.SAMPLING_BOUNDS``), and ``language``.
  Other unknown fields are ignored. ``null`` in an optional field is its default.

Every problem raises ``OpenAiRequestError`` (a 400 ``ProtocolError``) with OpenAI's ``param`` and
``code``; ``error_payload`` renders any error in OpenAI's shape
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import base64
import enum
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from api.protocol.errors import ProtocolError
from api.protocol.json_body import load_json
from engine.requests import SAMPLING_BOUNDS

__all__ = [
    "MAX_INPUT_CHARS",
    "OPENAI_MODEL_IDS",
    "OPENAI_VOICE_NAMES",
    "SPEECH_SAMPLE_RATE_HZ",
    "OpenAiRequestError",
    "SpeechFormat",
    "SpeechRequest",
    "error_payload",
    "error_type",
    "is_openai_model",
    "parse_speech_request",
    "sse_event",
]

MAX_INPUT_CHARS = 4096
MAX_VOICE_CHARS = 256
SPEECH_SAMPLE_RATE_HZ = 24000  # every OpenAI speech format is 24 kHz mono
SPEED_RANGE = (0.25, 4.0)
OPENAI_MODEL_IDS: tuple[str, ...] = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
OPENAI_VOICE_NAMES: frozenset[str] = frozenset({
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse", "marin", "cedar",
})
#: Gepard extras accepted on this route (extra_body); all bounded by SAMPLING_BOUNDS.
_INT_EXTRAS = ("top_k", "seed", "max_frames", "cfg_frames")
_FLOAT_EXTRAS = ("temperature", "cfg_scale", "stop_threshold", "repetition_penalty")
_MAX_ECHO = 80


def is_openai_model(model: str) -> bool:
    """OpenAI's speech model ids, dated variants included (gpt-4o-mini-tts-2025-12-15)."""
    return model in OPENAI_MODEL_IDS or model.startswith("gpt-4o-mini-tts-")


class SpeechFormat(str, enum.Enum):
    """``response_format``; the value is the wire string."""

    MP3 = "mp3"
    OPUS = "opus"
    AAC = "aac"
    FLAC = "flac"
    WAV = "wav"
    PCM = "pcm"

    @property
    def media_type(self) -> str:
        return _MEDIA_TYPES[self]


_MEDIA_TYPES = {
    SpeechFormat.MP3: "audio/mpeg",
    SpeechFormat.OPUS: "audio/ogg",
    SpeechFormat.AAC: "audio/aac",
    SpeechFormat.FLAC: "audio/flac",
    SpeechFormat.WAV: "audio/wav",
    SpeechFormat.PCM: "audio/pcm",
}


class OpenAiRequestError(ProtocolError):
    """A speech request OpenAI would also refuse (400); ``param`` names the field."""

    def __init__(self, message: str, param: Optional[str], code: str = "invalid_value") -> None:
        super().__init__(message, field=param, error_code=code)
        self.param = param


@dataclass(frozen=True)
class SpeechRequest:
    model: str
    input: str
    voice: str  # an id or a name, resolved by the route
    response_format: SpeechFormat = SpeechFormat.MP3
    speed: float = 1.0
    instructions: Optional[str] = None  # accepted, ignored (module docstring)
    stream_format: str = "audio"
    language: Optional[str] = None
    sampling: dict[str, Union[int, float]] = field(default_factory=dict)  # Gepard extras that were set

    @property
    def sse(self) -> bool:
        return self.stream_format == "sse"


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= _MAX_ECHO else text[:_MAX_ECHO] + "..."


def _string(data: Mapping[str, Any], name: str, *, required: bool) -> Optional[str]:
    value = data.get(name)
    if value is None:
        if required:
            raise OpenAiRequestError(f"Missing required parameter: '{name}'.", name, "missing_required_parameter")
        return None
    if not isinstance(value, str):
        raise OpenAiRequestError(f"Invalid type for '{name}': expected a string, but got {_shown(value)}.", name,
                                 "invalid_type")
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _voice(data: Mapping[str, Any]) -> str:
    value = data.get("voice")
    if isinstance(value, Mapping):  # the SDK's custom-voice object {"id": "voice_1234"}
        value = value.get("id")
        if not isinstance(value, str):
            raise OpenAiRequestError("Invalid 'voice.id': expected a string.", "voice", "invalid_type")
    if value is None:
        raise OpenAiRequestError("Missing required parameter: 'voice'.", "voice", "missing_required_parameter")
    if not isinstance(value, str):
        raise OpenAiRequestError(f"Invalid type for 'voice': expected a string or an object with 'id', but got "
                                 f"{_shown(value)}.", "voice", "invalid_type")
    if not value.strip():
        raise OpenAiRequestError("Invalid 'voice': empty string.", "voice", "invalid_value")
    if len(value) > MAX_VOICE_CHARS:  # no id or name is longer (voices.models.MAX_NAME_CHARS)
        raise OpenAiRequestError(f"Invalid 'voice': {len(value)} characters; a voice id or name has at most "
                                 f"{MAX_VOICE_CHARS}.", "voice", "string_above_max_length")
    return value


def _extras(data: Mapping[str, Any]) -> dict[str, Union[int, float]]:
    out: dict[str, Union[int, float]] = {}
    for name in (*_INT_EXTRAS, *_FLOAT_EXTRAS):
        value = data.get(name)
        if value is None:
            continue
        if name in _INT_EXTRAS:
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if not isinstance(value, int) or isinstance(value, bool):
                raise OpenAiRequestError(f"Invalid type for '{name}': expected an integer, but got {_shown(value)}.",
                                         name, "invalid_type")
        elif not _number(value):
            raise OpenAiRequestError(f"Invalid type for '{name}': expected a number, but got {_shown(value)}.",
                                     name, "invalid_type")
        problem = SAMPLING_BOUNDS[name].problem(value)
        if problem is not None:
            raise OpenAiRequestError(f"Invalid '{name}': {problem}.", name, "invalid_value")
        out[name] = value
    return out


def parse_speech_request(body: Union[bytes, str, Mapping[str, Any]], *, max_input_chars: int = MAX_INPUT_CHARS) -> SpeechRequest:
    """A ``POST /v1/audio/speech`` body -> SpeechRequest; raises OpenAiRequestError (or the
    InvalidJsonError of ``load_json``). ``max_input_chars``: the server's own limit, if lower."""
    data = load_json(body, "request body")
    if not isinstance(data, Mapping):
        raise OpenAiRequestError("The request body must be a JSON object.", None, "invalid_json")
    model = _string(data, "model", required=True) or ""
    if not model.strip():
        raise OpenAiRequestError("Invalid 'model': empty string.", "model", "invalid_value")
    text = _string(data, "input", required=True) or ""
    if not text.strip():
        raise OpenAiRequestError("Invalid 'input': empty string (it must contain something to speak).", "input",
                                 "empty_input")
    limit = min(MAX_INPUT_CHARS, max_input_chars)
    if len(text) > limit:
        raise OpenAiRequestError(f"Invalid 'input': string too long. Expected a string with maximum length {limit}, "
                                 f"but got a string with length {len(text)} instead.", "input", "string_above_max_length")
    voice = _voice(data)
    fmt_name = data.get("response_format")
    if fmt_name is None:  # null is the default, as for speed and stream_format
        fmt_name = SpeechFormat.MP3.value
    try:
        fmt = SpeechFormat(fmt_name)
    except ValueError:
        accepted = ", ".join(f"'{f.value}'" for f in SpeechFormat)
        raise OpenAiRequestError(f"Invalid value for 'response_format': {_shown(fmt_name)} is not supported; "
                                 f"expected one of {accepted}.", "response_format", "invalid_value") from None
    speed = data.get("speed", 1.0)
    if speed is None:
        speed = 1.0
    if not _number(speed):
        raise OpenAiRequestError(f"Invalid type for 'speed': expected a number, but got {_shown(speed)}.", "speed",
                                 "invalid_type")
    lo, hi = SPEED_RANGE
    if not lo <= speed <= hi:
        raise OpenAiRequestError(f"Invalid 'speed': {speed:g} is out of range; expected a value from {lo:g} to {hi:g}.",
                                 "speed", "invalid_value")
    instructions = _string(data, "instructions", required=False)
    stream_format = data.get("stream_format", "audio")
    if stream_format is None:
        stream_format = "audio"
    if stream_format not in ("audio", "sse"):
        raise OpenAiRequestError(f"Invalid value for 'stream_format': {_shown(stream_format)} is not supported; "
                                 "expected one of 'sse', 'audio'.", "stream_format", "invalid_value")
    language = _string(data, "language", required=False)
    return SpeechRequest(model, text, voice, fmt, float(speed), instructions, stream_format, language, _extras(data))


# --- responses ----------------------------------------------------------------------------------


def error_type(status_code: int) -> str:
    """OpenAI's error ``type`` for an HTTP status (the SDKs pick their exception by the status)."""
    if status_code == 401:
        return "authentication_error"
    if status_code == 403:
        return "permission_error"
    if status_code == 429:
        return "rate_limit_error"
    if status_code >= 500:
        return "server_error"
    return "invalid_request_error"  # 400, 404, 409, 413... as OpenAI's own 4xx


def error_payload(message: str, status_code: int, param: Optional[str], code: Optional[str]) -> dict:
    """``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": error_type(status_code), "param": param, "code": code}}


def sse_event(payload: dict) -> bytes:
    """One SSE event whose ``event:`` is the payload's ``type`` (``speech.audio.delta`` ...)."""
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return f"event: {payload['type']}\ndata: {data}\n\n".encode("utf-8")


def delta_event(audio: bytes) -> bytes:
    return sse_event({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode("ascii")})


def done_event(input_tokens: int, output_tokens: int) -> bytes:
    return sse_event({"type": "speech.audio.done",
                      "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                                "total_tokens": input_tokens + output_tokens}})
