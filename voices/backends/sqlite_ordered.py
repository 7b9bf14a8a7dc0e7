"""Keyset pages over a SQLite table ordered by creation, shared by the voice and dictionary stores.

Each table has ``sort_key`` (the normalised creation time) and ``id``; a page is the rows after (or,
``reverse``, before) a cursor in that order, found through the ``(sort_key, id)`` index with a row
comparison, so a page costs the same wherever it starts.
"""

from __future__ import annotations

from typing import Any, Optional


def ordered_page_query(table: str, column: str, after: Optional[tuple[str, str]], *, reverse: bool,
                       count: int) -> tuple[str, tuple[Any, ...]]:
    """SQL and parameters selecting ``column`` of up to ``count`` rows of ``table`` after ``after``."""
    order = "DESC" if reverse else "ASC"
    if after is None:
        return f"SELECT {column} FROM {table} ORDER BY sort_key {order}, id {order} LIMIT ?", (count,)
    op = "<" if reverse else ">"
    return (f"SELECT {column} FROM {table} WHERE (sort_key, id) {op} (?, ?) ORDER BY sort_key {order}, id {order} "
            "LIMIT ?", (after[0], after[1], count))
