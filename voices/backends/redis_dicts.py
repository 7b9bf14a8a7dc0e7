"""``RedisDictionaryStore``: pronunciation dictionaries in the voice store's Redis, shared by replicas.

Keys share the voice store's hash tag (one Redis Cluster slot):

    {ns}:pdicts:order   ZSET, every score 0, member "<created_at UTC, 27 chars> <id>" (lex order)
    {ns}:pdicts:body    HASH id -> the dictionary as its API JSON
    {ns}:pdicts:gone:<id>  STRING: a deleted dictionary's old member in the order, for
                        DELETED_CURSOR_TTL_S, so its id still works as a page cursor (expires on its own)

Create, update (compare-and-set on the body) and delete are single Lua scripts, so replicas never
see half a dictionary and concurrent writers cannot interleave.
"""

from __future__ import annotations

from typing import Optional

import redis.asyncio as aioredis

from voices.backends.redis_ordered import SCAN_SCRIPT, order_key_of, order_member, scan_ordered
from voices.backends.redis_store import map_redis_errors
from voices.dictionaries import DictionaryStore, OrderKey, PronunciationDict
from voices.listing import DELETED_CURSOR_TTL_S


# KEYS: order, body; ARGV: id, order member, body
_INSERT = """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
redis.call('ZADD', KEYS[1], 0, ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return 1
"""
# KEYS: body; ARGV: id, expected body, new body. 1 done, 0 absent or changed meanwhile.
_REPLACE = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""
# KEYS: order, body, gone; ARGV: id, order member, seconds the id stays a cursor. 1 deleted, 0 absent.
_DELETE = """
if redis.call('HDEL', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[1], ARGV[2])
redis.call('SET', KEYS[3], ARGV[2], 'EX', tonumber(ARGV[3]))
return 1
"""


class RedisDictionaryStore(DictionaryStore):
    """Dictionaries under ``tag`` (the voice store's ``{namespace}``); borrows ``client``."""

    def __init__(self, client: aioredis.Redis, tag: str) -> None:
        self._client = client
        self._k_order = f"{tag}:pdicts:order"
        self._k_body = f"{tag}:pdicts:body"
        self._k_gone = f"{tag}:pdicts:gone:"  # + id
        self._insert_script = client.register_script(_INSERT)
        self._replace_script = client.register_script(_REPLACE)
        self._delete_script = client.register_script(_DELETE)
        self._scan_script = client.register_script(SCAN_SCRIPT)

    async def _fetch(self, dict_id: str) -> Optional[PronunciationDict]:
        with map_redis_errors(f"get of pronunciation dictionary {dict_id!r}"):
            body = await self._client.hget(self._k_body, dict_id)
        return None if body is None else PronunciationDict.from_json(body)

    async def _insert(self, d: PronunciationDict) -> None:
        with map_redis_errors(f"create of pronunciation dictionary {d.id!r}"):
            await self._insert_script(keys=[self._k_order, self._k_body], args=[d.id, order_member(d.order_key), d.to_json()])

    async def _replace(self, old: PronunciationDict, new: PronunciationDict) -> bool:
        with map_redis_errors(f"update of pronunciation dictionary {old.id!r}"):
            done = await self._replace_script(keys=[self._k_body], args=[old.id, old.to_json(), new.to_json()])
        return done == 1

    async def _remove(self, dict_id: str) -> bool:
        found = await self._fetch(dict_id)
        if found is None:
            return False
        with map_redis_errors(f"delete of pronunciation dictionary {dict_id!r}"):
            done = await self._delete_script(keys=[self._k_order, self._k_body, self._k_gone + dict_id],
                                             args=[dict_id, order_member(found.order_key), DELETED_CURSOR_TTL_S])
        return done == 1

    async def _deleted_order_key(self, dict_id: str) -> Optional[OrderKey]:
        with map_redis_errors(f"cursor of deleted pronunciation dictionary {dict_id!r}"):
            member = await self._client.get(self._k_gone + dict_id)
        if member is None:
            return None
        return order_key_of(member)

    async def _scan(self, after: Optional[OrderKey], *, reverse: bool, count: int) -> list[PronunciationDict]:
        with map_redis_errors("list of pronunciation dictionaries"):
            return await scan_ordered(self._scan_script, self._k_order, self._k_body, after, reverse=reverse,
                                      count=count, decode=PronunciationDict.from_json)
