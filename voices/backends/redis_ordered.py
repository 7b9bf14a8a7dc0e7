"""Cursor scans over a Redis sorted set ordered by creation, shared by the voice and dictionary stores.

Each store keeps a sorted set of members ``"<created> <id>"`` (all scores 0, so Redis orders them
lexicographically: by the fixed-width creation time, then the id) and a hash from id to the record.
``scan_ordered`` pages through both in one script call per page, so a page never mixes two states.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Optional, TypeVar

T = TypeVar("T")

#: members per script call (HMGET arguments stay far below Lua's limits)
MAX_SCAN = 500

#: KEYS: order, records; ARGV: lex bound, reverse ("1"/"0"), count.
#: Returns {members, records}: the order members in scan order and each one's record.
SCAN_SCRIPT = """
local members
if ARGV[2] == '1' then
  members = redis.call('ZREVRANGEBYLEX', KEYS[1], ARGV[1], '-', 'LIMIT', 0, tonumber(ARGV[3]))
else
  members = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], '+', 'LIMIT', 0, tonumber(ARGV[3]))
end
if #members == 0 then return {{}, {}} end
local ids = {}
for i, m in ipairs(members) do ids[i] = string.sub(m, 29) end
return {members, redis.call('HMGET', KEYS[2], unpack(ids))}
"""


def order_member(key: tuple[str, str]) -> str:
    """The sorted-set member of ``(created, id)``; created is fixed-width (27 chars), so the id starts at 29."""
    created, item_id = key
    return f"{created} {item_id}"


def order_key_of(member: str | bytes) -> tuple[str, str]:
    """``(created, id)`` of a sorted-set member: the inverse of ``order_member``."""
    text = member.decode() if isinstance(member, bytes) else member
    return text[:27], text[28:]


async def scan_ordered(script: Callable[..., Awaitable[Any]], order_key: str, records_key: str,
                       after: Optional[tuple[str, str]], *, reverse: bool, count: int,
                       decode: Callable[[Any], T]) -> list[T]:
    """Up to ``count`` records after (or, ``reverse``, before) ``after`` in creation order.

    ``script`` is SCAN_SCRIPT registered on the client; the caller maps Redis errors."""
    out: list[T] = []
    bound: str | bytes = ("+" if reverse else "-") if after is None else "(" + order_member(after)
    while True:
        step = min(count - len(out), MAX_SCAN)
        members, records = await script(keys=[order_key, records_key], args=[bound, "1" if reverse else "0", step])
        # a record is never missing (the scripts keep order and records in step); skip one if it were
        out.extend(decode(r) for r in records if r is not None)
        if len(members) < step or len(out) >= count:
            return out
        bound = b"(" + members[-1]
