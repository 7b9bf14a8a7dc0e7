"""The voices API (protocol sections 2.1-2.3): list, get, patch, delete, clone, and the accents.

    GET    /voices, /voices/   ?limit&starting_after&ending_before&q&language&gender&is_owner
                               -> {"data": [Voice], "has_more", "next_page"}; data is [] past the end
    POST   /voices/clone       multipart (see _clone_form.py) -> VoiceMetadata
    GET    /voices/{id}        -> Voice (``expand[]`` is accepted; there are no preview files)
    PATCH  /voices/{id}        JSON {name?, description?, gender?, accent?, tagline?} -> Voice
    DELETE /voices/{id}        -> 204
    GET    /accents            -> {"accents": [Accent]}

Reads need any credential (an access token needs the ``tts`` grant); writes need an API key.
Builtin voices (the default voice, preloaded clips) are listed and usable but read-only (403).

Clones are bounded per process (``GEPARD_MAX_CONCURRENT_CLONES`` places, 4): one holds its clip in
memory (up to ~20 MB) and its decoded audio while it runs, so unbounded clones could take gigabytes.
A place is taken once the upload is all in, so a slow upload holds no place (four uploads trickling a
byte at a time blocked every clone when the place came first); one over the limit waits up to
``CLONE_SLOT_WAIT_S`` for a place, then gets 429 ``concurrency_limited`` with retry advice. Uploads
are bounded apart (api/routes/_clone_form.py): the bytes all uploads in progress hold, as they
arrive, by ``CLONE_UPLOAD_CLIPS_PER_PLACE`` full-size uploads per place (429 past it), and each
body's time by ``GEPARD_CLONE_UPLOAD_TIMEOUT_S`` (408 ``request_timeout``). A place is held until the
clone's work is over: when its client hangs up, the clone is cancelled (api/disconnects.py) but the
step running in its thread cannot be, and the place stays taken until that thread ends
(voices/cloning.py), so abandoned clones never run more threads than there are places; those
threads are the cloner's own executor, not the default executor the TTS routes encode audio on.

The drain waits for the clones in flight (``Runtime.clones_in_flight``, counted from the upload on)
as it waits for open streams: a clone accepted before a shutdown ends with its voice id (one that
arrives during the drain gets its 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from api.auth import Principal
from api.disconnects import unless_client_leaves
from api.errors import CloningUnavailableError, RateLimitedError
from api.protocol import InvalidFieldError, InvalidJsonError
from api.protocol.json_body import load_json
from api.routes._clone_form import FORM_OVERHEAD_BYTES, CloneForm, UploadBudget, UploadHold, read_clone_form
from api.routes._common import read_body, runtime_of, start_request
from voices.accents import ACCENTS, accent_id_problem
from voices.listing import MAX_LIST_LIMIT

if TYPE_CHECKING:
    from api.app import Runtime

logger = logging.getLogger(__name__)

DEFAULT_LIST_LIMIT = 10
#: PATCH fields -> whether null is allowed (null clears an optional field).
UPDATABLE_FIELDS = {"name": False, "description": True, "gender": True, "accent": True, "tagline": True}
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")
# GEPARD_MAX_CONCURRENT_CLONES (``VoiceCloner.max_concurrent``, 4): clones running at once in this
# process, counted from when their upload is in until their last thread ends (each holds up to
# ~20 MB of clip plus its decoded audio: 20 unbounded 19 MB clones took +677 MiB); also the clone
# executor's threads.
#: How long a clone over the limit waits for a place (an upload for room in the buffer) before its 429.
CLONE_SLOT_WAIT_S = 3.0
#: The retry advice of that 429 (``retry-after`` / ``retry-after-ms``).
CLONE_RETRY_AFTER_S = 2.0
#: Clone uploads in progress hold at most this many full-size uploads' bytes together per clone
#: place (``GEPARD_MAX_CLIP_BYTES`` + form overhead each: 160 MB with the default 4 places, in
#: memory or in the parser's temporary files), counted as they arrive, given back when their
#: request ends.
CLONE_UPLOAD_CLIPS_PER_PLACE = 2
# GEPARD_CLONE_UPLOAD_TIMEOUT_S (120 s: 20 MB at ~1.5 Mbit/s): a clone's whole request body must
# arrive within it, else 408 ``request_timeout``. The per-read idle bound (api/http_protocol.py,
# 30 s) alone let a body that sends a byte every 20 s go on forever.


async def _authorise(request: Request, write: Optional[str] = None) -> Principal:
    principal = await runtime_of(request).auth.authenticate(request)
    if write is not None:
        principal.require_api_key(write)
    return principal


def _query_int(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidFieldError(f"{name}: expected an integer, got {raw!r}", field=name) from None
    if not lo <= value <= hi:
        raise InvalidFieldError(f"{name}: must be an integer from {lo} to {hi}, got {value}", field=name)
    return value


@dataclass(frozen=True)
class PageQuery:
    """The cursor-pagination parameters every list route takes (protocol section 2.2)."""

    limit: int
    starting_after: Optional[str]
    ending_before: Optional[str]

    @classmethod
    def of(cls, request: Request) -> "PageQuery":
        """Read and check them: a bad one is a 400 naming the parameter (invalid_request)."""
        q = request.query_params
        starting_after, ending_before = q.get("starting_after") or None, q.get("ending_before") or None
        if starting_after is not None and ending_before is not None:
            raise InvalidFieldError("pass starting_after or ending_before, not both", field="ending_before")
        return cls(_query_int(request, "limit", DEFAULT_LIST_LIMIT, 1, MAX_LIST_LIMIT), starting_after, ending_before)


def _query_bool(request: Request, name: str) -> Optional[bool]:
    raw = request.query_params.get(name)
    if raw is None or not raw.strip():
        return None
    if raw.strip().lower() in _TRUE:
        return True
    if raw.strip().lower() in _FALSE:
        return False
    raise InvalidFieldError(f"{name}: expected true or false, got {raw!r}", field=name)


async def list_voices(request: Request) -> Response:
    start_request(request)
    await _authorise(request)
    q, paging = request.query_params, PageQuery.of(request)
    page = await runtime_of(request).voices.list(
        limit=paging.limit, starting_after=paging.starting_after, ending_before=paging.ending_before,
        q=q.get("q") or None, language=q.get("language") or None, gender=q.get("gender") or None,
        is_owner=_query_bool(request, "is_owner"),
    )
    return JSONResponse(page.to_api_dict())


async def get_voice(request: Request) -> Response:
    start_request(request)
    await _authorise(request)
    voice = await runtime_of(request).voices.get(request.path_params["voice_id"])
    return JSONResponse(voice.to_api_dict())


def _update_fields(body: bytes, request_id: str) -> dict[str, Any]:
    """PATCH body -> store.update keyword arguments; a precise 400 for anything else."""
    data = load_json(body, "PATCH body") if body.strip() else {}  # bounded depth, precise 400s
    if not isinstance(data, dict):
        raise InvalidJsonError(f"PATCH body must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(UPDATABLE_FIELDS))
    if unknown:
        raise InvalidFieldError(
            f"cannot update field(s) {unknown}; updatable fields are {sorted(UPDATABLE_FIELDS)}", field=unknown[0])
    fields: dict[str, Any] = {}
    for name, value in data.items():
        if value is None and not UPDATABLE_FIELDS[name]:
            raise InvalidFieldError(f"{name}: must not be null", field=name)
        if value is not None and not isinstance(value, str):
            raise InvalidFieldError(f"{name}: expected a string, got {type(value).__name__}", field=name)
        if name == "accent" and value is not None and (problem := accent_id_problem(value)) is not None:
            raise InvalidFieldError(problem, field=name)
        fields[name] = "" if value is None and name in ("description", "tagline") else value
    logger.debug("patch %s: fields %s", request_id, sorted(fields))
    return fields


async def update_voice(request: Request) -> Response:
    rid = start_request(request)
    await _authorise(request, write="update voices")
    fields = _update_fields(await read_body(request), rid)
    voice = await runtime_of(request).voices.update(request.path_params["voice_id"], **fields)
    return JSONResponse(voice.to_api_dict())


async def delete_voice(request: Request) -> Response:
    start_request(request)
    await _authorise(request, write="delete voices")
    await runtime_of(request).voices.delete(request.path_params["voice_id"])
    return Response(status_code=204)


@contextlib.asynccontextmanager
async def _clone_place(request: Request) -> AsyncIterator[None]:
    """One of this app's ``GEPARD_MAX_CONCURRENT_CLONES`` places, for the block; 429
    ``concurrency_limited`` when none frees within ``CLONE_SLOT_WAIT_S``."""
    state = request.app.state
    most = runtime_of(request).cloner.max_concurrent
    places: Optional[asyncio.Semaphore] = getattr(state, "clone_places", None)
    if places is None:  # one per app (its event loop), made at its first clone
        places = state.clone_places = asyncio.Semaphore(most)
    try:
        async with asyncio.timeout(CLONE_SLOT_WAIT_S):
            await places.acquire()
    except TimeoutError:
        logger.info("clone %s: refused, %d clones already running", getattr(request.state, "request_id", "-"),
                    most)
        raise RateLimitedError(
            f"this server already runs {most} voice clones, the most it runs at once "
            f"(GEPARD_MAX_CONCURRENT_CLONES); "
            f"retry in {CLONE_RETRY_AFTER_S:g} s", retry_after_s=CLONE_RETRY_AFTER_S) from None
    try:
        yield
    finally:
        places.release()


def _upload_hold(request: Request, max_clip_bytes: int) -> UploadHold:
    """This request's share of the app's upload budget (``CLONE_UPLOAD_CLIPS_PER_PLACE`` full-size
    uploads per clone place)."""
    state = request.app.state
    budget: Optional[UploadBudget] = getattr(state, "clone_upload_budget", None)
    if budget is None:  # one per app (its event loop), made at its first clone
        budget = state.clone_upload_budget = UploadBudget()
    clips = CLONE_UPLOAD_CLIPS_PER_PLACE * runtime_of(request).cloner.max_concurrent
    limit = round(clips * (max_clip_bytes + FORM_OVERHEAD_BYTES))
    return UploadHold(budget, limit, CLONE_SLOT_WAIT_S, CLONE_RETRY_AFTER_S)


async def clone_voice(request: Request) -> Response:
    rid = start_request(request)
    await _authorise(request, write="clone voices")
    rt = runtime_of(request)
    if not rt.codec.can_encode:
        raise CloningUnavailableError(
            "voice cloning needs NanoCodec's encoder, which only the NeMo-built codec has; this server runs the "
            f"torch decoder (GEPARD_CODEC_IMPL={rt.settings.codec_impl}): install NeMo (./run.sh setup) and restart")
    # accepted work from here (the drain waits for it: api/lifecycle.py), the upload included
    rt.clones_in_flight += 1
    hold = _upload_hold(request, rt.cloner.limits.max_bytes)
    try:
        form = await read_clone_form(request, rt.cloner.limits.max_bytes, hold=hold, timeout_s=rt.settings.clone_upload_timeout_s)
        async with _clone_place(request):  # once the upload is in: a slow one holds no place
            return await _clone(request, rt, rid, form)
    finally:
        hold.release()
        rt.clones_in_flight -= 1


async def _clone(request: Request, rt: "Runtime", rid: str, form: CloneForm) -> Response:
    """Clone the upload and store it; returns only once no thread works for it any more (also
    when its client left: voices/cloning.py), so the caller's place is held until then."""
    cloner = rt.cloner
    await cloner.store.check_health()  # an unreachable store fails fast (503), before the CPU work
    logger.info("clone %s: %r (%s, %d bytes, %s)", rid, form.name, form.language, len(form.clip),
                form.content_type or "no content type")
    # a clone stored after its client left would be a voice nobody learns the id of (an SDK that
    # timed out and retried would store one per attempt): the client leaving cancels it, and the
    # cancel returns once its running step's thread is done
    voice = await unless_client_leaves(request, cloner.clone(
        form.clip, form.filename, form.content_type, form.name, form.language, description=form.description,
        gender=form.gender, accent=form.accent, base_voice_id=form.base_voice_id,
    ))
    rt.metrics.voices_cloned.inc()
    return JSONResponse(voice.to_metadata_dict())


async def list_accents(request: Request) -> Response:
    start_request(request)
    await _authorise(request)
    return JSONResponse({"accents": [a.to_api_dict() for a in ACCENTS]})


def routes() -> list[BaseRoute]:
    return [
        Route("/voices", list_voices, methods=["GET"]),
        Route("/voices/", list_voices, methods=["GET"]),
        Route("/voices/clone", clone_voice, methods=["POST"]),
        Route("/voices/{voice_id}", get_voice, methods=["GET"]),
        Route("/voices/{voice_id}", update_voice, methods=["PATCH"]),
        Route("/voices/{voice_id}", delete_voice, methods=["DELETE"]),
        Route("/accents", list_accents, methods=["GET"]),
    ]
