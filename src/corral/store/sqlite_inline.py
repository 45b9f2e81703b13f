"""The SQLite writer's connection, run on the event loop's own thread.

aiosqlite runs every call in a thread of its own: a statement costs four round trips (cursor,
execute, fetch, close), each a queue put, a thread wake-up and a loop wake-up.  The writer holds
SQLite's one write lock across them, and between them the loop serves anything else that is ready,
so a transaction of a few statements held the lock for ~15 ms under load (measured with
bench/throughput.py --array: 3,700 statements of 0.5 ms for work worth 0.1 ms).

Here a statement runs where it is issued.  Inside a `BEGIN IMMEDIATE` transaction nothing waits on
a lock (WAL: readers never block the writer), so the only wait is the BEGIN itself, when another
process holds the write lock: that one is retried with an asynchronous sleep (the loop stays
free), up to the busy timeout, instead of SQLite's own busy handler blocking the thread.

Readers keep aiosqlite (store.db.make_reader): a long list then never holds up the loop's writes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterable, Sequence
from typing import Any

BUSY_TIMEOUT = 30.0
"""Seconds a BEGIN waits for another process's write lock before it fails."""
_FIRST_WAIT = 0.001
_MAX_WAIT = 0.05


# What may find the database locked: taking the write lock, or a read taking its snapshot (both
# before anything is done, so both are safe to try again).  Nothing else can be: a write runs
# only inside BEGIN IMMEDIATE, which holds the lock.
_WAITS = ("BEGIN", "SELECT")


def _locked(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY or "locked" in str(exc)


class Cursor:
    """aiosqlite's cursor interface over a sqlite3 cursor, without a thread."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._cur = conn.cursor()

    async def __aenter__(self) -> Cursor:
        return self

    async def __aexit__(self, *_: object) -> None:
        self._cur.close()

    @property
    def description(self) -> Any:
        return self._cur.description

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cur.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cur.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cur.arraysize = value

    async def execute(self, sql: str, parameters: Sequence[Any] | dict[str, Any] = ()) -> Cursor:
        if not sql.lstrip()[:6].upper().startswith(_WAITS):
            self._cur.execute(sql, parameters)
            return self
        deadline = time.monotonic() + BUSY_TIMEOUT
        wait = _FIRST_WAIT
        while True:
            try:
                self._cur.execute(sql, parameters)
                return self
            except sqlite3.OperationalError as exc:
                if not _locked(exc) or time.monotonic() + wait > deadline:
                    raise
            await asyncio.sleep(wait)
            wait = min(wait * 2, _MAX_WAIT)

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> Cursor:
        self._cur.executemany(sql, parameters)
        return self

    async def fetchone(self) -> Any:
        return self._cur.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        return self._cur.fetchmany(size if size is not None else self._cur.arraysize)

    async def fetchall(self) -> list[Any]:
        return self._cur.fetchall()

    async def close(self) -> None:
        self._cur.close()


class Connection:
    """aiosqlite's connection interface (what SQLAlchemy's aiosqlite dialect calls) over sqlite3."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._connection = conn  # the dialect checks it is set before commit and rollback
        self._conn = conn

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level

    def cursor(self) -> Cursor:
        return Cursor(self._conn)

    async def commit(self) -> None:
        self._conn.commit()

    async def rollback(self) -> None:
        self._conn.rollback()

    async def close(self) -> None:
        self._conn.close()

    def stop(self) -> None:
        self._conn.close()

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._conn.create_function(*args, **kwargs)


async def connect(path: str) -> Connection:
    """The caller's transactions only (isolation_level None: no implicit BEGIN), no busy handler
    (see Cursor.execute), usable from whichever thread the loop runs on."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=0")
    return Connection(conn)
