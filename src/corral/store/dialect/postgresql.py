"""PostgreSQL's own statements: many rows as one array per column (unnest.py), so that a write is
one statement whatever its row count (asyncpg prepares each distinct SQL text, once per
connection: a text per row count is a round trip and a parse for each); several writes as
data-modifying CTEs of one statement; statements outside a transaction where each is
self-guarded (READ COMMITTED)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Insert, Select, Table, and_, bindparam, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.placement import Placement
from corral.domain.records import KernelReport
from corral.store.bulk import Rows
from corral.store.db import MIGRATION_LOCK, statements, transaction
from corral.store.dialect import unnest
from corral.store.dialect.portable import Portable, all_placed, once
from corral.store.dialect.postgresql_notify import Notifier
from corral.store.dialect.postgresql_reports import apply_reports_at, report_chains
from corral.store.kernels.reports import mark_started
from corral.store.kernels.rows import named, new_value
from corral.store.tables import allocations, kernels
from corral.store.unit import Engine
from corral.wakeup import Wakeup


class _Fenced(Exception):
    """Raised inside a report's transaction to roll back what its earlier rounds wrote."""


class PostgreSQL(Portable):
    name = "postgresql"
    autocommits = True
    journals_in_update = True
    merges_queue_filters = True
    collapses_in_one_statement = True

    def upkeep(self, engine: Engine, wakeup: Wakeup) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """Wake-ups shared with the other managers on the database (LISTEN/NOTIFY): a session one
        manager admits wakes the loop another holds."""
        notifier = Notifier(engine.url, wakeup)
        wakeup.broadcast = notifier.send
        return [("wake-ups", notifier.run())]

    async def lock_migrations(self, conn: AsyncConnection) -> None:
        """An advisory lock, taken before Alembic reads the version: managers that both read none
        would both create the tables, and one fail."""
        await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")

    async def insert_rows(
        self,
        conn: AsyncConnection,
        table: Table,
        columns: tuple[str, ...],
        rows: Sequence[tuple[Any, ...]],
        same: Mapping[str, Any],
    ) -> None:
        params = {**unnest.unnest_params(table, columns, "", rows), **same}
        await conn.execute(_unnest_insert(table, columns, tuple(same)), params)

    async def insert_together(self, conn: AsyncConnection, parts: Sequence[Rows]) -> None:
        """One statement, each part but the last a data-modifying WITH of the last (a round trip
        saved per part); the server checks foreign keys at the statement's end, so a part's rows
        may refer to an earlier part's."""
        if len(parts) < 2:
            await super().insert_together(conn, parts)
            return
        params: dict[str, Any] = {}
        for i, p in enumerate(parts):
            params |= unnest.unnest_params(p.table, p.columns, _prefix(i), p.rows)
            params |= {_prefix(i) + name: value for name, value in p.same.items()}
        await conn.execute(_together(tuple((p.table, p.columns, tuple(p.same)) for p in parts)), params)

    async def place_kernels(
        self, conn: AsyncConnection, placed: dict[str, Placement], now: datetime
    ) -> list[dict[str, Any]]:
        """The allocations and the kernels' agents in one statement, one text whatever the number
        of kernels placed."""
        ranks = [(sid, rank, agent) for sid, p in placed.items() for rank, agent in enumerate(p.agent_ids)]
        params = {**unnest.arrays(_PLACED, ranks), "p_now": now}
        rows = [dict(r._mapping) for r in await conn.execute(_placements_statement(), params)]
        all_placed(placed, len(rows), rows[0]["kernels_of_placed"] if rows else 0)
        for r in rows:
            del r["kernels_of_placed"]
        return rows

    async def write_kernels(
        self,
        conn: AsyncConnection,
        fields: tuple[str, ...],
        rows: Sequence[tuple[Any, ...]],
        now: datetime | None,
    ) -> None:
        """One UPDATE ... FROM unnest(...) for every row."""
        once(rows)
        shared = {"k_now": now} if now is not None else {}
        await conn.execute(_writes(fields, now is not None), {**unnest.arrays(named(fields), rows), **shared})

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
        """The fence rides in the report's statements (postgresql_reports.py): a report of one
        round (most) is one round trip, with no reads of the epoch first, and needs no transaction.
        The contact, when due, is written first on its own (see round_statement)."""
        recorded = await beat()
        outright, rounds = report_chains(reports)
        try:
            async with (statements if len(rounds) <= 1 else transaction)(engine) as conn:
                found = await apply_reports_at(conn, agent_id, epoch, outright, rounds, now)
                if found is None:
                    raise _Fenced  # raised here: what earlier rounds wrote is rolled back
        except _Fenced:
            return None
        refused, unmarked = found
        if unmarked:  # sessions someone held when the round ran: marked now, nothing else held
            async with statements(engine) as conn:
                await mark_started(conn, unmarked, now)
        return refused, recorded


_PLACED = (
    ("p_session", kernels.c.session_id.type),
    ("p_rank", kernels.c.rank.type),
    ("p_agent", kernels.c.agent_id.type),
)


@cache
def _placements_statement() -> Select[Any]:
    """INSERT the allocations of the kernels at (session, rank) on their agents, returning them;
    and UPDATE those kernels' agent."""
    placed = select(*unnest.rows(_PLACED).c).cte("placed")
    at = and_(kernels.c.session_id == placed.c.p_session, kernels.c.rank == placed.c.p_rank)
    now = bindparam("p_now", type_=allocations.c.created_at.type)
    chosen = select(kernels.c.id, kernels.c.session_id, placed.c.p_agent, kernels.c.resources, now).where(at)
    columns = ["kernel_id", "session_id", "agent_id", "slots", "created_at"]
    returned = [allocations.c[c] for c in columns[:-1]]
    added = insert(allocations).from_select(columns, chosen).returning(*returned).cte("added")
    assigned = update(kernels).where(at).values(agent_id=placed.c.p_agent, devices=None).cte("assigned")
    # Every kernel of the placed sessions, ranked or not: one without a rank is caught too.
    found = (
        select(func.count())
        .select_from(kernels)
        .where(kernels.c.session_id.in_(select(placed.c.p_session)))
        .scalar_subquery()
    )
    return select(*added.c, found.label("kernels_of_placed")).add_cte(assigned)


@cache
def _writes(fields: tuple[str, ...], timed: bool) -> Any:
    """write_kernels' statement: UPDATE ... FROM unnest(...)."""
    given = unnest.rows(named(fields))
    values: dict[str, Any] = {}
    for field, (name, type_) in zip(fields, named(fields), strict=True):
        values[field] = new_value(field, unnest.picked(given, name, type_))
    key = values.pop("id")
    if timed:
        values["status_changed_at"] = bindparam("k_now", type_=kernels.c.status_changed_at.type)
    return update(kernels).where(kernels.c.id == key).values(**values)


@cache
def _unnest_insert(table: Table, columns: tuple[str, ...], same: tuple[str, ...]) -> Insert:
    """unnest_insert of every row, the shared values bound as their columns' names."""
    return unnest.unnest_insert(table, columns, "", {c: bindparam(c, type_=table.c[c].type) for c in same})


def _prefix(part: int) -> str:
    return f"t{part}_"


@cache
def _together(shape: tuple[tuple[Table, tuple[str, ...], tuple[str, ...]], ...]) -> Insert:
    """insert_together's statement for parts of this shape (table, columns, shared values)."""
    inserts = [
        unnest.unnest_insert(
            table,
            columns,
            _prefix(i),
            {c: bindparam(_prefix(i) + c, type_=table.c[c].type) for c in same},
        )
        for i, (table, columns, same) in enumerate(shape)
    ]
    *first, last = inserts
    return last.add_cte(*(ins.cte(f"inserted_{i}") for i, ins in enumerate(first)))
