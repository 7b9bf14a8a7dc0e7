"""``LocalDictionaryStore``: pronunciation dictionaries in the embedded store's SQLite file.

One table beside ``voices`` in ``<data_dir>/voices.sqlite3``, reached through the voice store's
worker thread and connection (so the same durability settings and the same error mapping apply):

    pronunciation_dicts (id TEXT PRIMARY KEY, sort_key TEXT, body TEXT)   -- body: the API JSON

The table is created on first use; the voices schema version is untouched (an older build simply
never reads it).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Awaitable, Callable, Optional, TypeVar

from voices.backends.sqlite_ordered import deleted_sort_key, deleted_table, ordered_page_query, remember_deleted
from voices.dictionaries import DictionaryStore, OrderKey, PronunciationDict

T = TypeVar("T")
#: LocalVoiceStore._run: (action, fn(conn, *args), *args) -> fn's result, in the store's thread
Runner = Callable[..., Awaitable[Any]]

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS pronunciation_dicts (
    id        TEXT PRIMARY KEY,
    sort_key  TEXT NOT NULL,     -- created_at as fixed-width UTC; (sort_key, id) is the list order
    body      TEXT NOT NULL      -- the dictionary as its API JSON
) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS pronunciation_dicts_order ON pronunciation_dicts (sort_key, id)",
    deleted_table("pronunciation_dicts"),  # where recently deleted ones stood: their ids still work as cursors
)


class LocalDictionaryStore(DictionaryStore):
    """Dictionaries in the SQLite file of a ``LocalVoiceStore``; ``run`` is that store's runner."""

    def __init__(self, run: Runner) -> None:
        self._run_in_store = run
        self._ready = False

    async def _run(self, action: str, fn: Callable[..., T], *args: Any) -> T:
        def call(conn: sqlite3.Connection, *inner: Any) -> T:
            if not self._ready:
                for statement in _SCHEMA:
                    conn.execute(statement)
                self._ready = True
            return fn(conn, *inner)

        return await self._run_in_store(action, call, *args)

    async def _fetch(self, dict_id: str) -> Optional[PronunciationDict]:
        def fetch(conn: sqlite3.Connection) -> Optional[str]:
            row = conn.execute("SELECT body FROM pronunciation_dicts WHERE id = ?", (dict_id,)).fetchone()
            return None if row is None else row[0]

        body = await self._run(f"get of pronunciation dictionary {dict_id!r}", fetch)
        return None if body is None else PronunciationDict.from_json(body)

    async def _insert(self, d: PronunciationDict) -> None:
        def insert(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO pronunciation_dicts (id, sort_key, body) VALUES (?, ?, ?)",
                         (d.id, d.order_key[0], d.to_json()))

        await self._run(f"create of pronunciation dictionary {d.id!r}", insert)

    async def _replace(self, old: PronunciationDict, new: PronunciationDict) -> bool:
        def replace(conn: sqlite3.Connection) -> bool:
            # compare-and-set in one statement: only if the stored body is still the one we read
            cur = conn.execute("UPDATE pronunciation_dicts SET body = ? WHERE id = ? AND body = ?",
                               (new.to_json(), old.id, old.to_json()))
            return cur.rowcount == 1

        return await self._run(f"update of pronunciation dictionary {old.id!r}", replace)

    async def _remove(self, dict_id: str) -> bool:
        from voices.backends.local_store import _transaction  # (that module imports this one)

        def remove(conn: sqlite3.Connection) -> bool:
            with _transaction(conn):
                row = conn.execute("SELECT sort_key FROM pronunciation_dicts WHERE id = ?", (dict_id,)).fetchone()
                if row is None:
                    return False
                conn.execute("DELETE FROM pronunciation_dicts WHERE id = ?", (dict_id,))
                remember_deleted(conn, "pronunciation_dicts", dict_id, row[0])
                return True

        return await self._run(f"delete of pronunciation dictionary {dict_id!r}", remove)

    async def _deleted_order_key(self, dict_id: str) -> Optional[OrderKey]:
        sort_key = await self._run(f"cursor of deleted pronunciation dictionary {dict_id!r}", deleted_sort_key,
                                   "pronunciation_dicts", dict_id)
        return None if sort_key is None else (sort_key, dict_id)

    async def _scan(self, after: Optional[OrderKey], *, reverse: bool, count: int) -> list[PronunciationDict]:
        sql, params = ordered_page_query("pronunciation_dicts", "body", after, reverse=reverse, count=count)

        def scan(conn: sqlite3.Connection) -> list[str]:
            return [r[0] for r in conn.execute(sql, params).fetchall()]

        return [PronunciationDict.from_json(b) for b in await self._run("list of pronunciation dictionaries", scan)]
