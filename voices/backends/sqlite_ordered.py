"""Keyset pages over a SQLite table ordered by creation, shared by the voice and dictionary stores.

Each table has ``sort_key`` (the normalised creation time) and ``id``; a page is the rows after (or,
``reverse``, before) a cursor in that order, found through the ``(sort_key, id)`` index with a row
comparison, so a page costs the same wherever it starts.

A deleted row's place is kept in a ``deleted_<table>`` table for DELETED_CURSOR_TTL_S
(``deleted_table``, ``remember_deleted``, ``deleted_sort_key``), so its id still works as a cursor.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Optional

from voices.listing import DELETED_CURSOR_TTL_S


def ordered_page_query(table: str, column: str, after: Optional[tuple[str, str]], *, reverse: bool,
                       count: int) -> tuple[str, tuple[Any, ...]]:
    """SQL and parameters selecting ``column`` of up to ``count`` rows of ``table`` after ``after``."""
    order = "DESC" if reverse else "ASC"
    if after is None:
        return f"SELECT {column} FROM {table} ORDER BY sort_key {order}, id {order} LIMIT ?", (count,)
    op = "<" if reverse else ">"
    return (f"SELECT {column} FROM {table} WHERE (sort_key, id) {op} (?, ?) ORDER BY sort_key {order}, id {order} "
            "LIMIT ?", (after[0], after[1], count))


def deleted_table(table: str) -> str:
    """The schema of ``table``'s deleted places (rows older than the TTL go at the next delete)."""
    return f"""CREATE TABLE IF NOT EXISTS deleted_{table} (
    id          TEXT PRIMARY KEY,
    sort_key    TEXT NOT NULL,
    deleted_at  REAL NOT NULL       -- time.time()
) WITHOUT ROWID"""


def remember_deleted(conn: sqlite3.Connection, table: str, item_id: str, sort_key: str) -> None:
    """Keep a just-deleted row's place (inside the delete's transaction) and drop expired ones."""
    now = time.time()
    conn.execute(f"DELETE FROM deleted_{table} WHERE deleted_at < ?", (now - DELETED_CURSOR_TTL_S,))
    conn.execute(f"INSERT OR REPLACE INTO deleted_{table} (id, sort_key, deleted_at) VALUES (?, ?, ?)",
                 (item_id, sort_key, now))


def deleted_sort_key(conn: sqlite3.Connection, table: str, item_id: str) -> Optional[str]:
    """The sort_key a row of ``table`` deleted within the TTL had, or None."""
    row = conn.execute(f"SELECT sort_key FROM deleted_{table} WHERE id = ? AND deleted_at >= ?",
                       (item_id, time.time() - DELETED_CURSOR_TTL_S)).fetchone()
    return None if row is None else row[0]
