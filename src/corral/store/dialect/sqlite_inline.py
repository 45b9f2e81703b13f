"""SQLite connections run on the event loop's own thread (the writer and the read-only pool).

aiosqlite runs every call in a thread of its own: a statement costs four round trips (cursor,
execute, fetch, close), each a queue put, a thread wake-up and a loop wake-up.  The writer holds
SQLite's one write lock across them, so under load a transaction of a few statements would hold it
mostly for those hand-offs, several times as long as its work takes.

Here a statement runs where it is issued, through SQLAlchemy's synchronous engine: this module is
the DBAPI connection it is given, and sqlite_inline_engine.py the asynchronous face the store's code
calls.  Inside a transaction nothing waits on a lock (WAL: readers never block the writer, and the
writer's BEGIN IMMEDIATE holds the lock), so the only waits are where a transaction begins: for
another process's write lock, or, in rare cases (recovery, a checkpoint restarting the log), for a
read's snapshot.  Those are retried with an asynchronous sleep, up to the busy timeout, instead of
SQLite's busy handler blocking the thread.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

BUSY_TIMEOUT = 30.0
"""Seconds a BEGIN waits for another process's write lock before it fails."""
# Waits for a lock: short, because the other process's gaps between transactions are short.
FIRST_WAIT = 0.0005
MAX_WAIT = 0.01


CONNECT_TIMEOUT = 5.0
"""Seconds opening a connection (its WAL pragma) may wait for a lock: once per pooled connection."""


def locked(exc: BaseException | None) -> bool:
    """SQLite said the database is locked (another connection holds what this one needs)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY or "locked" in str(exc)


class Cursor:
    """sqlite3's cursor, its rows read at execute (as aiosqlite's adapter reads them): a result
    stays readable once its transaction has ended and its connection gone back to the pool."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._cur = conn.cursor()
        self._rows: deque[Any] = deque()
        self.description: Any = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self.arraysize = 1

    def execute(self, sql: str, parameters: Sequence[Any] | dict[str, Any] = ()) -> Cursor:
        cur = self._cur
        cur.execute(sql, parameters)
        self._took(cur)
        return self

    def executemany(self, sql: str, parameters: Iterable[Any]) -> Cursor:
        cur = self._cur
        cur.executemany(sql, parameters)
        self._took(cur)
        return self

    def _took(self, cur: sqlite3.Cursor) -> None:
        self.description = cur.description
        self._rows = deque(cur.fetchall()) if cur.description else deque()
        self.rowcount = cur.rowcount  # after the fetch: a RETURNING statement counts as it steps
        self.lastrowid = cur.lastrowid

    def fetchone(self) -> Any:
        return self._rows.popleft() if self._rows else None

    def fetchmany(self, size: int | None = None) -> list[Any]:
        rows = self._rows
        return [rows.popleft() for _ in range(min(size or self.arraysize, len(rows)))]

    def fetchall(self) -> list[Any]:
        rows = list(self._rows)
        self._rows.clear()
        return rows

    def close(self) -> None:
        self._rows.clear()
        self._cur.close()


class Connection:
    """sqlite3's connection, handing out buffered cursors (what SQLAlchemy's pysqlite dialect calls)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level

    @isolation_level.setter
    def isolation_level(self, value: Any) -> None:
        self._conn.isolation_level = value

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def cursor(self) -> Cursor:
        return Cursor(self._conn)

    def commit(self) -> None:
        self._conn.commit()

    def rollback(self) -> None:
        self._conn.rollback()

    def close(self) -> None:
        self._conn.close()

    def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._conn.create_function(*args, **kwargs)


def connect(path: str) -> Connection:
    """The caller's transactions only (isolation_level None: no implicit BEGIN), usable from
    whichever thread the loop runs on.  The engine's connect hook sets the pragmas (WAL may wait
    for a lock, up to CONNECT_TIMEOUT), then busy_timeout=0: from then on waits are the engine's
    (store/dialect/sqlite_inline_engine.py)."""
    conn = sqlite3.connect(
        path,
        isolation_level=None,
        check_same_thread=False,
        timeout=CONNECT_TIMEOUT,
        # Prepared statements kept by SQL text.  An IN list is a text of its own for each length,
        # so a busy cycle runs many more distinct texts than the default 128 holds, and each one
        # evicted is prepared again the next time it runs.
        cached_statements=1024,
    )
    return Connection(conn)
