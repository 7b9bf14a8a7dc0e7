"""``VoiceStore``: the one async API the gateway uses for voices, over Redis or SQLite.

    store = RedisVoiceStore.from_url("redis://...")      # or LocalVoiceStore(data_dir)
    store.register_builtin(default_record)               # in memory: listed, gettable, read-only
    voice = await store.put(record)                      # VoiceExistsError if the id is taken
    prompt = await store.get_prompt(voice_id)            # VoicePrompt, from the LRU when hot
    page = await store.list(limit=10, starting_after=last_id, q="anna")
    await store.delete(voice_id)
    await store.aclose()

The base class holds everything the backends share: builtin voices, the prompt cache, argument
checks, and cursor pagination (merging builtins into the backend's ordered scan). A backend
implements a handful of ``_primitives`` that are each atomic on their own.

Prompt cache and deletes made elsewhere. Every record carries a random *generation* token written
by ``put``. A cache hit is served after a cheap check that the backend still holds that token
(``HGET`` of ~16 bytes on Redis, a primary-key lookup on SQLite), never a full record fetch. So
a voice deleted through another replica is refused on the very next request here. A backend that
hears about deletes as they happen (Redis: every delete, prefix change or change of the voice's
reading locale publishes the voice id, and each store listens) skips that check while it is
listening (``_cache_trusted``): a hot voice
then costs no round trip at all, and a delete elsewhere evicts it as soon as the message lands
(milliseconds); while not listening (starting, reconnecting) the check is made, and so it is at
the next hit of every entry cached before the (re)subscription, as deletes may have been missed. Setting
``revalidate_after_s`` > 0 skips the check for entries validated that recently: no round trip
at all for a hot voice, at the price of serving a voice deleted elsewhere for up to that long.
When the check itself fails because the backend is unavailable, the cached prompt is served
anyway (logged at WARNING): synthesis with known voices survives an outage, and the staleness is
bounded by the outage (a voice deleted elsewhere just before it can be used until it ends).
"""

from __future__ import annotations

import abc
import asyncio
import enum
import functools
import logging
import time
import uuid
from typing import Any, Awaitable, Callable, Optional, Protocol, TypeVar

import torch

from voices._prompt_cache import CacheEntry, CacheInfo, PromptCache
from voices.dictionaries import DictionaryStore, MemoryDictionaryStore
from voices.errors import (
    InvalidCursorError,
    InvalidVoiceError,
    ReadOnlyVoiceError,
    VoiceExistsError,
    VoiceNotFoundError,
    VoiceStoreUnavailableError,
)
from voices.listing import OrderKey, VoiceFilter, VoicePage, check_limit, collect_matches
from voices.models import PATCHABLE_FIELDS, READING_FIELDS, Voice, VoicePrompt, VoiceRecord

logger = logging.getLogger(__name__)

DEFAULT_PROMPT_CACHE_SIZE = 256


class StoreState(enum.Enum):
    OPEN = "open"  # serving calls
    CLOSED = "closed"  # aclose() was called; every call raises RuntimeError


#: The operations timed for monitoring (a small fixed set, so it can be a metric label).
STORE_OPS = ("get_prompt", "get", "list", "create", "update", "delete")


class StoreObserver(Protocol):
    """Told about store calls (for monitoring; no metrics library here). Must be cheap and not raise."""

    def store_op(self, op: str, seconds: float) -> None:
        """One call of ``op`` (one of STORE_OPS) took ``seconds``, whether it succeeded or raised."""

    def prompt_cache(self, hit: bool) -> None:
        """A ``get_prompt`` of a stored voice found its prompt in the LRU (``hit``) or not. Builtin
        voices are always in memory and are not counted."""


_T = TypeVar("_T")


def _timed(op: str) -> Callable[[Callable[..., Awaitable[_T]]], Callable[..., Awaitable[_T]]]:
    """Report the wall time of a public store call to the store's observer (see STORE_OPS)."""

    def wrap(method: Callable[..., Awaitable[_T]]) -> Callable[..., Awaitable[_T]]:
        @functools.wraps(method)
        async def timed(self: "VoiceStore", *args: Any, **kwargs: Any) -> _T:
            started = time.perf_counter()
            try:
                return await method(self, *args, **kwargs)
            finally:
                observer = self.observer
                if observer is not None:
                    try:
                        observer.store_op(op, time.perf_counter() - started)
                    except Exception:  # monitoring never fails a store call
                        logger.exception("voice store observer failed (ignored)")
        return timed
    return wrap


def new_generation() -> str:
    """A fresh token marking one stored version of a record's tensors."""
    return uuid.uuid4().hex[:16]


class VoiceStore(abc.ABC):
    """Async voice store; use one per process (or per event loop), close with ``aclose()``.

    prompt_cache_size: how many prompts the in-process LRU keeps (0 disables it).
    revalidate_after_s: how long a cached prompt is trusted without checking the backend
      (0, the default, checks on every request; see the module docstring).
    """

    def __init__(self, *, prompt_cache_size: int = DEFAULT_PROMPT_CACHE_SIZE,
                 revalidate_after_s: float = 0.0) -> None:
        if revalidate_after_s < 0:
            raise ValueError(f"revalidate_after_s must be >= 0, got {revalidate_after_s}")
        self._cache = PromptCache(prompt_cache_size)
        self._revalidate_after_s = revalidate_after_s
        self._builtins: dict[str, VoiceRecord] = {}
        self._builtin_prompts: dict[str, VoicePrompt] = {}
        self._serving_stale = False  # the last generation check failed: backend unavailable
        self._state = StoreState.OPEN
        self.observer: Optional[StoreObserver] = None  # timings and prompt-cache hits, for monitoring
        #: pronunciation dictionaries kept in the same backend (backends replace this in-memory one)
        self.dictionaries: DictionaryStore = MemoryDictionaryStore()

    # ------------------------------------------------------------------ backend primitives

    @abc.abstractmethod
    async def _fetch_voice(self, voice_id: str) -> Optional[Voice]:
        """The stored voice, or None."""

    @abc.abstractmethod
    async def _deleted_order_key(self, voice_id: str) -> Optional[OrderKey]:
        """Where a voice deleted in the last DELETED_CURSOR_TTL_S stood in the list order, or None:
        a client paging with it as its cursor goes on from there (see ``_cursor_key``)."""

    @abc.abstractmethod
    async def _fetch_record(self, voice_id: str) -> Optional[tuple[VoiceRecord, str]]:
        """The stored record and its generation token, read atomically; None if absent."""

    @abc.abstractmethod
    async def _fetch_generation(self, voice_id: str) -> Optional[str]:
        """The record's generation token (a tiny read), or None if absent."""

    @abc.abstractmethod
    async def _insert(self, record: VoiceRecord, generation: str) -> bool:
        """Store a new record atomically; False (and no change) if the id is taken."""

    @abc.abstractmethod
    async def _update_voice(self, voice_id: str, apply: Any, generation: Optional[str] = None) -> Voice:
        """Atomically replace the stored voice by ``apply(current)`` and return it; with a
        ``generation``, store it too and announce the change as ``_replace_prefix`` does.

        ``apply`` may raise (ReadOnlyVoiceError, InvalidVoiceError): nothing changes then.
        Raises VoiceNotFoundError if absent.
        """

    @abc.abstractmethod
    async def _replace_prefix(self, voice_id: str, apply: Any, prefix: torch.Tensor,
                              generation: str) -> VoiceRecord:
        """Atomically store ``prefix`` (keeping the reference codes), the voice ``apply(current)``
        and the new ``generation``; return the new record. VoiceNotFoundError if absent."""

    @abc.abstractmethod
    async def _remove(self, voice_id: str, allow_builtin: bool) -> None:
        """Atomically delete the record; VoiceNotFoundError if absent, ReadOnlyVoiceError if it
        is builtin and ``allow_builtin`` is false."""

    @abc.abstractmethod
    async def _scan(self, after: Optional[OrderKey], *, reverse: bool, count: int) -> list[Voice]:
        """Up to ``count`` stored voices strictly after ``after`` in order (``reverse``: strictly
        before it, in descending order); ``None`` starts at the beginning (end)."""

    @abc.abstractmethod
    async def _count(self) -> int: ...

    @abc.abstractmethod
    async def _ping(self) -> None:
        """Raise VoiceStoreUnavailableError unless the backend answers."""

    @abc.abstractmethod
    async def _close(self) -> None: ...

    # ------------------------------------------------------------------ lifecycle

    def _check_open(self) -> None:
        if self._state is StoreState.CLOSED:
            raise RuntimeError("voice store is closed; create a new one")

    async def check_health(self) -> None:
        """Raise VoiceStoreUnavailableError when the backend cannot be reached."""
        self._check_open()
        await self._ping()

    async def aclose(self) -> None:
        """Close the backend (idempotent). Builtins and cached prompts are dropped."""
        if self._state is StoreState.CLOSED:
            return
        self._state = StoreState.CLOSED
        self._cache.clear()
        await self._close()

    async def __aenter__(self) -> "VoiceStore":
        self._check_open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.shield(self.aclose())

    # ------------------------------------------------------------------ builtins

    def register_builtin(self, record: VoiceRecord) -> Voice:
        """Serve ``record`` from memory: listed and usable, never patched or deleted.

        Builtins live in this process only (every replica registers the same ones at start-up),
        so they keep working while the backend is down. Returns the voice (``builtin=True``).
        """
        self._check_open()
        voice = record.voice if record.voice.builtin else record.voice.replace(builtin=True)
        record = VoiceRecord(voice=voice, prefix=record.prefix, ref_codes=record.ref_codes)
        self._builtins[voice.id] = record
        self._builtin_prompts[voice.id] = record.prompt()
        logger.info("voice %s registered as builtin (%s)", voice.id, voice.name)
        return voice

    @property
    def builtin_ids(self) -> frozenset[str]:
        return frozenset(self._builtins)

    # ------------------------------------------------------------------ reads

    @_timed("get")
    async def get(self, voice_id: str) -> Voice:
        """The voice with this id; VoiceNotFoundError if there is none."""
        self._check_open()
        builtin = self._builtins.get(voice_id)
        if builtin is not None:
            return builtin.voice
        voice = await self._fetch_voice(voice_id)
        if voice is None:
            raise VoiceNotFoundError(voice_id)
        return voice

    async def get_record(self, voice_id: str) -> VoiceRecord:
        """The full stored record (tensors included), bypassing the prompt cache."""
        self._check_open()
        builtin = self._builtins.get(voice_id)
        if builtin is not None:
            return builtin
        found = await self._fetch_record(voice_id)
        if found is None:
            raise VoiceNotFoundError(voice_id)
        return found[0]

    @_timed("get_prompt")
    async def get_prompt(self, voice_id: str) -> VoicePrompt:
        """The voice's speaker prompt for synthesis (shared: treat the prefix as read-only).

        Hot voices come from the LRU after a generation check (see the module docstring); a
        deleted voice raises VoiceNotFoundError, also when it was deleted by another replica.
        """
        self._check_open()
        builtin = self._builtin_prompts.get(voice_id)
        if builtin is not None:
            return builtin
        entry = self._cache.get(voice_id)
        if self.observer is not None:
            try:
                self.observer.prompt_cache(entry is not None)
            except Exception:
                logger.exception("voice store observer failed (ignored)")
        if entry is not None:
            return await self._revalidate(voice_id, entry)
        return await self._load_prompt(voice_id)

    def _cache_trusted(self) -> bool:
        """True while the backend pushes invalidations to this store (no per-hit check needed)."""
        return False

    async def _revalidate(self, voice_id: str, entry: CacheEntry) -> VoicePrompt:
        now = time.monotonic()
        if self._cache_trusted() and not entry.needs_check:
            return entry.prompt
        if self._revalidate_after_s and now - entry.validated_at < self._revalidate_after_s:
            return entry.prompt
        try:
            generation = await self._fetch_generation(voice_id)
        except VoiceStoreUnavailableError as exc:
            if not self._serving_stale:  # once per outage, not once per request
                self._serving_stale = True
                logger.warning("voice %s: store unavailable, serving cached prompts until it is back: %s",
                               voice_id, exc)
            return entry.prompt
        if self._serving_stale:
            self._serving_stale = False
            logger.info("voice store reachable again; cached prompts are validated again")
        if generation is None:
            self._cache.evict(voice_id)
            raise VoiceNotFoundError(voice_id)
        if generation != entry.generation:  # prefix recomputed, reading locale changed, or stored again
            self._cache.evict(voice_id)
            return await self._load_prompt(voice_id)
        entry.validated_at = now
        return entry.prompt

    async def _load_prompt(self, voice_id: str) -> VoicePrompt:
        # a delete here or on another replica (its eviction lands while we fetch) must not be
        # undone by caching what the fetch read before it
        mark = self._cache.fill_mark()
        found = await self._fetch_record(voice_id)
        if found is None:
            raise VoiceNotFoundError(voice_id)
        record, generation = found
        prompt = record.prompt()
        self._cache.put_if_unchanged(mark, voice_id, CacheEntry(prompt, generation, time.monotonic()))
        return prompt

    async def count(self) -> int:
        """Number of voices, builtins included."""
        self._check_open()
        return len(self._builtins) + await self._count()

    def cache_info(self) -> CacheInfo:
        return self._cache.info()

    def cached_voice_ids(self) -> list[str]:
        """Ids in the prompt cache, least recently used first (for tests and debugging)."""
        return self._cache.keys()

    # ------------------------------------------------------------------ writes

    @_timed("create")
    async def put(self, record: VoiceRecord) -> Voice:
        """Store a new voice. VoiceExistsError if its id is taken (builtins included)."""
        self._check_open()
        voice_id = record.voice.id
        if voice_id in self._builtins:
            raise VoiceExistsError(voice_id)
        generation = new_generation()
        if not await self._insert(record, generation):
            raise VoiceExistsError(voice_id)
        # a freshly cloned voice is usually used at once: cache its prompt now
        self._cache.put(voice_id, CacheEntry(record.prompt(), generation, time.monotonic()))
        logger.info("voice %s stored (%s, fingerprint %s)", voice_id, record.voice.name,
                    record.voice.model_fingerprint or "-")
        return record.voice

    @_timed("update")
    async def update(self, voice_id: str, **fields: Any) -> Voice:
        """Change metadata fields (``PATCHABLE_FIELDS``) of a stored voice and return it.

        InvalidVoiceError names an unknown or immutable field or a bad value; builtin voices
        raise ReadOnlyVoiceError. The speaker prefix never changes, but the prompt also carries the
        voice's reading locale: a change of a field it is read from (``READING_FIELDS``) gives the
        record a new generation, so every replica loads the prompt again at its next use.
        """
        self._check_open()
        bad = sorted(set(fields) - PATCHABLE_FIELDS)
        if bad:
            raise InvalidVoiceError(
                f"cannot update field(s) {bad}; updatable fields are {sorted(PATCHABLE_FIELDS)}"
            )
        if voice_id in self._builtins:
            raise ReadOnlyVoiceError(voice_id, "updated")

        def apply(current: Voice) -> Voice:
            if current.builtin:
                raise ReadOnlyVoiceError(voice_id, "updated")
            return current.replace(**fields)

        generation = new_generation() if READING_FIELDS & set(fields) else None
        if generation is not None:
            self._cache.invalidate_fills()  # a fetch racing this update must not cache the old locale
        voice = await self._update_voice(voice_id, apply, generation)
        if generation is not None:
            self._cache.evict(voice_id)
        logger.info("voice %s updated: %s", voice_id, sorted(fields))
        return voice

    @_timed("delete")
    async def delete(self, voice_id: str, *, allow_builtin: bool = False) -> None:
        """Delete a stored voice; VoiceNotFoundError if absent. Stored voices flagged builtin (e.g.
        preloaded ones) need ``allow_builtin=True``; voices from ``register_builtin`` never go."""
        self._check_open()
        if voice_id in self._builtins:
            raise ReadOnlyVoiceError(voice_id, "deleted")
        self._cache.invalidate_fills()  # a fetch racing this delete must not cache what it removes
        try:
            await self._remove(voice_id, allow_builtin)
        except VoiceNotFoundError:
            self._cache.evict(voice_id)
            raise
        # evicted only once gone: a failed delete (store unavailable) keeps the voice usable
        self._cache.evict(voice_id)
        logger.info("voice %s deleted", voice_id)

    async def replace_prefix(self, voice_id: str, prefix: torch.Tensor, model_fingerprint: str) -> Voice:
        """Store a recomputed speaker prefix [K, hidden] for another checkpoint (see
        ``VoiceCloner.recompute``). Metadata and reference codes are kept; the generation
        changes, so every replica's cached prompt is refreshed on its next use."""
        self._check_open()
        if voice_id in self._builtins:
            raise ReadOnlyVoiceError(voice_id, "recomputed")
        generation = new_generation()
        record = await self._replace_prefix(
            voice_id, lambda current: current.replace(model_fingerprint=model_fingerprint), prefix, generation)
        self._cache.put(voice_id, CacheEntry(record.prompt(), generation, time.monotonic()))
        logger.info("voice %s: prefix recomputed for fingerprint %s", voice_id, model_fingerprint)
        return record.voice

    # ------------------------------------------------------------------ listing

    @_timed("list")
    async def list(
        self,
        limit: int = 10,
        starting_after: Optional[str] = None,
        ending_before: Optional[str] = None,
        q: Optional[str] = None,
        language: Optional[str] = None,
        gender: Optional[str] = None,
        is_owner: Optional[bool] = None,
    ) -> VoicePage:
        """One page of matching voices in (created_at, id) order.

        ``starting_after=<id>``: the first ``limit`` matches strictly after that voice.
        ``ending_before=<id>``: the ``limit`` matches nearest before it, still in forward order.
        Past either end the page is empty. A cursor naming no voice raises InvalidCursorError;
        an empty-string cursor counts as absent.
        """
        self._check_open()
        check_limit(limit)
        flt = VoiceFilter(q=q, language=language, gender=gender, is_owner=is_owner)
        starting_after = starting_after or None
        ending_before = ending_before or None
        if starting_after is not None and ending_before is not None:
            raise InvalidVoiceError("pass starting_after or ending_before, not both")
        reverse = ending_before is not None
        cursor_id = ending_before if reverse else starting_after
        key = None
        if cursor_id is not None:
            key = await self._cursor_key("ending_before" if reverse else "starting_after", cursor_id)
        found = await collect_matches(self._scan, list(self._builtins.values()), key,
                                      reverse=reverse, want=limit + 1, flt=flt)
        has_more = len(found) > limit
        page = found[:limit]
        if reverse:
            page.reverse()
            next_page = page[0].id if has_more and page else None
        else:
            next_page = page[-1].id if has_more and page else None
        return VoicePage(data=page, has_more=has_more, next_page=next_page)

    async def _cursor_key(self, parameter: str, voice_id: str) -> OrderKey:
        builtin = self._builtins.get(voice_id)
        if builtin is not None:
            return builtin.voice.order_key
        voice = await self._fetch_voice(voice_id)
        if voice is not None:
            return voice.order_key
        # The SDKs page with the last id of the page they hold: if someone deleted that voice
        # meanwhile, the walk goes on from where it stood rather than failing half-way.
        key = await self._deleted_order_key(voice_id)
        if key is None:
            raise InvalidCursorError(parameter, voice_id)
        return key
