"""List parameters and results: ``VoiceFilter`` (q, language, gender, is_owner) and ``VoicePage``.

Every store lists voices in one total order, ``Voice.order_key`` = (created_at as UTC, id), so
``starting_after`` / ``ending_before`` cursors are positions that never loop or repeat.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional, Sequence

from voices.errors import InvalidVoiceError
from voices.models import GENDERS, Voice, VoiceRecord

MAX_LIST_LIMIT = 100
#: how long a deleted voice's id still works as a page cursor (its place in the order is kept)
DELETED_CURSOR_TTL_S = 3600
SCAN_BATCH_FILTERED = 128  # rows per backend scan when a filter may reject many of them

OrderKey = tuple[str, str]  # (normalized created_at, id); see Voice.order_key
#: scan(after, reverse=, count=) -> up to count voices strictly beyond ``after`` in that direction
ScanFn = Callable[..., Awaitable[list[Voice]]]


def _norm_lang(tag: str) -> str:
    return tag.strip().replace("_", "-").casefold()


@dataclass(frozen=True, slots=True)
class VoiceFilter:
    """Which voices a list returns; None means "any".

    q: case-insensitive substring of the name, description or id.
    language: ``en`` matches voices whose language is ``en`` or ``en-*`` (``en-GB``, ``en_US``);
      ``en-GB`` matches voices whose language is ``en-GB`` or that list the locale ``en-GB``.
    gender: exact match (``masculine|feminine|gender_neutral``).
    is_owner: exact match.
    """

    q: Optional[str] = None
    language: Optional[str] = None
    gender: Optional[str] = None
    is_owner: Optional[bool] = None

    def __post_init__(self) -> None:
        if self.gender is not None and self.gender not in GENDERS:
            raise InvalidVoiceError(f"gender filter must be one of {sorted(GENDERS)}, got {self.gender!r}")
        if self.q is not None and not isinstance(self.q, str):
            raise InvalidVoiceError(f"q must be a string, got {self.q!r}")
        if self.language is not None and not isinstance(self.language, str):
            raise InvalidVoiceError(f"language filter must be a string, got {self.language!r}")

    @property
    def is_empty(self) -> bool:
        return not self.q and not self.language and self.gender is None and self.is_owner is None

    def matches(self, voice: Voice) -> bool:
        if self.q:
            needle = self.q.casefold()
            if not any(needle in text.casefold() for text in (voice.name, voice.description, voice.id)):
                return False
        if self.language:
            want = _norm_lang(self.language)
            have = _norm_lang(voice.language)
            locales = {_norm_lang(loc.locale) for loc in voice.locales}
            if not (have == want or have.startswith(want + "-") or want in locales):
                return False
        if self.gender is not None and voice.gender != self.gender:
            return False
        if self.is_owner is not None and voice.is_owner != self.is_owner:
            return False
        return True


@dataclass(frozen=True, slots=True)
class VoicePage:
    """One page of a voice list, in forward order.

    has_more: more matching voices lie beyond this page in the direction of travel.
    next_page: the cursor to continue in that direction (the last id going forward, the first id
      going backward), or None when ``has_more`` is false. SDKs ignore both and page with
      ``starting_after=<last id>`` until ``data`` is empty.
    """

    data: list[Voice] = field(default_factory=list)
    has_more: bool = False
    next_page: Optional[str] = None

    def to_api_dict(self) -> dict[str, Any]:
        return {"data": [v.to_api_dict() for v in self.data], "has_more": self.has_more,
                "next_page": self.next_page}


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidVoiceError(f"limit must be an integer from 1 to {MAX_LIST_LIMIT}, got {limit!r}")
    return limit


async def collect_matches(scan: ScanFn, builtins: Sequence[VoiceRecord], key: Optional[OrderKey], *,
                          reverse: bool, want: int, flt: VoiceFilter) -> list[Voice]:
    """Up to ``want`` voices matching ``flt`` strictly beyond ``key`` in the direction of travel
    (ascending, or descending when ``reverse``), merging in-memory ``builtins`` into the
    backend's ordered ``scan``. A stored voice with a builtin's id is shadowed by the builtin."""

    def beyond(k: OrderKey) -> bool:
        return key is None or (k < key if reverse else k > key)

    builtin_ids = {r.voice.id for r in builtins}
    extra = deque(sorted((r.voice for r in builtins if beyond(r.voice.order_key)),
                         key=lambda v: v.order_key, reverse=reverse))
    batch = want if flt.is_empty else max(want, SCAN_BATCH_FILTERED)
    pending: deque[Voice] = deque()
    scan_from, backend_done = key, False
    out: list[Voice] = []
    while len(out) < want:
        # 1) refill from the backend when its rows run out
        if not pending and not backend_done:
            rows = await scan(scan_from, reverse=reverse, count=batch)
            backend_done = len(rows) < batch
            if rows:
                scan_from = rows[-1].order_key
            pending.extend(v for v in rows if v.id not in builtin_ids)
            if not pending and not backend_done:
                continue
        # 2) take whichever source comes first in the direction of travel
        if pending and extra:
            backend_first = (pending[0].order_key > extra[0].order_key) if reverse \
                else (pending[0].order_key < extra[0].order_key)
            voice = pending.popleft() if backend_first else extra.popleft()
        elif pending:
            voice = pending.popleft()
        elif extra:
            voice = extra.popleft()
        else:
            break
        # 3) filter
        if flt.matches(voice):
            out.append(voice)
    return out
