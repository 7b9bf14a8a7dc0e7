"""Pronunciation dictionaries (Cartesia's ``pronunciation_dicts``): the model and the store API.

    store = voice_store.dictionaries                     # every VoiceStore carries one, same backend
    d = await store.create(name="brands", items=parse_items(body["items"]), owner_id="key:1a2b3c4d")
    d = await store.get(d.id)                            # PronunciationDictNotFoundError names the id
    page = await store.list(limit=10, starting_after=last_id)
    d = await store.update(d.id, name="brands v2", items=None)   # None: unchanged
    await store.delete(d.id)

A dictionary is a list of *sounds-like* entries: ``text`` as the client writes it, ``alias`` as
Gepard should read it ("SQL" -> "sequel"). ``api/text/pronunciation.py`` applies them to the
transcript before normalisation. Cartesia also allows IPA aliases (``<<k|ɑ|ɹ|ˈ|t|i|ʒ|ə>>``), but
Gepard reads text only (it has no phoneme input), so ``parse_items`` refuses them with
IpaNotSupportedError instead of speaking the symbols or ignoring the entry.

Dictionaries sit beside the voices in the same backend (SQLite table, or Redis keys under the
voice store's hash tag), so every replica on one Redis sees the same dictionaries. They are listed
in (created_at, id) order with the same ``starting_after`` / ``ending_before`` cursors as voices.
"""

from __future__ import annotations

import abc
import asyncio
import json
import re
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

from voices.errors import (
    InvalidCursorError,
    IpaNotSupportedError,
    InvalidPronunciationDictError,
    PronunciationDictNotFoundError,
    VoiceStoreUnavailableError,
)
from voices.listing import DELETED_CURSOR_TTL_S, MAX_LIST_LIMIT
from voices.models import normalize_created_at, utc_now_iso

MAX_ITEMS = 1000
MAX_ITEM_CHARS = 256  # text and alias each
MAX_DICT_NAME_CHARS = 256

#: Cartesia's IPA notation: phonemes between double angle brackets, separated by bars.
_IPA_MARKUP_RE = re.compile(r"<<|>>")
#: The start of one of Cartesia's transcript tags (api/text/markup.py). An alias is spoken as
#: written, inside the text tags have been read from, so a tag in it would be read out.
_TAG_RE = re.compile(r"</?\s*(?:break|spell|speed|volume|emotion)\b", re.IGNORECASE)
#: Letters and marks that only IPA uses (IPA Extensions block, stress and length marks, the tie
#: bar); no orthography of the languages Gepard normalises (en, es, pt, nl) contains them.
_IPA_CHAR_RE = re.compile("[\u0250-\u02af\u02c8\u02cc\u02d0\u02d1\u0361\u035c]")
#: What no name, text or alias may hold: control characters (C0, DEL, C1) other than tab, line feed
#: and carriage return (whitespace, which matching reads as a space), and unpaired surrogates (JSON
#: can spell them as "\ud800"; they are no character and cannot be stored as UTF-8).
_FORBIDDEN_CHAR_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")

OrderKey = tuple[str, str]  # (normalised created_at, id)


class InvalidDictCursorError(InvalidCursorError, InvalidPronunciationDictError):
    """``starting_after`` / ``ending_before`` names no pronunciation dictionary: 400 ``invalid_cursor``,
    as the same mistake on ``GET /voices`` is (api/errors.py maps InvalidCursorError)."""

    def __init__(self, parameter: str, dict_id: str) -> None:
        InvalidPronunciationDictError.__init__(
            self, f"{parameter}={dict_id!r} is not the id of a pronunciation dictionary in this list", field=parameter)
        self.parameter = parameter
        self.voice_id = self.dict_id = dict_id


def new_dict_id() -> str:
    """A fresh dictionary id (``pdict_`` + 24 hex digits; ids are opaque to the SDKs)."""
    return "pdict_" + uuid.uuid4().hex[:24]


@dataclass(frozen=True, slots=True)
class PronunciationItem:
    """One entry. ``case_sensitive`` None/False: every capitalisation of ``text`` matches (the
    replacement takes the matched word's case); True: ``text`` as written, plus its
    sentence-start capitalisation when it starts in lower case (Cartesia's rule)."""

    text: str
    alias: str
    case_sensitive: Optional[bool] = None

    def to_api_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"text": self.text, "alias": self.alias}
        if self.case_sensitive is not None:
            out["case_sensitive"] = self.case_sensitive
        return out


@dataclass(frozen=True, slots=True)
class PronunciationDict:
    """A stored dictionary, in the shape of the SDK's ``PronunciationDict``."""

    id: str
    name: str
    owner_id: str
    created_at: str
    items: tuple[PronunciationItem, ...] = ()
    pinned: bool = False

    @property
    def order_key(self) -> OrderKey:
        return (normalize_created_at(self.created_at), self.id)

    def to_api_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "owner_id": self.owner_id, "pinned": self.pinned,
                "created_at": self.created_at, "items": [i.to_api_dict() for i in self.items]}

    def to_json(self) -> str:
        return json.dumps(self.to_api_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, blob: str | bytes) -> "PronunciationDict":
        data = json.loads(blob)
        items = tuple(PronunciationItem(i["text"], i["alias"], i.get("case_sensitive")) for i in data["items"])
        return cls(id=data["id"], name=data["name"], owner_id=data["owner_id"], created_at=data["created_at"],
                   items=items, pinned=bool(data.get("pinned", False)))


@dataclass(frozen=True, slots=True)
class DictPage:
    """One page of a dictionary list, in forward order (see ``voices.listing.VoicePage``)."""

    data: list[PronunciationDict]
    has_more: bool = False
    next_page: Optional[str] = None

    def to_api_dict(self) -> dict[str, Any]:
        return {"data": [d.to_api_dict() for d in self.data], "has_more": self.has_more,
                "next_page": self.next_page}


# --- validation ----------------------------------------------------------------------------------


def check_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidPronunciationDictError(f"name: expected a string, got {_json_type(name)}", field="name")
    if not name.strip():
        raise InvalidPronunciationDictError("name: must not be empty", field="name")
    if len(name) > MAX_DICT_NAME_CHARS:
        raise InvalidPronunciationDictError(
            f"name: {len(name)} characters is over the limit of {MAX_DICT_NAME_CHARS}", field="name")
    _check_chars("name", name)
    return name


def _check_chars(field: str, value: str) -> None:
    """InvalidPronunciationDictError naming ``field`` and the character when ``value`` holds a
    control character (tab and line breaks aside) or an unpaired surrogate."""
    bad = _FORBIDDEN_CHAR_RE.search(value)
    if bad is not None:
        what = "an unpaired surrogate" if "\ud800" <= bad.group() <= "\udfff" else "a control character"
        raise InvalidPronunciationDictError(
            f"{field}: {what} (U+{ord(bad.group()):04X}) at position {bad.start()} is not allowed; names, texts "
            "and aliases may hold no control characters other than tab and line breaks", field=field)


def parse_items(raw: object) -> tuple[PronunciationItem, ...]:
    """The wire ``items`` list -> entries; a precise error naming ``items[i].field`` otherwise.

    IPA aliases are refused with IpaNotSupportedError (Gepard has no phoneme input).
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidPronunciationDictError(f"items: expected a list, got {_json_type(raw)}", field="items")
    if len(raw) > MAX_ITEMS:
        raise InvalidPronunciationDictError(f"items: {len(raw)} entries is over the limit of {MAX_ITEMS}",
                                            field="items")
    return tuple(_parse_item(i, entry) for i, entry in enumerate(raw))


def _parse_item(i: int, entry: object) -> PronunciationItem:
    where = f"items[{i}]"
    if not isinstance(entry, dict):
        raise InvalidPronunciationDictError(f"{where}: expected an object, got {_json_type(entry)}", field=where)
    unknown = sorted(set(entry) - {"text", "alias", "case_sensitive"})
    if unknown:
        raise InvalidPronunciationDictError(
            f"{where}: unknown field(s) {unknown}; an entry has text, alias and case_sensitive", field=where)
    values: dict[str, str] = {}
    for name in ("text", "alias"):
        value = entry.get(name)
        if value is None:
            raise InvalidPronunciationDictError(f"{where}.{name}: field required", field=f"{where}.{name}")
        if not isinstance(value, str):
            raise InvalidPronunciationDictError(
                f"{where}.{name}: expected a string, got {_json_type(value)}", field=f"{where}.{name}")
        if not value.strip():
            raise InvalidPronunciationDictError(f"{where}.{name}: must not be empty", field=f"{where}.{name}")
        if len(value) > MAX_ITEM_CHARS:
            raise InvalidPronunciationDictError(
                f"{where}.{name}: {len(value)} characters is over the limit of {MAX_ITEM_CHARS}",
                field=f"{where}.{name}")
        _check_chars(f"{where}.{name}", value)
        values[name] = value.strip()
    case_sensitive = entry.get("case_sensitive")
    if case_sensitive is not None and not isinstance(case_sensitive, bool):
        raise InvalidPronunciationDictError(
            f"{where}.case_sensitive: expected true or false, got {_json_type(case_sensitive)}",
            field=f"{where}.case_sensitive")
    alias = values["alias"]
    if _IPA_MARKUP_RE.search(alias) or _IPA_CHAR_RE.search(alias):
        raise IpaNotSupportedError(i, values["text"], alias)
    tag = _TAG_RE.search(alias)
    if tag is not None:
        raise InvalidPronunciationDictError(
            f"{where}.alias: {tag.group()}...: an alias is a sounds-like spelling, spoken as written; transcript "
            "tags (<break>, <spell>, <speed>, <volume>, <emotion>) are read in the transcript only",
            field=f"{where}.alias")
    return PronunciationItem(values["text"], alias, case_sensitive)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


# --- the store -----------------------------------------------------------------------------------


_UPDATE_ATTEMPTS = 16


class DictionaryStore(abc.ABC):
    """Async CRUD and cursor listing of pronunciation dictionaries over one backend."""

    # backend primitives, each atomic on its own
    @abc.abstractmethod
    async def _fetch(self, dict_id: str) -> Optional[PronunciationDict]: ...

    @abc.abstractmethod
    async def _insert(self, d: PronunciationDict) -> None: ...

    @abc.abstractmethod
    async def _replace(self, old: PronunciationDict, new: PronunciationDict) -> bool:
        """Store ``new`` if the stored one is still ``old``; False when it changed or went."""

    @abc.abstractmethod
    async def _remove(self, dict_id: str) -> bool:
        """Delete, keeping its place in the order for DELETED_CURSOR_TTL_S; False when absent."""

    @abc.abstractmethod
    async def _deleted_order_key(self, dict_id: str) -> Optional[OrderKey]:
        """Where a dictionary deleted in the last DELETED_CURSOR_TTL_S stood, or None."""

    @abc.abstractmethod
    async def _scan(self, after: Optional[OrderKey], *, reverse: bool, count: int) -> list[PronunciationDict]:
        """Up to ``count`` dictionaries strictly after ``after`` in order (``reverse``: before it,
        descending); None starts at the beginning (end)."""

    # public API
    async def create(self, *, name: str, items: Sequence[PronunciationItem] = (), owner_id: str = "") -> PronunciationDict:
        d = PronunciationDict(id=new_dict_id(), name=check_name(name), owner_id=owner_id,
                              created_at=utc_now_iso(), items=tuple(items))
        await self._insert(d)
        return d

    async def get(self, dict_id: str) -> PronunciationDict:
        d = await self._fetch(dict_id) if _plausible_id(dict_id) else None
        if d is None:
            raise PronunciationDictNotFoundError(dict_id)
        return d

    async def update(self, dict_id: str, *, name: Optional[str] = None,
                     items: Optional[Sequence[PronunciationItem]] = None) -> PronunciationDict:
        """Replace the name and/or the whole item list (None leaves a field as it is)."""
        if name is not None:
            check_name(name)
        # Updates from this process take turns, so only other replicas' writers can make the
        # compare-and-set below read again: 40 concurrent PATCHes on one replica all landing
        # beats half of them failing their 16 attempts.
        async with self._update_lock():
            for _ in range(_UPDATE_ATTEMPTS):  # compare-and-set: a concurrent writer makes us read again
                old = await self.get(dict_id)
                new = replace(old, name=old.name if name is None else name,
                              items=old.items if items is None else tuple(items))
                if await self._replace(old, new):
                    return new
        raise VoiceStoreUnavailableError(  # busy, not the client's fault: 503 with retry advice
            f"pronunciation dictionary {dict_id!r} kept changing under this update "
            f"({_UPDATE_ATTEMPTS} attempts); retry")

    def _update_lock(self) -> asyncio.Lock:
        lock = self.__dict__.get("_updates")
        if lock is None:
            lock = self.__dict__["_updates"] = asyncio.Lock()
        return lock

    async def delete(self, dict_id: str) -> None:
        if not _plausible_id(dict_id) or not await self._remove(dict_id):
            raise PronunciationDictNotFoundError(dict_id)

    async def list(self, limit: int = 10, starting_after: Optional[str] = None,
                   ending_before: Optional[str] = None) -> DictPage:
        """One page in (created_at, id) order; past either end ``data`` is empty (the SDKs page
        with ``starting_after=<last id>`` until then)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidPronunciationDictError(f"limit must be an integer from 1 to {MAX_LIST_LIMIT}, got {limit!r}",
                                                field="limit")
        starting_after, ending_before = starting_after or None, ending_before or None
        if starting_after and ending_before:
            raise InvalidPronunciationDictError("pass starting_after or ending_before, not both")
        reverse = ending_before is not None
        cursor = ending_before if reverse else starting_after
        key = None
        if cursor is not None:
            key = await self._cursor_key(cursor)
            if key is None:
                raise InvalidDictCursorError("ending_before" if reverse else "starting_after", cursor)
        rows = await self._scan(key, reverse=reverse, count=limit + 1)
        has_more, page = len(rows) > limit, rows[:limit]
        if reverse:
            page.reverse()
            next_page = page[0].id if has_more and page else None
        else:
            next_page = page[-1].id if has_more and page else None
        return DictPage(page, has_more, next_page)


    async def _cursor_key(self, cursor: str) -> Optional[OrderKey]:
        """The cursor's place in the order: a stored dictionary's, or where a recently deleted one
        stood (an SDK walking pages past a concurrent delete goes on from there); None otherwise."""
        if not _plausible_id(cursor):
            return None
        found = await self._fetch(cursor)
        return found.order_key if found is not None else await self._deleted_order_key(cursor)


def _plausible_id(dict_id: str) -> bool:
    """Ids are short printable strings; anything else cannot be stored, so it is simply absent."""
    return isinstance(dict_id, str) and 0 < len(dict_id) <= 128 and dict_id.isprintable()


class MemoryDictionaryStore(DictionaryStore):
    """In-process dictionaries: the default of stores without a shared backend (test stand-ins)."""

    def __init__(self) -> None:
        self._rows: dict[str, PronunciationDict] = {}
        self._gone: dict[str, tuple[OrderKey, float]] = {}  # id -> (its place, time.monotonic() deleted)

    async def _fetch(self, dict_id: str) -> Optional[PronunciationDict]:
        return self._rows.get(dict_id)

    async def _insert(self, d: PronunciationDict) -> None:
        self._rows[d.id] = d

    async def _replace(self, old: PronunciationDict, new: PronunciationDict) -> bool:
        if self._rows.get(old.id) != old:
            return False
        self._rows[old.id] = new
        return True

    async def _remove(self, dict_id: str) -> bool:
        d = self._rows.pop(dict_id, None)
        if d is None:
            return False
        now = time.monotonic()
        self._gone = {k: v for k, v in self._gone.items() if now - v[1] < DELETED_CURSOR_TTL_S}
        self._gone[dict_id] = (d.order_key, now)
        return True

    async def _deleted_order_key(self, dict_id: str) -> Optional[OrderKey]:
        gone = self._gone.get(dict_id)
        return gone[0] if gone is not None and time.monotonic() - gone[1] < DELETED_CURSOR_TTL_S else None

    async def _scan(self, after: Optional[OrderKey], *, reverse: bool, count: int) -> list[PronunciationDict]:
        rows = sorted(self._rows.values(), key=lambda d: d.order_key, reverse=reverse)
        if after is not None:
            rows = [d for d in rows if (d.order_key < after if reverse else d.order_key > after)]
        return rows[:count]
