"""The asynchronous face of an SQLite file's engine whose statements run on the loop's thread.

The store's code is written against SQLAlchemy's AsyncEngine and AsyncConnection.  Their aiosqlite
dialect runs each statement in a greenlet of its own that hands the driver's coroutine back to the
loop and takes its result back: for the SQLite connections here, whose statements never suspend
(store/dialect/sqlite_inline.py), that machinery would be most of what a statement costs, far more
than the driver's own work.  So an SQLite file's engine is SQLAlchemy's synchronous one, with this
in front: the part of AsyncEngine's and AsyncConnection's interface that Corral and its tests use,
where

- a statement runs at once, without suspending, unless it begins a transaction: then it may wait
  for a lock (the writer's BEGIN IMMEDIATE, a read's snapshot), retried after an asynchronous
  sleep, so that the loop goes on meanwhile, up to sqlite_inline.BUSY_TIMEOUT;
- a read transaction gives the rest of the loop one turn as it begins (see `_Connection._run`);
- a connection is taken from the pool only when one is free (a semaphore of the pool's size, waited
  for up to the pool's timeout), so that the synchronous pool never blocks the loop's thread.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator, Callable, Generator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from sqlalchemy.engine import URL, Connection, Dialect, Engine, Transaction
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from corral.store.dialect import sqlite_inline

T = TypeVar("T")


class InlineEngine:
    """AsyncEngine's interface, as used here, over a synchronous SQLite engine."""

    def __init__(self, sync_engine: Engine, url: URL, pool_size: int, writes: bool) -> None:
        self.sync_engine = sync_engine
        self.url = url
        self.writes = writes
        """Its transactions begin with BEGIN IMMEDIATE (the writer), not a deferred BEGIN."""
        self._free = asyncio.Semaphore(pool_size)

    @property
    def dialect(self) -> Dialect:
        return self.sync_engine.dialect

    def connect(self) -> _Connection:
        """A connection, to `await` or to use in `async with` (closed on exit)."""
        return _Connection(self)

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[_Connection]:
        """A connection in a transaction: committed on success, rolled back on error; closed."""
        async with self.connect() as conn, conn.begin():
            yield conn

    async def dispose(self) -> None:
        self.sync_engine.dispose()


class _Transaction:
    """AsyncTransaction's interface: `await conn.begin()` or `async with conn.begin()`."""

    def __init__(self, conn: _Connection, nested: bool = False) -> None:
        self._conn = conn
        self._nested = nested
        self._sync: Transaction | None = None

    async def start(self) -> _Transaction:
        sync = self._conn.sync_connection
        if self._nested:
            self._sync = await self._conn._run(sync.begin_nested)
        else:
            self._sync = await self._conn._run(sync.begin, begins=True)
        return self

    def __await__(self) -> Generator[Any, None, _Transaction]:
        return self.start().__await__()

    async def __aenter__(self) -> _Transaction:
        return await self.start()

    async def __aexit__(self, kind: type[BaseException] | None, value: Any = None, tb: Any = None) -> None:
        if self._sync is not None:
            # SQLAlchemy's own exit, as AsyncTransaction's: a COMMIT that fails is rolled back, so
            # that the connection does not go back to the pool still holding the write lock.
            self._sync.__exit__(kind, value, tb)

    async def commit(self) -> None:
        if self._sync is not None:
            self._sync.commit()

    async def rollback(self) -> None:
        if self._sync is not None:
            self._sync.rollback()


class _Connection:
    """AsyncConnection's interface, as used here, over a synchronous pooled connection."""

    def __init__(self, engine: InlineEngine) -> None:
        self.engine = engine
        self._sync: Connection | None = None
        self._release: Callable[[], Any] = lambda: None

    @property
    def sync_connection(self) -> Connection:
        if self._sync is None:
            raise RuntimeError("the connection is not started (await it, or use it in `async with`)")
        return self._sync

    @property
    def dialect(self) -> Dialect:
        return self.engine.dialect

    async def start(self) -> _Connection:
        if self._sync is None:
            free, pool = self.engine._free, self.engine.sync_engine.pool
            try:
                # Not asyncio.wait_for, which on Python 3.11 can swallow a cancellation (waits.py).
                async with asyncio.timeout(pool.timeout()):  # type: ignore[attr-defined]
                    await free.acquire()
            except TimeoutError:
                raise PoolTimeout(f"no connection free in {pool.status()}") from None
            # Given back at close, or if this is dropped unclosed (its pooled connection is, too).
            self._release = weakref.finalize(self, free.release)
            try:
                self._sync = self.engine.sync_engine.connect()
            except BaseException:
                self._release()
                raise
        return self

    def __await__(self) -> Generator[Any, None, _Connection]:
        return self.start().__await__()

    async def __aenter__(self) -> _Connection:
        return await self.start()

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._sync is not None:
            sync, self._sync = self._sync, None
            try:
                sync.close()
            finally:
                self._release()

    def begin(self) -> _Transaction:
        return _Transaction(self)

    def begin_nested(self) -> _Transaction:
        return _Transaction(self, nested=True)

    def in_transaction(self) -> bool:
        return self.sync_connection.in_transaction()

    async def execute(self, statement: Any, parameters: Any = None, *, execution_options: Any = None) -> Any:
        sync = self.sync_connection
        return await self._run(sync.execute, statement, parameters, execution_options=execution_options)

    async def exec_driver_sql(
        self, statement: str, parameters: Any = None, execution_options: Any = None
    ) -> Any:
        sync = self.sync_connection
        return await self._run(sync.exec_driver_sql, statement, parameters, execution_options)

    async def execution_options(self, **options: Any) -> _Connection:
        self.sync_connection.execution_options(**options)
        return self

    async def run_sync(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return fn(self.sync_connection, *args, **kwargs)

    async def commit(self) -> None:
        self.sync_connection.commit()

    async def rollback(self) -> None:
        self.sync_connection.rollback()

    async def _run(self, fn: Callable[..., T], *args: Any, begins: bool = False, **kwargs: Any) -> T:
        """`fn` on the connection; if no transaction is open, one is begun first (`begins`: `fn`
        begins it), which may have to wait."""
        sync = self.sync_connection
        if sync.in_transaction():
            return fn(*args, **kwargs)  # inside a transaction nothing waits (sqlite_inline.py)
        if not self.engine.writes:
            # A turn for the rest of the loop when a read transaction begins, not after each read:
            # every turn inside one lets a cycle's write transaction run first, so an agent's order
            # poll (five reads) would wait behind five of them between a placement's commit and its
            # answer, instead of behind one.  Never while holding the write lock: a second manager
            # on the same file must get in between (test_retry_faults: two managers).
            await asyncio.sleep(0)
        deadline = time.monotonic() + sqlite_inline.BUSY_TIMEOUT
        wait = sqlite_inline.FIRST_WAIT
        while True:
            try:
                if not begins:
                    # Begun here, not by SQLAlchemy's autobegin: a connection whose autobegun BEGIN
                    # failed stays "beginning" for SQLAlchemy, and would run every later statement
                    # outside a transaction (without the write lock, and beyond a rollback's reach).
                    sync.begin()
                return fn(*args, **kwargs)
            except DBAPIError as exc:
                # Locked at the BEGIN or at the first read's snapshot: nothing was done, so it is
                # safe to try again (a write only ever runs after BEGIN IMMEDIATE took the lock).
                if not sqlite_inline.locked(exc.orig) or time.monotonic() + wait > deadline:
                    raise
                if sync.in_transaction():
                    sync.rollback()
            await asyncio.sleep(wait)
            wait = min(wait * 2, sqlite_inline.MAX_WAIT)
