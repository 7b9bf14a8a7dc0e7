"""``LocalVoiceStore``: the embedded default, one SQLite file in a data directory.

``<data_dir>/voices.sqlite3`` holds one row per voice: indexed ordering columns, the msgpack
Voice (``meta``) and the msgpack tensors. Durability settings:

- ``journal_mode=WAL``: readers never block the writer, and several processes (replicas on one
  host, or a CLI) may open the same file.
- ``synchronous=FULL``: each commit fsyncs the WAL, so an acknowledged clone survives power loss.
  NORMAL would also never corrupt the file but may drop the last commits; writes here are rare
  (one per clone, patch or delete) while reads never fsync, so the safer setting costs nothing
  that matters.
- ``busy_timeout``: a second writer waits for the lock instead of failing at once; only if it
  stays locked does a call fail with VoiceStoreUnavailableError.

sqlite3 calls block, so they run in one dedicated worker thread that owns the connection (which
also serialises them; SQLite has one writer anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, TypeVar

import torch

from voices.backends.sqlite_ordered import deleted_sort_key, deleted_table, ordered_page_query, remember_deleted
from voices.errors import ReadOnlyVoiceError, VoiceNotFoundError, VoiceStoreError, VoiceStoreUnavailableError
from voices.models import Voice, VoiceRecord
from voices.listing import OrderKey
from voices.serialization import decode_record, decode_voice, encode_tensors, encode_voice
from voices.store import DEFAULT_PROMPT_CACHE_SIZE, VoiceStore
from voices.backends.local_dicts import LocalDictionaryStore

logger = logging.getLogger(__name__)

DB_FILENAME = "voices.sqlite3"
SCHEMA_VERSION = 1
T = TypeVar("T")

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS voices (
    id          TEXT PRIMARY KEY,
    sort_key    TEXT NOT NULL,      -- created_at as fixed-width UTC; (sort_key, id) is the order
    builtin     INTEGER NOT NULL,
    generation  TEXT NOT NULL,      -- changes whenever the tensors are (re)written
    meta        BLOB NOT NULL,      -- msgpack Voice
    tensors     BLOB NOT NULL       -- msgpack prefix + ref_codes
) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS voices_order ON voices (sort_key, id)",
    deleted_table("voices"),  # where recently deleted voices stood: their ids still work as cursors
)


@contextlib.contextmanager
def map_sqlite_errors(action: str = "an SQLite call") -> Iterator[None]:
    """Re-raise sqlite3/OS errors as VoiceStoreError subclasses, ``from`` the original.

    OperationalError (locked, busy, disk I/O, cannot open) and OSError -> unavailable
    (retryable); any other sqlite3 error (corrupt file, schema mismatch) -> VoiceStoreError.
    """
    try:
        yield
    except VoiceStoreError:
        raise
    except (sqlite3.OperationalError, OSError) as exc:
        raise VoiceStoreUnavailableError(f"voice store unavailable during {action}: SQLite: {exc}") from exc
    except sqlite3.Error as exc:
        raise VoiceStoreError(f"SQLite error during {action}: {exc}") from exc


class LocalVoiceStore(VoiceStore):
    """Voice store in ``<data_dir>/voices.sqlite3``; the directory is created on first use.

    The store owns its connection and worker thread; ``aclose()`` closes both. Several
    instances (processes) may share ``data_dir``.
    """

    def __init__(self, data_dir: str | os.PathLike[str], *,
                 prompt_cache_size: int = DEFAULT_PROMPT_CACHE_SIZE, revalidate_after_s: float = 0.0,
                 busy_timeout_s: float = 5.0) -> None:
        super().__init__(prompt_cache_size=prompt_cache_size, revalidate_after_s=revalidate_after_s)
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / DB_FILENAME
        self._busy_timeout_ms = int(busy_timeout_s * 1000)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="voices-sqlite")
        self._conn: Optional[sqlite3.Connection] = None  # only touched in the worker thread
        self.dictionaries = LocalDictionaryStore(self._run)  # same file, thread and error mapping
        logger.debug("local voice store at %s", self.path)

    # ------------------------------------------------------------------ worker thread

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=self._busy_timeout_ms / 1000)
            try:
                conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    logger.warning("voice store %s: journal_mode is %s, not wal", self.path, mode)
                conn.execute("PRAGMA synchronous = FULL")
                with _transaction(conn):
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    version = conn.execute("PRAGMA user_version").fetchone()[0]
                    if version == 0:
                        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    elif version != SCHEMA_VERSION:
                        raise VoiceStoreError(
                            f"{self.path} has schema version {version}; this build reads {SCHEMA_VERSION}"
                        )
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    async def _run(self, action: str, fn: Callable[..., T], *args: Any) -> T:
        def call() -> T:
            with map_sqlite_errors(action):
                return fn(self._connect(), *args)

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, call)

    # ------------------------------------------------------------------ primitives

    async def _fetch_voice(self, voice_id: str) -> Optional[Voice]:
        row = await self._run(f"get of voice {voice_id!r}", _select_one, "SELECT meta FROM voices WHERE id = ?", voice_id)
        return None if row is None else decode_voice(row[0])

    async def _deleted_order_key(self, voice_id: str) -> Optional[OrderKey]:
        sort_key = await self._run(f"cursor of deleted voice {voice_id!r}", deleted_sort_key, "voices", voice_id)
        return None if sort_key is None else (sort_key, voice_id)

    async def _fetch_record(self, voice_id: str) -> Optional[tuple[VoiceRecord, str]]:
        row = await self._run(f"fetch of voice {voice_id!r}", _select_one,
                              "SELECT meta, generation, tensors FROM voices WHERE id = ?", voice_id)
        if row is None:
            return None
        meta, generation, tensors = row
        return decode_record(decode_voice(meta), tensors), generation

    async def _fetch_generation(self, voice_id: str) -> Optional[str]:
        row = await self._run(f"validation of cached voice {voice_id!r}", _select_one,
                              "SELECT generation FROM voices WHERE id = ?", voice_id)
        return None if row is None else row[0]

    async def _insert(self, record: VoiceRecord, generation: str) -> bool:
        voice = record.voice
        params = (voice.id, voice.order_key[0], int(voice.builtin), generation,
                  encode_voice(voice), encode_tensors(record))

        def insert(conn: sqlite3.Connection) -> bool:
            with _transaction(conn):
                cur = conn.execute(
                    "INSERT INTO voices (id, sort_key, builtin, generation, meta, tensors) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING", params)
                return cur.rowcount == 1

        return await self._run(f"put of voice {voice.id!r}", insert)

    async def _update_voice(self, voice_id: str, apply: Callable[[Voice], Voice],
                            generation: Optional[str] = None) -> Voice:
        def update(conn: sqlite3.Connection) -> Voice:
            with _transaction(conn):
                row = conn.execute("SELECT meta FROM voices WHERE id = ?", (voice_id,)).fetchone()
                if row is None:
                    raise VoiceNotFoundError(voice_id)
                new = apply(decode_voice(row[0]))
                conn.execute("UPDATE voices SET meta = ?, generation = COALESCE(?, generation) WHERE id = ?",
                             (encode_voice(new), generation, voice_id))
                return new

        return await self._run(f"update of voice {voice_id!r}", update)

    async def _replace_prefix(self, voice_id: str, apply: Callable[[Voice], Voice], prefix: torch.Tensor,
                              generation: str) -> VoiceRecord:
        def replace(conn: sqlite3.Connection) -> VoiceRecord:
            with _transaction(conn):
                row = conn.execute("SELECT meta, tensors FROM voices WHERE id = ?", (voice_id,)).fetchone()
                if row is None:
                    raise VoiceNotFoundError(voice_id)
                old = decode_record(decode_voice(row[0]), row[1])
                new = VoiceRecord(voice=apply(old.voice), prefix=prefix, ref_codes=old.ref_codes)
                conn.execute("UPDATE voices SET meta = ?, tensors = ?, generation = ? WHERE id = ?",
                             (encode_voice(new.voice), encode_tensors(new), generation, voice_id))
                return new

        return await self._run(f"prefix replacement of voice {voice_id!r}", replace)

    async def _remove(self, voice_id: str, allow_builtin: bool) -> None:
        def remove(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                row = conn.execute("SELECT builtin, sort_key FROM voices WHERE id = ?", (voice_id,)).fetchone()
                if row is None:
                    raise VoiceNotFoundError(voice_id)
                if row[0] and not allow_builtin:
                    raise ReadOnlyVoiceError(voice_id, "deleted")
                conn.execute("DELETE FROM voices WHERE id = ?", (voice_id,))
                remember_deleted(conn, "voices", voice_id, row[1])

        await self._run(f"delete of voice {voice_id!r}", remove)

    async def _scan(self, after: Optional[OrderKey], *, reverse: bool, count: int) -> list[Voice]:
        sql, params = ordered_page_query("voices", "meta", after, reverse=reverse, count=count)
        rows = await self._run("list of voices", _select_all, sql, *params)
        return [decode_voice(r[0]) for r in rows]

    async def _count(self) -> int:
        row = await self._run("count of voices", _select_one, "SELECT COUNT(*) FROM voices")
        return int(row[0]) if row else 0

    async def _ping(self) -> None:
        await self._run("health check", _select_one, "SELECT 1")

    async def _close(self) -> None:
        def close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, close)
        finally:
            self._executor.shutdown(wait=False)


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on any exception): take the write lock up front so a
    read-modify-write cannot be overtaken by another process."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _select_one(conn: sqlite3.Connection, sql: str, *params: Any) -> Optional[tuple[Any, ...]]:
    return conn.execute(sql, params).fetchone()


def _select_all(conn: sqlite3.Connection, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return conn.execute(sql, params).fetchall()

