"""The SQLite writer runs on the loop's thread: waiting for another process's write lock must leave
the loop free, succeed once the lock is released, and fail cleanly (nothing written) when it never is."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from corral.domain.errors import Unavailable
from corral.domain.records import NewSession
from corral.domain.spec import SessionSpec
from corral.store import sessions
from corral.store.db import transaction, upgrade
from corral.store.dialect import sqlite_checkpoint as checkpoint
from corral.store.dialect import sqlite_inline
from corral.store.dialect.engine import make_engine, make_reader
from corral.store.tables import sessions as session_table
from tests.integration.api.test_bounds import NOW


async def _ready(path: Path) -> str:
    url = f"sqlite+aiosqlite:///{path}"
    engine = make_engine(url)
    await upgrade(engine)
    await engine.dispose()
    return url


def _size(path: str | Path) -> int:
    return os.stat(path).st_size


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    """Another connection (as another process would) takes the write lock and keeps it."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


async def _insert(engine: object, sid: str) -> None:
    async with transaction(engine) as conn:  # type: ignore[arg-type]
        spec = SessionSpec(command=("true",))
        await sessions.insert_session(conn, NewSession(id=sid, name="w", owner="t", spec=spec), NOW)


async def test_a_write_waits_for_the_lock_without_blocking_the_loop(tmp_path: Path) -> None:
    engine = make_engine(await _ready(tmp_path / "c.db"))
    other = _hold_write_lock(tmp_path / "c.db")
    try:
        write = asyncio.create_task(_insert(engine, "s-1"))
        ticks = 0
        for _ in range(20):  # the loop keeps turning while the write waits
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 20 and not write.done()
        other.execute("COMMIT")
        await asyncio.wait_for(write, 5)
        async with make_reader(engine).connect() as conn:
            found = await sessions.get(conn, "s-1")
        assert found is not None
    finally:
        other.close()
        await engine.dispose()


async def test_a_write_that_never_gets_the_lock_fails_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_inline, "BUSY_TIMEOUT", 0.3)
    engine = make_engine(await _ready(tmp_path / "c.db"))
    other = _hold_write_lock(tmp_path / "c.db")
    try:
        with pytest.raises(Exception, match="database is locked"):
            await asyncio.wait_for(_insert(engine, "s-1"), 5)
        other.execute("ROLLBACK")
        async with engine.connect() as conn:
            assert (await conn.execute(select(func.count()).select_from(session_table))).scalar() == 0
        await _insert(engine, "s-2")  # the connection is usable again once the lock is free
    finally:
        other.close()
        await engine.dispose()


async def test_the_log_is_checkpointed_off_the_loop_not_by_the_writer(tmp_path: Path) -> None:
    database = tmp_path / "c.db"
    engine = make_engine(await _ready(database))
    try:
        for _ in range(3):  # 6 MiB in three commits: past the point SQLite itself would checkpoint
            async with transaction(engine) as conn:
                await conn.execute(text("CREATE TABLE IF NOT EXISTS filler (x BLOB)"))
                await conn.execute(text("INSERT INTO filler SELECT randomblob(2097152)"))
        assert _size(f"{database}-wal") > checkpoint.WAL_LIMIT  # left to the checkpointer
        assert _size(database) < 2 << 20
        assert await asyncio.to_thread(checkpoint.checkpoint_once, database)
        assert _size(database) > 6 << 20  # now in the database itself
        other = sqlite3.connect(database)
        busy, frames, done = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        other.close()
        assert (busy, frames) == (0, done)
    finally:
        await engine.dispose()


async def test_a_result_stays_readable_after_its_connection_went_back_to_the_pool(tmp_path: Path) -> None:
    engine = make_engine(await _ready(tmp_path / "c.db"))
    try:
        for sid in ("s-1", "s-2", "s-3"):
            await _insert(engine, sid)
        async with transaction(engine) as conn:
            result = await conn.execute(select(session_table.c.id).order_by(session_table.c.id))
        await _insert(engine, "s-4")  # the same (only) writer connection, used again meanwhile
        assert [r.id for r in result] == ["s-1", "s-2", "s-3"]
    finally:
        await engine.dispose()


async def test_connections_past_the_pool_wait_their_turn_without_blocking_the_loop(tmp_path: Path) -> None:
    engine = make_engine(await _ready(tmp_path / "c.db"))
    try:
        first = await engine.connect()
        second = asyncio.create_task(_insert(engine, "s-1"))  # the writer's pool holds one
        await asyncio.sleep(0.05)
        assert not second.done()  # waiting, and the loop turned meanwhile
        await first.close()
        await asyncio.wait_for(second, 5)
    finally:
        await engine.dispose()


async def test_statements_after_waiting_for_the_lock_are_still_one_transaction(tmp_path: Path) -> None:
    """A connection begun by its first statement, which had to wait for the lock, holds it to the end:
    its writes are one transaction, undone by its rollback."""
    engine = make_engine(await _ready(tmp_path / "c.db"))
    other = _hold_write_lock(tmp_path / "c.db")
    asyncio.get_running_loop().call_later(0.05, other.execute, "COMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text("CREATE TABLE scratch (v TEXT)"))
            assert conn.in_transaction()
            await conn.execute(text("INSERT INTO scratch VALUES ('x')"))
            await conn.rollback()
        async with engine.connect() as conn:
            tables = await conn.execute(text("SELECT name FROM sqlite_master WHERE name = 'scratch'"))
            assert tables.all() == []
    finally:
        other.close()
        await engine.dispose()


async def test_a_commit_that_fails_lets_go_of_the_write_lock(tmp_path: Path) -> None:
    engine = make_engine(await _ready(tmp_path / "c.db"))
    try:
        async with transaction(engine) as conn:
            await conn.execute(text("CREATE TABLE up (id INTEGER PRIMARY KEY)"))
            await conn.execute(
                text("CREATE TABLE down (up_id INTEGER REFERENCES up (id) DEFERRABLE INITIALLY DEFERRED)")
            )
        with pytest.raises(Exception, match="FOREIGN KEY"):
            async with transaction(engine) as conn:
                await conn.execute(text("INSERT INTO down VALUES (1)"))  # fails at COMMIT
        other = sqlite3.connect(tmp_path / "c.db", isolation_level=None, timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")  # free: the failed transaction was rolled back
            other.execute("ROLLBACK")
        finally:
            other.close()
        await _insert(engine, "s-1")
    finally:
        await engine.dispose()


async def test_waiting_for_a_pooled_connection_gives_up_as_unavailable(tmp_path: Path) -> None:
    engine = make_engine(await _ready(tmp_path / "c.db"))
    engine.sync_engine.pool._timeout = 0.2  # type: ignore[attr-defined]  # 60 s in use
    try:
        held = await engine.connect()
        with pytest.raises(Unavailable):
            await asyncio.wait_for(_insert(engine, "s-1"), 5)
        await held.close()
        await _insert(engine, "s-1")
    finally:
        await engine.dispose()
