"""The OpenAI-compatible routes: ``POST /v1/audio/speech``, ``GET /v1/models``, ``GET /v1/models/{id}``.

Same credentials (``Authorization: Bearer <key or token>``), same synthesis service and same
admission as the Cartesia routes: a speech request is one stream, as a ``/tts/bytes`` request is.
The request is checked, its voice resolved and its text planned before the response starts, and
the first audio is awaited too, so every error until then is an HTTP error in OpenAI's shape
``{"error": {"message", "type", "param", "code"}}`` with the Cartesia routes' status and retry
headers (429 and 503 carry ``retry-after``). After the first audio: ``stream_format: "audio"``
aborts the connection (no in-band channel, as ``/tts/bytes``), ``"sse"`` ends with one
``{"type": "error", "error": {...}}`` event.

Voice resolution (``resolve_voice``): a stored voice id; else the one stored voice with that name
(case-insensitive; several with the name is a 400 naming how many); else one of OpenAI's
built-in names (``alloy``, ``nova``...) speaks with Gepard's default voice, so OpenAI clients work
unchanged (clone a voice with that name to give it another); else 404 ``voice_not_found``. While
the store is unavailable, a built-in voice's name and OpenAI's names still resolve (the stored
voices, which could shadow them, cannot be searched); anything else is 503.

``speech.audio.done`` usage: ``input_tokens`` = characters of ``input`` (Gepard's text tokens are a
model detail), ``output_tokens`` = the audio delivered in codec frames (~46 ms each): the model steps
taken, unless speed stretched the speech or ``<break>`` tags added silence.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import weakref
from typing import AsyncIterator, Optional

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from api.audio import AudioEncoding, AudioSink, ContainerWriter, Mp3Writer, RawWriter, WavWriter
from api.audio.av_writer import AvFormat, AvWriter
from api.audio.errors import AudioFormatError
from api.errors import (BadRequestError, EmptyTranscriptError, TranscriptTooLongError, UnknownModelError,
                        error_response)
from api.protocol.openai import (
    OPENAI_MODEL_IDS,
    OPENAI_VOICE_NAMES,
    SPEECH_SAMPLE_RATE_HZ,
    SpeechFormat,
    SpeechRequest,
    delta_event,
    done_event,
    error_payload,
    is_openai_model,
    parse_speech_request,
    sse_event,
)
from api.protocol.errors import ProtocolError
from api.protocol.requests import parse_tts_request
from api.routes._common import (encoded_audio, note_mid_stream_failure, primed, read_body, runtime_of, since_start,
                               start_request)
from api.settings import Settings
from voices.errors import VoiceNotFoundError, VoiceStoreUnavailableError
from voices.store import VoiceStore

logger = logging.getLogger(__name__)

MP3_BIT_RATE_BPS = 128000
#: ``created`` of every listed model (fixed, so the list is the same on every replica and restart)
MODELS_CREATED = 1735689600  # 2025-01-01
_NAME_SCAN_PAGES = 20  # at most 2,000 voices are searched for a name
_WILDCARDS = set("*?[")
_ROUTE = "openai"
#: Cartesia's name of the text field, which the synthesis service's errors name; OpenAI's is ``input``
_TRANSCRIPT = "transcript"
#: Stores skipped for built-in voices during their current outage (one WARNING per outage)
_skipped_stores: "weakref.WeakSet[VoiceStore]" = weakref.WeakSet()


class AmbiguousVoiceError(BadRequestError):
    default_error_code = "ambiguous_voice"
    title = "Ambiguous voice"


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/audio/speech", speech, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", get_model, methods=["GET"]),
    ]


# --- errors -------------------------------------------------------------------------------------


def _param(exc: BaseException) -> Optional[str]:
    if isinstance(exc, VoiceNotFoundError | AmbiguousVoiceError):
        return "voice"
    if isinstance(exc, UnknownModelError):
        return "model"
    if isinstance(exc, TranscriptTooLongError | EmptyTranscriptError):
        return "input"
    if isinstance(exc, AudioFormatError):
        return "response_format"
    if isinstance(exc, ProtocolError):
        param = getattr(exc, "param", None) or exc.field
        return "input" if param == _TRANSCRIPT else param
    return None


def _message(message: str, param: Optional[str]) -> str:
    """The message in this API's terms: the synthesis service's messages about the text start with
    Cartesia's field name (``transcript: ...``), which an OpenAI client never sent."""
    if param == "input" and message.startswith(_TRANSCRIPT + ":"):
        return "input" + message[len(_TRANSCRIPT):]
    return message


def openai_error_response(exc: BaseException, request_id: str) -> JSONResponse:
    """Any error -> OpenAI's error body, with the status and retry headers the Cartesia routes give
    it (``api.errors``), except an unknown model: 404 ``model_not_found``, as OpenAI answers.
    Not counted here: the caller counts what it sends (``_answer_error``; api/drain_gate.py)."""
    cartesia = error_response(exc, request_id)
    body = json.loads(cartesia.body)
    status = 404 if isinstance(exc, UnknownModelError) else cartesia.status_code
    headers = {k: v for k, v in cartesia.headers.items()
               if k in ("retry-after", "retry-after-ms", "x-should-retry", "x-request-id", "allow")}
    param = _param(exc)
    return JSONResponse(error_payload(_message(body["message"], param), status, param, body["error_code"]),
                        status_code=status, headers=headers)


def _answer_error(request: Request, exc: BaseException, request_id: str) -> JSONResponse:
    """The error response of one of these routes, counted in gepard_errors_total (route ``openai``)."""
    runtime_of(request).metrics.error(_ROUTE, exc)
    return openai_error_response(exc, request_id)


# --- models -------------------------------------------------------------------------------------


def served_models(settings: Settings) -> list[str]:
    """The ids ``GET /v1/models`` lists: the concrete ids of GEPARD_MODEL_IDS (patterns are not
    listed), then OpenAI's."""
    own = [m for m in settings.model_ids if not _WILDCARDS & set(m)]
    return own + [m for m in OPENAI_MODEL_IDS if m not in own]


def _check_model(model: str, settings: Settings) -> None:
    """UnknownModelError unless ``model`` is one of OpenAI's ids (always Gepard, whatever
    GEPARD_MODEL_IDS says) or an id GEPARD_MODEL_IDS accepts. The synthesis service is then told
    the model is checked (``prepare(model_checked=True)``)."""
    if not (is_openai_model(model) or settings.accepts_model(model)):
        raise UnknownModelError(model, served_models(settings))


def _model_object(model_id: str) -> dict:
    return {"id": model_id, "object": "model", "created": MODELS_CREATED, "owned_by": "gepard"}


async def list_models(request: Request) -> Response:
    rid = start_request(request)
    try:
        rt = runtime_of(request)
        await rt.auth.authenticate(request)
        data = [_model_object(m) for m in served_models(rt.settings)]
        return JSONResponse({"object": "list", "data": data}, headers={"x-request-id": rid})
    except Exception as exc:
        return _answer_error(request, exc, rid)


async def get_model(request: Request) -> Response:
    rid = start_request(request)
    try:
        rt = runtime_of(request)
        await rt.auth.authenticate(request)
        model_id = request.path_params["model_id"]
        if not (rt.settings.accepts_model(model_id) or is_openai_model(model_id)):
            raise UnknownModelError(model_id, served_models(rt.settings))
        return JSONResponse(_model_object(model_id), headers={"x-request-id": rid})
    except Exception as exc:
        return _answer_error(request, exc, rid)


# --- voices -------------------------------------------------------------------------------------


async def resolve_voice(voices: VoiceStore, voice: str, default_voice_id: str) -> str:
    """A voice id or name -> a stored voice id (see the module docstring for the order)."""
    wanted = voice.strip().casefold()
    try:
        found = await _stored_voice(voices, voice)
    except VoiceStoreUnavailableError as exc:
        builtin = await _builtin_voice(voices, wanted, default_voice_id)
        if builtin is None:
            raise
        if voices not in _skipped_stores:  # once per outage, not once per request
            _skipped_stores.add(voices)
            logger.warning("voice store unavailable, skipped: voice %r resolved to built-in voice %s; OpenAI's "
                           "and built-in voices' names resolve without the store until it is back: %s",
                           voice, builtin, exc)
        return builtin
    _skipped_stores.discard(voices)
    if found is not None:
        return found
    if wanted in OPENAI_VOICE_NAMES:
        return default_voice_id
    error = VoiceNotFoundError(voice)
    error.args = (f"voice {voice!r} not found: pass a voice id or the name of a stored voice (GET /voices), "
                  "or one of OpenAI's voice names",)
    raise error


async def _stored_voice(voices: VoiceStore, voice: str) -> Optional[str]:
    """The voice with id ``voice``, else the one voice with that name, else None (AmbiguousVoiceError
    for a name several voices share; VoiceStoreUnavailableError when the store cannot be asked)."""
    try:
        await voices.get(voice)
        return voice
    except VoiceNotFoundError:
        pass
    wanted = voice.strip().casefold()
    matches: list[str] = []
    after: Optional[str] = None
    for _ in range(_NAME_SCAN_PAGES):
        page = await voices.list(limit=100, starting_after=after, q=voice.strip())
        matches += [v.id for v in page.data if v.name.strip().casefold() == wanted]
        if not page.data or not page.has_more:
            break
        after = page.data[-1].id
    if len(matches) > 1:
        raise AmbiguousVoiceError(f"{len(matches)} voices are named {voice!r}; pass the id of the one you mean")
    return matches[0] if matches else None


async def _builtin_voice(voices: VoiceStore, wanted: str, default_voice_id: str) -> Optional[str]:
    """What the casefolded name ``wanted`` means without the store: a built-in voice's name (built-in
    voices live in this process), else one of OpenAI's names (the default voice), else None."""
    for voice_id in sorted(voices.builtin_ids):
        if (await voices.get(voice_id)).name.strip().casefold() == wanted:  # no backend call for a builtin
            return voice_id
    return default_voice_id if wanted in OPENAI_VOICE_NAMES else None


# --- speech -------------------------------------------------------------------------------------


def speech_writer(fmt: SpeechFormat) -> ContainerWriter:
    """The encoder of each ``response_format``, all at 24 kHz mono."""
    rate = SPEECH_SAMPLE_RATE_HZ
    if fmt is SpeechFormat.MP3:
        return Mp3Writer(rate, MP3_BIT_RATE_BPS)
    if fmt is SpeechFormat.OPUS:
        return AvWriter(AvFormat.OGG_OPUS, rate)
    if fmt is SpeechFormat.AAC:
        return AvWriter(AvFormat.AAC, rate)
    if fmt is SpeechFormat.FLAC:
        return AvWriter(AvFormat.FLAC, rate)
    if fmt is SpeechFormat.WAV:
        return WavWriter(AudioEncoding.PCM_S16LE, rate)  # streamed: sizes 0xFFFFFFFF (api/audio/containers.py)
    return RawWriter(AudioEncoding.PCM_S16LE)


def _as_tts_request(req: SpeechRequest, voice_id: str, request_id: str):
    """The Cartesia request this one amounts to, so the synthesis service checks and plans it like
    any other (its text limits, language, Gepard extras; the model is checked by ``_check_model``)."""
    body = {
        "model_id": req.model,
        "transcript": req.input,
        "voice": {"mode": "id", "id": voice_id},
        # not used: the speech route encodes with speech_writer; any valid value will do
        "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": SPEECH_SAMPLE_RATE_HZ},
        "language": req.language,
        **req.sampling,
    }
    return parse_tts_request(body, request_id=request_id)


async def speech(request: Request) -> Response:
    rid = start_request(request)
    try:
        return await _speech(request, rid)
    except ClientDisconnect:
        raise  # nobody to answer: one INFO line and a 499 in the access log (api/disconnects.py)
    except Exception as exc:
        return _answer_error(request, exc, rid)


async def _speech(request: Request, rid: str) -> Response:
    from api.app import DEFAULT_VOICE_ID  # api.app imports the routes: imported at call time

    rt = runtime_of(request)
    principal = await rt.auth.authenticate(request)
    svc = rt.service
    req = parse_speech_request(await read_body(request), max_input_chars=rt.settings.max_transcript_chars)
    _check_model(req.model, rt.settings)
    voice_id = await resolve_voice(svc.voices, req.voice, DEFAULT_VOICE_ID)
    # speed rides beside the Cartesia request: OpenAI's 0.25-4.0 is wider than generation_config's 0.6-1.5
    job = await svc.prepare(_as_tts_request(req, voice_id, rid), model_checked=True, speed=req.speed)
    rt.metrics.requests.labels(_ROUTE).inc()
    logger.info("openai speech %s: model %s, voice %s, %s, stream %s, %d chars%s", rid, req.model, voice_id,
                req.response_format.value, req.stream_format, len(req.input),
                ", instructions ignored" if req.instructions else "")
    frame = getattr(svc.decoder, "samples_per_frame", 0) or 1

    sink = AudioSink.with_writer(speech_writer(req.response_format), SPEECH_SAMPLE_RATE_HZ, in_rate_hz=svc.sample_rate_hz)

    async def audio() -> AsyncIterator[bytes]:
        pieces = encoded_audio(svc, job, sink, key=principal.subject, route=_ROUTE, request_id=rid)
        async with contextlib.aclosing(pieces):
            async for data in pieces:
                yield delta_event(data) if req.sse else data
        if req.sse:
            yield done_event(len(req.input), math.ceil(sink.samples_in / frame))

    def in_band(exc: Exception) -> bytes:  # SSE after 200: one error event, then the body ends
        note_mid_stream_failure(f"openai speech {rid}", exc)
        error = json.loads(_answer_error(request, exc, rid).body)
        return sse_event({"type": "error", **error})

    stream = await primed(request, audio(), on_error=in_band if req.sse else None)
    rt.metrics.first_audio.labels(_ROUTE).observe(since_start(request))
    if req.sse:
        return StreamingResponse(stream, media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-request-id": rid})
    return StreamingResponse(stream, media_type=req.response_format.media_type, headers={"x-request-id": rid})
