"""The ``POST /voices/clone`` multipart body, read under a size limit (protocol section 2.3).

    form = await read_clone_form(request, max_clip_bytes)   # CloneForm; 400 ApiErrors

Fields as the SDKs send them: the ``clip`` file part, ``name`` and ``language`` (required),
``description``, ``base_voice_id``, ``accent`` and ``gender`` (optional; empty means absent). The
2.x fields ``mode`` and ``enhance`` are accepted and ignored, as are unknown fields (logged).

The limit is enforced while the body streams in: more than ``max_clip_bytes`` plus
``FORM_OVERHEAD_BYTES`` (room for the other fields and the part headers) is a 400 before the
rest is parsed. The remainder is then drained up to ``DRAIN_LIMIT_BYTES`` and discarded, so a
client that writes its whole body before reading (httpx, the SDKs) sees the 400 rather than a
reset connection, which the SDKs would retry twice.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import AsyncIterator, Optional

from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from api.errors import BadRequestError
from api.protocol import InvalidFieldError, MissingFieldError
from voices.accents import accent_id_problem

logger = logging.getLogger(__name__)

FORM_OVERHEAD_BYTES = 64 * 1024
MAX_FIELD_BYTES = 16 * 1024  # any one text field (a description is at most 4096 characters)
DRAIN_LIMIT_BYTES = 64 * 1024 * 1024
KNOWN_FIELDS = frozenset({"clip", "name", "language", "description", "base_voice_id", "accent", "gender"})
IGNORED_FIELDS = frozenset({"mode", "enhance"})  # Python SDK 2.x
_LANGUAGE_RE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*")


@dataclass(frozen=True, slots=True)
class CloneForm:
    """One parsed clone request; ``clip`` is the raw uploaded file (at most the limit + overhead)."""

    clip: bytes
    filename: Optional[str]
    content_type: Optional[str]
    name: str
    language: str
    description: Optional[str] = None
    base_voice_id: Optional[str] = None
    accent: Optional[str] = None
    gender: Optional[str] = None


class ClipUploadTooLargeError(BadRequestError):
    """The multipart body is larger than any clip the server accepts (400, like every bad clip)."""

    title = "Clip too large"

    def __init__(self, body_bytes: int, max_clip_bytes: int, declared: bool) -> None:
        seen = f"declares {body_bytes} bytes" if declared else f"is over {body_bytes} bytes"
        super().__init__(
            f"the clone request body {seen}; the reference clip may be at most {max_clip_bytes} bytes "
            f"({max_clip_bytes / 1e6:g} MB); send a shorter clip (only the first seconds are used)",
            error_code="clip_too_large",
        )


async def _limited(request: Request, limit: int, max_clip_bytes: int) -> AsyncIterator[bytes]:
    """The request body, raising ClipUploadTooLargeError once more than ``limit`` bytes arrived."""
    seen = 0
    stream = request.stream()
    async for piece in stream:
        seen += len(piece)
        if seen > limit:
            async for rest in stream:  # drain (bounded) so the client reads our 400
                seen += len(rest)
                if seen > DRAIN_LIMIT_BYTES:
                    break
            raise ClipUploadTooLargeError(limit, max_clip_bytes, declared=False)
        yield piece


def _text(form: FormData, name: str, *, required: bool = False) -> Optional[str]:
    value = form.get(name)
    if isinstance(value, UploadFile):
        raise InvalidFieldError(f"{name}: expected a text field, got a file part", field=name)
    if value is None or not value.strip():
        if required:
            raise MissingFieldError(f"{name}: field required (multipart form field)", field=name)
        return None
    return value.strip()


async def read_clone_form(request: Request, max_clip_bytes: int) -> CloneForm:
    """Parse and check the clone form (see the module docstring). The clip's own size limit,
    format and length are checked later by ``VoiceCloner``; this only bounds what is read."""
    # 1) it must be multipart, and not declare more than we would read
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise BadRequestError(
            f"POST /voices/clone expects a multipart/form-data body with a 'clip' file part, got content type "
            f"{content_type or 'none'!r}", error_code="invalid_content_type")
    limit = max_clip_bytes + FORM_OVERHEAD_BYTES
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        if int(declared) <= DRAIN_LIMIT_BYTES:
            async for _ in request.stream():
                pass
        raise ClipUploadTooLargeError(int(declared), max_clip_bytes, declared=True)
    # 2) parse while counting bytes
    parser = MultiPartParser(request.headers, _limited(request, limit, max_clip_bytes), max_files=1,
                             max_fields=len(KNOWN_FIELDS | IGNORED_FIELDS) + 8, max_part_size=MAX_FIELD_BYTES)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise BadRequestError(f"multipart body: {exc.message}", error_code="invalid_multipart") from exc
    try:
        # 3) the fields
        extra = sorted(set(form.keys()) - KNOWN_FIELDS - IGNORED_FIELDS)
        if extra:
            logger.warning("clone %s: ignored form field(s) %s", getattr(request.state, "request_id", "-"), extra)
        clip = form.get("clip")
        if clip is None:
            raise MissingFieldError("clip: field required (a file part with the reference audio)", field="clip")
        if not isinstance(clip, UploadFile):
            raise InvalidFieldError("clip: expected a file part (filename and audio bytes), got a text field",
                                    field="clip")
        language = _text(form, "language", required=True)
        if not _LANGUAGE_RE.fullmatch(language):
            raise InvalidFieldError(f"language: {language!r} is not a language code such as 'en' or 'en-US'",
                                    field="language")
        accent = _text(form, "accent")
        if accent is not None and (problem := accent_id_problem(accent)) is not None:
            raise InvalidFieldError(problem, field="accent")
        return CloneForm(
            clip=await clip.read(), filename=clip.filename, content_type=clip.content_type,
            name=_text(form, "name", required=True), language=language,
            description=_text(form, "description"), base_voice_id=_text(form, "base_voice_id"),
            accent=accent, gender=_text(form, "gender"),
        )
    finally:
        await form.close()
