"""SQLite connections run on the event loop's own thread (the writer and the read-only pool).

aiosqlite runs every call in a thread of its own: a statement costs four round trips (cursor,
execute, fetch, close), each a queue put, a thread wake-up and a loop wake-up.  The writer holds
SQLite's one write lock across them, so under load a transaction of a few statements held it for
~15 ms (bench/throughput.py --array: 3,700 statements of 0.5 ms each for work worth 0.1 ms).

Here a statement runs where it is issued; a read transaction gives the loop one turn, at its start.
Inside a `BEGIN IMMEDIATE` transaction nothing waits on a lock (WAL: readers never block the
writer), so the only waits are the BEGIN itself, when another process holds the write lock, and a
read taking its snapshot in rare cases (recovery, a checkpoint restarting the log): those are
retried with an asynchronous sleep, up to the busy timeout, instead of SQLite's busy handler
blocking the thread.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterable, Sequence
from typing import Any

BUSY_TIMEOUT = 30.0
"""Seconds a BEGIN waits for another process's write lock before it fails."""
# Waits for a lock: short, because the other process's gaps between transactions are short.
_FIRST_WAIT = 0.0005
_MAX_WAIT = 0.01


CONNECT_TIMEOUT = 5.0
"""Seconds opening a connection (its WAL pragma) may wait for a lock: once per pooled connection."""


def _begins(sql: str) -> bool:
    return sql.lstrip()[:5].upper() == "BEGIN"


def _locked(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY or "locked" in str(exc)


class Cursor:
    """aiosqlite's cursor interface over a sqlite3 cursor, without a thread."""

    def __init__(self, owner: Connection) -> None:
        self._owner = owner
        self._cur = owner._conn.cursor()

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
        # What may find the database locked is what comes before anything is done, so it is safe
        # to try again: a statement on its own (BEGIN, taking the write lock, above all), or the
        # first one of a transaction (a read taking its snapshot).  Nothing after can: a write
        # runs only inside BEGIN IMMEDIATE, which holds the lock.
        waits = not self._owner._conn.in_transaction or self._owner.fresh
        deadline = time.monotonic() + BUSY_TIMEOUT
        wait = _FIRST_WAIT
        while True:
            try:
                self._cur.execute(sql, parameters)
                break
            except sqlite3.OperationalError as exc:
                if not waits or not _locked(exc) or time.monotonic() + wait > deadline:
                    raise
            await asyncio.sleep(wait)
            wait = min(wait * 2, _MAX_WAIT)
        self._owner.fresh = _begins(sql)
        if self._owner.fresh:
            self._owner.writing = "IMMEDIATE" in sql.upper()
        if not self._owner.writing and (self._owner.fresh or not self._owner._conn.in_transaction):
            # A turn for the rest of the loop when a read transaction begins, not after each read:
            # every turn inside one let a cycle's write transaction run first, so an agent's order
            # poll (five reads) waited behind five of them (45 ms p50 from the placement's commit
            # to its answer under bench/throughput.py --array, 17 ms with one turn).  Never while
            # holding the write lock: a second manager on the same file must get in between
            # (test_retry_faults: two managers).
            await asyncio.sleep(0)
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> Cursor:
        self._cur.executemany(sql, parameters)
        self._owner.fresh = False
        if not self._owner.writing:
            await asyncio.sleep(0)
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
        self.fresh = False
        """A transaction began and nothing ran in it yet."""
        self.writing = False
        """In a BEGIN IMMEDIATE transaction: holding the database's write lock."""

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level

    def cursor(self) -> Cursor:
        return Cursor(self)

    async def commit(self) -> None:
        self.fresh = self.writing = False
        self._conn.commit()

    async def rollback(self) -> None:
        self.fresh = self.writing = False
        self._conn.rollback()

    async def close(self) -> None:
        self._conn.close()

    def stop(self) -> None:
        self._conn.close()

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._conn.create_function(*args, **kwargs)


async def connect(path: str) -> Connection:
    """The caller's transactions only (isolation_level None: no implicit BEGIN), usable from
    whichever thread the loop runs on.  The engine's connect hook sets the pragmas (WAL may wait
    for a lock, up to CONNECT_TIMEOUT), then busy_timeout=0: from then on waits are Cursor.execute's."""
    conn = sqlite3.connect(
        path,
        isolation_level=None,
        check_same_thread=False,
        timeout=CONNECT_TIMEOUT,
        # Prepared statements kept by SQL text.  An IN list is a text of its own for each length,
        # and a busy cycle ran ~760 distinct texts: with the default 128, one statement in six was
        # prepared again (bench/throughput.py --array, counted per connection).
        cached_statements=1024,
    )
    return Connection(conn)
