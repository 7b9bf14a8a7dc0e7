"""The ``POST /voices/clone`` multipart body, read under a size limit (protocol section 2.3).

    hold = UploadHold(budget, limit_bytes, wait_s, retry_after_s)   # this request's share of the budget
    form = await read_clone_form(request, max_clip_bytes, hold=hold, timeout_s=120)   # CloneForm
    ...                                                              # clone it
    hold.release()

Fields as the SDKs send them: the ``clip`` file part, ``name`` and ``language`` (required),
``description``, ``base_voice_id``, ``accent`` and ``gender`` (optional; empty means absent). The
2.x fields ``mode`` and ``enhance`` are accepted and ignored, as are unknown fields (logged).
``language`` is a BCP 47 tag of at most ``MAX_LANGUAGE_CHARS`` (35) characters whose language is
an ISO 639 code; it is stored in its canonical form (``EN_us`` -> ``en-US``, ``zh_hans`` ->
``zh-Hans``; ``normalise_language``).

The limit is enforced while the body streams in: more than ``max_clip_bytes`` plus
``FORM_OVERHEAD_BYTES`` (room for the other fields and the part headers) is a 400 before the
rest is parsed. The remainder is then drained up to ``DRAIN_LIMIT_BYTES`` and discarded, so a
client that writes its whole body before reading (httpx, the SDKs) sees the 400 rather than a
reset connection, which the SDKs would retry twice.

Two bounds hold for uploads as a whole, since a clone place is taken only once its upload is in
(api/routes/voices.py), so slow uploads cannot hold places:

- memory: every byte read is taken from the app's ``UploadBudget`` as it arrives (a slow upload
  holds only what it sent) and given back when the request ends. A byte that finds the budget full
  waits up to ``wait_s`` for room, then the upload is refused with 429 ``concurrency_limited``
  (retry advice; the server reads and drops the rest of the body after the answer);
- time: the whole body must arrive within ``timeout_s``, else 408 ``request_timeout`` (the rest is
  not read).

A body that ends before the multipart closing boundary (``--boundary--``) is a 400
``invalid_multipart`` however many parts came whole; a part in the wrong form (``name`` sent as a
file, ``clip`` as a text field) is a 400 naming that field.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import AsyncIterator, Optional

from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from api.errors import BadRequestError, RateLimitedError, RequestTimeoutError
from api.protocol import InvalidFieldError, MissingFieldError
from voices.accents import accent_id_problem

logger = logging.getLogger(__name__)

FORM_OVERHEAD_BYTES = 64 * 1024
MAX_FIELD_BYTES = 16 * 1024  # any one text field (a description is at most 4096 characters)
DRAIN_LIMIT_BYTES = 64 * 1024 * 1024
KNOWN_FIELDS = frozenset({"clip", "name", "language", "description", "base_voice_id", "accent", "gender"})
IGNORED_FIELDS = frozenset({"mode", "enhance"})  # Python SDK 2.x
FILE_FIELD = "clip"  # the one file part; every other field is text
#: Longest ``language`` (RFC 5646 asks implementations to take tags of at least 35 characters; no
#: real one is longer, and the same bound holds on the TTS routes: api/protocol/requests.py).
MAX_LANGUAGE_CHARS = 35
#: ISO 639-1 (every two-letter language code).
_ISO_639_1 = frozenset("""
    aa ab ae af ak am an ar as av ay az ba be bg bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de
    dv dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia
    id ie ig ii ik io is it iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo
    lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng nl nn no nr nv ny oc oj om or os pa pi pl
    ps pt qu rm rn ro ru rw sa sc sd se sg sh si sk sl sm sn so sq sr ss st su sv sw ta te tg th ti
    tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu""".split())
#: Withdrawn ISO 639-1 codes some platforms still send (Java and Android locales) -> their successors.
_WITHDRAWN_639_1 = {"iw": "he", "in": "id", "ji": "yi", "jw": "jv", "mo": "ro"}
_SUBTAG_RE = re.compile(r"[A-Za-z0-9]{1,8}")


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


class UploadBudget:
    """Bytes of clone uploads an app holds (in memory or in the parser's spooled temporary files),
    at most the ``limit`` each ``take`` names. One per app (event loop); see ``UploadHold``."""

    def __init__(self) -> None:
        self.used = 0
        self._waiters: list[asyncio.Future[None]] = []

    async def take(self, n: int, limit: int, wait_s: float) -> bool:
        """Take ``n`` bytes, waiting up to ``wait_s`` for room; False if none came."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while self.used + n > limit:
            left = deadline - loop.time()
            if left <= 0:
                return False
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait((waiter,), timeout=left)
            finally:
                self._waiters.remove(waiter)
        self.used += n
        return True

    def give_back(self, n: int) -> None:
        self.used -= n
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)


class UploadHold:
    """One request's share of an ``UploadBudget``: ``take`` as bytes arrive (429
    ``concurrency_limited`` when the budget stays full for ``wait_s``), ``release`` all of it when
    the request is over (idempotent)."""

    def __init__(self, budget: UploadBudget, limit_bytes: int, wait_s: float, retry_after_s: float) -> None:
        self.budget = budget
        self.limit_bytes = limit_bytes
        self.wait_s = wait_s
        self.retry_after_s = retry_after_s
        self.held = 0

    async def take(self, n: int) -> None:
        if not await self.budget.take(n, self.limit_bytes, self.wait_s):
            raise RateLimitedError(
                f"clone uploads in progress on this server already hold {self.budget.used / 1e6:.1f} MB, the most it "
                f"buffers ({self.limit_bytes / 1e6:g} MB); retry in {self.retry_after_s:g} s",
                retry_after_s=self.retry_after_s)
        self.held += n

    def release(self) -> None:
        held, self.held = self.held, 0
        if held:
            self.budget.give_back(held)


class _Body:
    """The request body as the parser reads it: counted, bounded by ``limit`` (400 clip_too_large)
    and taken from ``hold`` piece by piece."""

    def __init__(self, request: Request, limit: int, max_clip_bytes: int, hold: Optional[UploadHold]) -> None:
        self.seen = 0
        self._stream = request.stream()
        self._limit = limit
        self._max_clip_bytes = max_clip_bytes
        self._hold = hold

    async def pieces(self) -> AsyncIterator[bytes]:
        async for piece in self._stream:
            self.seen += len(piece)
            if self.seen > self._limit:
                await self.drain()  # so the client reads our 400
                raise ClipUploadTooLargeError(self._limit, self._max_clip_bytes, declared=False)
            if self._hold is not None:
                await self._hold.take(len(piece))  # the rest of a refused body is read and dropped by the server
            yield piece

    async def drain(self) -> None:
        """Read and drop the rest of the body, up to ``DRAIN_LIMIT_BYTES`` in all."""
        async for rest in self._stream:
            self.seen += len(rest)
            if self.seen > DRAIN_LIMIT_BYTES:
                break


class _CloneFormParser(MultiPartParser):
    """Starlette's parser, plus: whether the closing boundary came (``ended``), and errors that
    name the field a misplaced part was sent as."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.ended = False
        self._file_fields: list[str] = []

    def on_end(self) -> None:  # the closing boundary: python-multipart calls this only there
        super().on_end()
        self.ended = True

    def on_headers_finished(self) -> None:
        try:
            super().on_headers_finished()
        except MultiPartException as exc:
            name = self._current_part.field_name
            if exc.message.startswith("Too many files"):  # a second file part: which one is misplaced?
                misplaced = [n for n in (*self._file_fields, name) if n != FILE_FIELD]
                if misplaced:
                    raise _not_a_file(misplaced[0]) from None
                raise InvalidFieldError(f"{FILE_FIELD}: the form has more than one {FILE_FIELD!r} file part; send "
                                        f"one reference clip", field=FILE_FIELD) from None
            if exc.message.startswith("The Content-Disposition header"):
                raise BadRequestError('multipart body: a part has no name in its Content-Disposition header; every '
                                      'part needs one (name="clip", name="name", ...)',
                                      error_code="invalid_multipart") from None
            raise
        if self._current_part.file is not None:
            self._file_fields.append(self._current_part.field_name)

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        try:
            super().on_part_data(data, start, end)
        except MultiPartException:  # a text part over max_part_size
            name = self._current_part.field_name
            if name == FILE_FIELD:
                raise _not_text(FILE_FIELD) from None
            raise InvalidFieldError(f"{name}: a text field may be at most {self.max_part_size // 1024} KB",
                                    field=name) from None

    def close_files(self) -> None:
        """Close every file part begun (those of an unfinished body are in no FormData)."""
        for file in self._files_to_close_on_error:
            file.close()


def _not_a_file(name: str) -> InvalidFieldError:
    return InvalidFieldError(f"{name} must be a text field, got a file part; only {FILE_FIELD!r} is a file "
                             f"(curl: -F '{name}=value', not -F '{name}=@file')", field=name)


def _not_text(name: str) -> InvalidFieldError:
    return InvalidFieldError(f"{name} must be a file part (a filename and the audio bytes: curl -F "
                             f"'{name}=@voice.wav'), got a text field", field=name)


def _text(form: FormData, name: str, *, required: bool = False) -> Optional[str]:
    value = form.get(name)
    if isinstance(value, UploadFile):
        raise _not_a_file(name)
    if value is None or not value.strip():
        if required:
            raise MissingFieldError(f"{name}: field required (multipart form field)", field=name)
        return None
    return value.strip()


def normalise_language(value: str) -> str:
    """``language`` in canonical BCP 47 form (RFC 5646 section 2.1.1 case, ``_`` -> ``-``):
    ``EN_us`` -> ``en-US``, ``zh_hans_cn`` -> ``zh-Hans-CN``. A 400 naming the field for anything
    over ``MAX_LANGUAGE_CHARS``, not well-formed, or whose two-letter language is not ISO 639-1."""
    if len(value) > MAX_LANGUAGE_CHARS:
        raise InvalidFieldError(
            f"language: {len(value)} characters ({value[:12]!r}...) is over the limit of {MAX_LANGUAGE_CHARS} for a "
            "language tag; send a code such as 'en' or 'pt-BR'", field="language")

    def bad(why: str) -> InvalidFieldError:
        return InvalidFieldError(f"language: {value!r} is not a language code: {why}; expected a BCP 47 tag such as "
                                 "'en', 'en-US' or 'pt-BR'", field="language")

    parts = value.replace("_", "-").split("-")
    if not all(_SUBTAG_RE.fullmatch(part) for part in parts):
        raise bad("its parts must be 1 to 8 ASCII letters or digits, separated by '-'")
    primary = parts[0].lower()
    if not (2 <= len(primary) <= 3 and primary.isalpha()):
        raise bad(f"it must start with a 2- or 3-letter ISO 639 language code, not {parts[0]!r}")
    primary = _WITHDRAWN_639_1.get(primary, primary)
    if len(primary) == 2 and primary not in _ISO_639_1:
        raise InvalidFieldError(f"language: {value!r}: {parts[0]!r} is not an ISO 639-1 language code; expected a "
                                "tag such as 'en', 'en-US' or 'pt-BR'", field="language")
    out, i, n = [primary], 1, len(parts)
    while i < n and len(out) < 4 and len(parts[i]) == 3 and parts[i].isalpha():  # extended language
        out.append(parts[i].lower())
        i += 1
    if i < n and len(parts[i]) == 4 and parts[i].isalpha():  # script
        out.append(parts[i].title())
        i += 1
    if i < n and ((len(parts[i]) == 2 and parts[i].isalpha()) or (len(parts[i]) == 3 and parts[i].isdigit())):
        out.append(parts[i].upper())  # region
        i += 1
    while i < n and (len(parts[i]) >= 5 or (len(parts[i]) == 4 and parts[i][0].isdigit())):  # variants
        out.append(parts[i].lower())
        i += 1
    while i < n and len(parts[i]) == 1 and parts[i].lower() != "x":  # extensions: a singleton, then subtags
        start = i + 1
        i = start
        while i < n and len(parts[i]) >= 2:
            i += 1
        if i == start:
            raise bad(f"the extension {parts[start - 1]!r} has no subtags")
        out += [part.lower() for part in parts[start - 1:i]]
    if i < n and parts[i].lower() == "x":  # private use, to the end
        if i + 1 == n:
            raise bad("'x' begins a private-use part but nothing follows it")
        out += [part.lower() for part in parts[i:]]
        i = n
    if i < n:
        raise bad(f"{parts[i]!r} is not a subtag that may stand there (language-script-region-variant)")
    return "-".join(out)


async def read_clone_form(request: Request, max_clip_bytes: int, *, hold: Optional[UploadHold] = None,
                          timeout_s: Optional[float] = None) -> CloneForm:
    """Parse and check the clone form (see the module docstring), taking what it reads from
    ``hold`` and all within ``timeout_s`` (408 past it). The clip's own size limit, format and
    length are checked later by ``VoiceCloner``; this only bounds what is read."""
    # 1) it must be multipart, and not declare more than we would read
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise BadRequestError(
            f"POST /voices/clone expects a multipart/form-data body with a 'clip' file part, got content type "
            f"{content_type or 'none'!r}", error_code="invalid_content_type")
    limit = max_clip_bytes + FORM_OVERHEAD_BYTES
    declared = request.headers.get("content-length", "")
    body = _Body(request, limit, max_clip_bytes, hold)
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            if declared.isdigit() and int(declared) > limit:
                if int(declared) <= DRAIN_LIMIT_BYTES:
                    await body.drain()
                raise ClipUploadTooLargeError(int(declared), max_clip_bytes, declared=True)
            # 2) parse while counting bytes
            return await _parse(request, body)
    except TimeoutError:
        if not deadline.expired():
            raise
        of = f" of the {int(declared)} declared" if declared.isdigit() else ""
        raise RequestTimeoutError(
            f"the clone request body did not arrive within {timeout_s:g} s ({body.seen} bytes{of} came); send the "
            f"clip over a faster link or send a shorter one (only the first seconds are used)") from None


async def _parse(request: Request, body: _Body) -> CloneForm:
    parser = _CloneFormParser(request.headers, body.pieces(), max_files=1,
                              max_fields=len(KNOWN_FIELDS | IGNORED_FIELDS) + 8, max_part_size=MAX_FIELD_BYTES)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise BadRequestError(f"multipart body: {exc.message}", error_code="invalid_multipart") from exc
    if not parser.ended:
        parser.close_files()
        if body.seen == 0:
            raise BadRequestError("multipart body: the body is empty; send a form with a 'clip' file part and 'name' "
                                  "and 'language' fields", error_code="invalid_multipart")
        raise BadRequestError(f"multipart body: the body ended before the closing boundary (after {body.seen} bytes); "
                              "the form is incomplete: send all of it, ending with --boundary--",
                              error_code="invalid_multipart")
    try:
        # 3) the fields
        extra = sorted(set(form.keys()) - KNOWN_FIELDS - IGNORED_FIELDS)
        if extra:
            logger.warning("clone %s: ignored form field(s) %s", getattr(request.state, "request_id", "-"), extra)
        for name in sorted(KNOWN_FIELDS - {FILE_FIELD}):  # a text field sent as a file, named first
            if isinstance(form.get(name), UploadFile):
                raise _not_a_file(name)
        clip = form.get(FILE_FIELD)
        if clip is None:
            raise MissingFieldError("clip: field required (a file part with the reference audio)", field="clip")
        if not isinstance(clip, UploadFile):
            raise _not_text(FILE_FIELD)
        language = normalise_language(_text(form, "language", required=True))
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
