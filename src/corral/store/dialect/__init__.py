"""Each backend in its own wing: what the store does differently by backend, as one `Dialect` per
backend, and `of(conn)`, the one place that asks which backend a connection is.

Every statement is portable SQLAlchemy Core.  `Portable` (portable.py) is the behaviour of any
backend; `SQLite` and `PostgreSQL` inherit it and override only where their backend needs
something of its own: row locks, reads outside a transaction, a seek per status, many-row
inserts, the manager's upkeep beside its loops, a lock around migrations.  A noun module never
tests the backend's name: it asks `dialect.of(conn)`.

The implementations are imported on first use, not here: PostgreSQL's needs its driver."""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sqlalchemy import ColumnElement, Select, Table
from sqlalchemy.ext.asyncio import AsyncConnection

if TYPE_CHECKING:
    from corral.store.unit import Engine
    from corral.wakeup import Wakeup

S = TypeVar("S", bound=Select[Any])


class HasDialect(Protocol):
    """A connection or an engine: what names its backend."""

    @property
    def dialect(self) -> Any: ...


class Dialect(Protocol):
    """The operations whose SQL differs by backend."""

    @property
    def name(self) -> str:
        """The backend's name, as SQLAlchemy's dialect has it."""
        ...

    @property
    def reads_outside_transactions(self) -> bool:
        """Whether `reading` (store/db.py) runs each read outside a transaction: under READ
        COMMITTED a read needs no BEGIN and COMMIT round trips.  Where this is False a read is a
        transaction (SQLite's reads take a snapshot either way)."""
        ...

    @property
    def locks_rows(self) -> bool:
        """Whether another transaction may hold a row this one wants (row locks).  Where the
        writer holds the whole database's lock, none can: nothing need be skipped."""
        ...

    @property
    def seeks_each_status(self) -> bool:
        """Whether a read of several statuses is one index seek per status, merged (UNION ALL),
        not one `status IN (...)`.  PostgreSQL plans an IN list from its statistics, and a fresh
        database has none until autovacuum first analyzes it: it then read every session of the
        group, ended ones too, and dropped all but the few it wanted, on every read.  SQLite
        seeks each value of an IN list by the index anyway."""
        ...

    def upkeep(self, engine: Engine, wakeup: Wakeup) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """What a manager runs beside its loops for this backend, by name: wake-ups shared with
        the other managers on the database, or checkpoints of a database file."""
        ...

    async def lock_migrations(self, conn: AsyncConnection) -> None:
        """Serialise managers migrating together, in `conn`'s transaction, before Alembic reads
        the version (each then finds what the one before did)."""
        ...

    def for_update(self, query: S, *, of: Table | None = None, skip_locked: bool = False) -> S:
        """`query` locking the rows it reads for the transaction (`of` one table's; `skip_locked`:
        leaving out rows another transaction holds).  Where the writer holds the whole database's
        lock, `query` as it is."""
        ...

    async def lock(self, conn: AsyncConnection, query: Select[Any]) -> None:
        """Lock the rows `query` reads for `conn`'s transaction, serialising their writers; where
        the writer holds the whole database's lock, nothing (not even the read)."""
        ...

    async def insert_rows(
        self,
        conn: AsyncConnection,
        table: Table,
        columns: tuple[str, ...],
        rows: Sequence[tuple[Any, ...]],
        same: Mapping[str, Any],
    ) -> None:
        """Rows of `columns` (in that order, at least one row), each with the values of `same`."""
        ...

    def committed(self, query: S, txid: ColumnElement[int]) -> S:
        """`query` kept to rows whose writing transaction (`txid`, its id) ended before every
        writer still open: what a reader in (txid, id) order may pass for good (domain/events).
        Where writers take turns, every row it can see is such a row: `query` as it is."""
        ...

    def clock(self) -> ColumnElement[Any]:
        """The database's clock as SQL, comparable with a UTCDateTime column: leases are timed on
        it, so managers whose own clocks disagree agree on who holds one."""
        ...

    async def now(self, conn: AsyncConnection) -> datetime:
        """The database's clock (`clock`), read."""
        ...


_FOUND: dict[str, Dialect] = {}


def of(bound: HasDialect) -> Dialect:
    """The dialect of a connection's (or an engine's) backend."""
    name: str = bound.dialect.name
    found = _FOUND.get(name)
    if found is None:
        found = _FOUND[name] = _make(name)
    return found


def on_postgresql(bound: HasDialect) -> bool:
    """For a migration: whether its PostgreSQL-only step (a partial index's cast, a server-side
    computation) applies. Applied migrations stay as they ran; this keeps their backend test here."""
    return of(bound).name == "postgresql"


def _make(name: str) -> Dialect:
    if name == "postgresql":
        from corral.store.dialect.postgresql import PostgreSQL

        return PostgreSQL()
    if name == "sqlite":
        from corral.store.dialect.sqlite import SQLite

        return SQLite()
    from corral.store.dialect.portable import Portable

    return Portable()
