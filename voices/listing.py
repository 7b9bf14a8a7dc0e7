"""List parameters and results: ``VoiceFilter`` (q, language, gender, is_owner) and ``VoicePage``.

Every store lists voices in one total order, ``Voice.order_key`` = (created_at as UTC, id), so
``starting_after`` / ``ending_before`` cursors are positions that never loop or repeat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from voices.errors import InvalidVoiceError
from voices.models import GENDERS, Voice

MAX_LIST_LIMIT = 100


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
