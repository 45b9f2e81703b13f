"""Units of work over an engine (transactions, reads, self-committing statements), the driver's
failures as domain errors, and migrations."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from corral.domain.errors import Duplicate, Unavailable
from corral.store import dialect
from corral.wakeup import Wakeup

MIGRATIONS = Path(__file__).parent / "migrations"


T = TypeVar("T")


IN_CHUNK = 500
"""Values per IN list: below SQLite's bound on a statement's parameters (999 before 3.32), whatever
else a statement binds, as long as it binds the list once."""


def chunks(values: Sequence[T], size: int = IN_CHUNK) -> Iterator[list[T]]:
    """`values` in lists of at most `size`: one IN-list statement each."""
    items = list(values)
    for start in range(0, len(items), size):
        yield items[start : start + size]


def reads_apart(engine: AsyncEngine) -> bool:
    """Whether a read outside a transaction costs less than the transaction would (an empty one is
    BEGIN, the read and COMMIT on PostgreSQL; SQLite's read takes the writer's lock either way)."""
    return dialect.of(engine).reads_outside_transactions


def upkeep(engine: AsyncEngine, wakeup: Wakeup) -> list[tuple[str, Coroutine[Any, Any, None]]]:
    """What a manager runs beside its loops for the engine's backend (store.dialect)."""
    return dialect.of(engine).upkeep(engine, wakeup)


@contextmanager
def translated() -> Iterator[None]:
    """The driver's failures as the model names them: a unique key taken is `Duplicate`, a
    connection that died under the work `Unavailable` (it may have committed).  Every unit of work
    below is wrapped in it; a caller that must tell one statement's failure from the rest wraps
    that statement too."""
    try:
        yield
    except IntegrityError as exc:
        raise Duplicate(str(exc.orig)[:300]) from exc
    except DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
        raise Unavailable(f"connection lost: {type(exc.orig).__name__}", maybe_applied=True) from exc


@asynccontextmanager
async def transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """One database transaction: committed on success, rolled back on any error."""
    with translated():
        async with _connected(engine) as conn, conn.begin():
            yield conn


@asynccontextmanager
async def savepoint(conn: AsyncConnection) -> AsyncIterator[None]:
    """A nested transaction in `conn`'s: on an error only its own statements are undone."""
    with translated():
        async with conn.begin_nested():
            yield


@asynccontextmanager
async def reading(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection for reads (the engine's own BEGIN only), back to the pool on exit."""
    with translated():
        async with _connected(engine, autocommit=dialect.of(engine).reads_outside_transactions) as conn:
            yield conn


def autocommitting(conn: AsyncConnection) -> bool:
    """Whether each statement on `conn` commits on its own (`reading` on some backends)."""
    sync = conn.sync_connection
    return sync is not None and sync.get_execution_options().get("isolation_level") == "AUTOCOMMIT"


@asynccontextmanager
async def _connected(engine: AsyncEngine, autocommit: bool = False) -> AsyncIterator[AsyncConnection]:
    """A pooled connection, closed on exit.  SQLAlchemy's `async with` closes it in a task of its
    own, so that a cancellation cannot cut the close short: a task per use, and a wait behind
    whatever else is ready, for every transaction.  A connection with no transaction open goes back
    to the pool without suspending (SQLite's here never suspend, store/dialect/sqlite_inline.py;
    asyncpg's has nothing to roll back), so it is closed directly.  Two closes may still wait on
    the database: an overflow connection the pool discards (a cancellation there raises after the
    transaction committed, as it could anywhere after COMMIT), and, after an error, one with a
    transaction still open, whose close is shielded."""
    try:
        conn = await engine.connect()
    except (OSError, DBAPIError, PoolTimeout) as exc:
        # Refused, no answer, turned away (the server starting or stopping, a missing database or
        # role), or no pooled connection freed in time: nothing ran on this connection.
        reason = exc.orig if isinstance(exc, DBAPIError) else exc
        raise Unavailable(f"{type(reason).__name__}: {str(reason)[:300]}", maybe_applied=False) from exc
    try:
        if autocommit:
            # Under READ COMMITTED each statement reads its own snapshot, in a transaction or not:
            # outside one, a read costs no BEGIN and ROLLBACK round trips.
            await conn.execution_options(isolation_level="AUTOCOMMIT")
        yield conn
    except BaseException:
        await asyncio.shield(conn.close())
        raise
    await conn.close()


def _upgrade(conn: Connection, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, revision)


MIGRATION_LOCK = 0x636F7272616C
"""PostgreSQL advisory lock key held while migrating ("corral" in ASCII)."""


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Apply Alembic migrations up to `revision` (idempotent).  Managers starting together migrate
    one after the other, each finding what the one before did: on PostgreSQL under an advisory
    lock, taken before Alembic reads the version (both had read none and both created the tables,
    so one failed); on SQLite under the write lock the transaction's BEGIN IMMEDIATE takes."""
    async with engine.begin() as conn:
        await dialect.of(conn).lock_migrations(conn)
        await conn.run_sync(_upgrade, revision)
