"""LocalVoiceStore specifics: persistence across restarts, SQLite settings, unusable paths."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import torch

from tests.voices.conftest import make_record
from voices.backends.local_store import DB_FILENAME, LocalVoiceStore, map_sqlite_errors
from voices.errors import VoiceStoreError, VoiceStoreUnavailableError


async def test_voices_survive_a_restart(tmp_path: Path) -> None:
    records = [make_record(f"p{i}", name=f"name{i}", created_at=f"2026-08-14T10:00:0{i}Z", seed=i) for i in range(3)]
    async with LocalVoiceStore(tmp_path) as first:
        for r in records:
            await first.put(r)
        await first.update("p1", name="renamed")
        await first.delete("p2")
    async with LocalVoiceStore(tmp_path) as second:
        assert [v.id for v in (await second.list()).data] == ["p0", "p1"]
        assert (await second.get("p1")).name == "renamed"
        assert torch.equal((await second.get_prompt("p0")).prefix, records[0].prefix)
        assert torch.equal((await second.get_record("p0")).ref_codes, records[0].ref_codes)


async def test_database_uses_wal_and_a_schema_version(tmp_path: Path) -> None:
    async with LocalVoiceStore(tmp_path / "nested" / "dir") as store:
        await store.check_health()
    conn = sqlite3.connect(tmp_path / "nested" / "dir" / DB_FILENAME)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    finally:
        conn.close()


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    async with LocalVoiceStore(tmp_path) as store:
        await store.check_health()
    conn = sqlite3.connect(tmp_path / DB_FILENAME)
    conn.execute("PRAGMA user_version = 7")
    conn.commit()
    conn.close()
    async with LocalVoiceStore(tmp_path) as store:
        with pytest.raises(VoiceStoreError, match="schema version 7; this build reads 1"):
            await store.count()


async def test_unusable_data_dir_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    async with LocalVoiceStore(blocker / "voices") as store:
        with pytest.raises(VoiceStoreUnavailableError, match="voice store unavailable during health check"):
            await store.check_health()


async def test_locked_database_is_unavailable(tmp_path: Path) -> None:
    async with LocalVoiceStore(tmp_path, busy_timeout_s=0.05) as store:
        await store.put(make_record("before"))
        holder = sqlite3.connect(tmp_path / DB_FILENAME, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            with pytest.raises(VoiceStoreUnavailableError, match="locked"):
                await store.put(make_record("during"))
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await store.put(make_record("after"))
        assert await store.count() == 2


def test_map_sqlite_errors_classifies() -> None:
    with pytest.raises(VoiceStoreUnavailableError):
        with map_sqlite_errors("a test"):
            raise sqlite3.OperationalError("database is locked")
    with pytest.raises(VoiceStoreError) as info:
        with map_sqlite_errors("a test"):
            raise sqlite3.DatabaseError("file is not a database")
    assert not info.value.retryable
