"""Bounded in-process LRU of speaker prompts, so a hot voice is not fetched per request.

Each entry remembers the backend's *generation* token of the record it came from (a random token
written by ``put``) and when it was last validated. The store decides whether a hit needs a cheap
generation check; this module only keeps the entries and the counters.

A fetch that misses runs while other code may invalidate the voice (a delete here, another
replica's delete arriving over pub/sub, the listener's distrust_all on subscribing): ``fill_mark()`` before
the fetch and ``put_if_unchanged()`` after it caches the fetched prompt only if nothing was
invalidated meanwhile, so an eviction that found nothing to evict is not undone by the fill.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

from voices.models import VoicePrompt


#: ``CacheEntry.validated_at`` of an entry whose next hit must check its generation whatever else holds.
NEEDS_CHECK = float("-inf")


@dataclass(slots=True)
class CacheEntry:
    prompt: VoicePrompt
    generation: str
    validated_at: float  # time.monotonic() of the last successful generation check (or fetch), or NEEDS_CHECK

    @property
    def needs_check(self) -> bool:
        return self.validated_at == NEEDS_CHECK


@dataclass(frozen=True, slots=True)
class CacheInfo:
    size: int
    max_size: int
    hits: int
    misses: int


class PromptCache:
    """LRU of at most ``max_size`` prompts (an [8, 1024] float32 prefix is 32 KiB, so 256 entries
    hold ~8 MiB). ``max_size=0`` disables caching. Not thread-safe: used from one event loop."""

    def __init__(self, max_size: int) -> None:
        if max_size < 0:
            raise ValueError(f"prompt cache size must be >= 0, got {max_size}")
        self.max_size = max_size
        self._entries: OrderedDict[str, CacheEntry] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self._invalidations = 0  # evictions, clears and announced deletes so far (see fill_mark)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, voice_id: str) -> bool:
        return voice_id in self._entries

    def get(self, voice_id: str) -> Optional[CacheEntry]:
        entry = self._entries.get(voice_id)
        if entry is None:
            self.misses += 1
            return None
        self._entries.move_to_end(voice_id)
        self.hits += 1
        return entry

    def put(self, voice_id: str, entry: CacheEntry) -> None:
        if self.max_size == 0:
            return
        self._entries[voice_id] = entry
        self._entries.move_to_end(voice_id)
        while len(self._entries) > self.max_size:
            self._entries.popitem(last=False)

    def evict(self, voice_id: str) -> None:
        self._entries.pop(voice_id, None)
        self._invalidations += 1

    def clear(self) -> None:
        self._entries.clear()
        self._invalidations += 1

    def distrust_all(self) -> None:
        """Every entry needs a generation check at its next hit (``needs_check``), and fills begun
        before now are not cached: invalidations may have been missed (no listener was subscribed).
        Unlike ``clear`` the prompts stay, so a store outage that follows still finds them."""
        for entry in self._entries.values():
            entry.validated_at = NEEDS_CHECK
        self._invalidations += 1

    def invalidate_fills(self) -> None:
        """Fills begun before now will not be cached (a delete about to run), entries stay."""
        self._invalidations += 1

    def fill_mark(self) -> int:
        """Taken before fetching a record that missed; hand it to ``put_if_unchanged``."""
        return self._invalidations

    def put_if_unchanged(self, mark: int, voice_id: str, entry: CacheEntry) -> None:
        """Cache ``entry`` unless something was invalidated since ``mark`` was taken (it may be
        the very record just fetched; skipping a fill costs one more fetch later, nothing else)."""
        if mark == self._invalidations:
            self.put(voice_id, entry)

    def keys(self) -> list[str]:
        """Cached ids, least recently used first."""
        return list(self._entries)

    def info(self) -> CacheInfo:
        return CacheInfo(size=len(self._entries), max_size=self.max_size, hits=self.hits, misses=self.misses)
