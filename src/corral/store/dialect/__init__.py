"""Each backend in its own wing: the store's operations whose SQL differs by backend, as one
`Dialect` per backend, and `of(conn)`, the one place that asks which backend a connection is.

`Portable` (portable.py) holds the plain SQLAlchemy Core implementation of every operation, the
one that runs on any backend; `SQLite` and `PostgreSQL` inherit it and override only where their
backend has a statement (or a need) of its own.  A noun module never tests the backend's name: it
calls `dialect.of(conn).<operation>(...)`.

The implementations are imported on first use, not here: they build on the noun modules
(store/kernels/), which import this module."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sqlalchemy import Select, Table
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.placement import Placement
from corral.domain.records import KernelReport

if TYPE_CHECKING:
    from corral.store.bulk import Rows
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
    def autocommits(self) -> bool:
        """Whether `reading` and `statements` (store/db.py) run each statement outside a
        transaction: under READ COMMITTED a read, or a self-guarded write, needs no BEGIN and
        COMMIT round trips.  Where this is False they are one transaction (SQLite's writer takes
        the database's lock either way), so a read ahead of a transaction saves nothing."""
        ...

    @property
    def journals_in_update(self) -> bool:
        """Whether a guarded session move writes its kernels' moves, events and history in its own
        UPDATE (data-modifying WITHs), not in statements after it."""
        ...

    @property
    def merges_queue_filters(self) -> bool:
        """Whether a handler's target query folds its kernel-status filters into one pass over
        the kernels, not one EXISTS each."""
        ...

    @property
    def collapses_in_one_statement(self) -> bool:
        """Whether repeated history rows are counted up and inserted by one statement, not a read
        then an update then an insert."""
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

    async def insert_together(self, conn: AsyncConnection, parts: Sequence[Rows]) -> None:
        """Rows into several tables in the parts' order (a part's rows may refer to an earlier
        part's); every part has rows."""
        ...

    async def place_kernels(
        self, conn: AsyncConnection, placed: dict[str, Placement], now: datetime
    ) -> list[dict[str, Any]]:
        """The allocation rows of the placed sessions' kernels and each kernel's agent (devices
        cleared); returns the allocations written (kernel_id, session_id, agent_id, slots,
        created_at).  Raises when a rank has no kernel or a kernel no rank."""
        ...

    async def write_kernels(
        self,
        conn: AsyncConnection,
        fields: tuple[str, ...],
        rows: Sequence[tuple[Any, ...]],
        now: datetime | None,
    ) -> None:
        """Each row's values (kernel id first, each kernel once) written to its kernel as
        store/kernels/rows.py's `new_value` says; with `now`, its status changed then."""
        ...

    async def apply_report(
        self,
        engine: Engine,
        agent_id: str,
        epoch: int,
        reports: Sequence[KernelReport],
        now: datetime,
        *,
        contact: Callable[[AsyncConnection], Awaitable[bool]],
        beat: Callable[[], Awaitable[bool]],
    ) -> tuple[list[str], bool] | None:
        """An agent's batch of reports, each kernel's in the order sent, in transactions of its
        own: the refused kernel ids and whether the agent's contact was recorded; None when
        `epoch` is fenced (nothing of the batch stays written).  The caller gives the contact two
        ways: `contact(conn)` in the batch's transaction (refuses a fenced epoch, writes the
        contact when due), or `beat()` on its own beforehand (writes it when due only), when the
        fence rides in the batch's own statements."""
        ...


_FOUND: dict[str, Dialect] = {}


def of(bound: HasDialect) -> Dialect:
    """The dialect of a connection's (or an engine's) backend."""
    name: str = bound.dialect.name
    found = _FOUND.get(name)
    if found is None:
        found = _FOUND[name] = _make(name)
    return found


def _make(name: str) -> Dialect:
    if name == "postgresql":
        from corral.store.dialect.postgresql import PostgreSQL

        return PostgreSQL()
    if name == "sqlite":
        from corral.store.dialect.sqlite import SQLite

        return SQLite()
    from corral.store.dialect.portable import Portable

    return Portable()
