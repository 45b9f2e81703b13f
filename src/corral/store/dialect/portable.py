"""The portable implementation of every Dialect operation: plain SQLAlchemy Core, one statement
at a time where a backend has no set-wise form of its own."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from functools import cache, lru_cache
from typing import Any, cast

from sqlalchemy import Select, Table, bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.placement import Placement
from corral.domain.records import KernelReport
from corral.store.bulk import Rows
from corral.store.db import chunks, transaction
from corral.store.dialect import S
from corral.store.kernels import reports as kernel_reports
from corral.store.kernels.rows import named, new_value
from corral.store.tables import allocations, kernels
from corral.store.unit import Engine
from corral.wakeup import Wakeup


class Portable:
    name = "portable"
    autocommits = False
    journals_in_update = False
    merges_queue_filters = False
    collapses_in_one_statement = False

    def upkeep(self, engine: Engine, wakeup: Wakeup) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """Nothing: one manager, its wake-ups its own."""
        return []

    async def lock_migrations(self, conn: AsyncConnection) -> None:
        """Nothing beyond the transaction's own lock."""

    def for_update(self, query: S, *, of: Table | None = None, skip_locked: bool = False) -> S:
        return cast(S, _locked(query, of, skip_locked))

    async def lock(self, conn: AsyncConnection, query: Select[Any]) -> None:
        await conn.execute(self.for_update(query))

    async def insert_rows(
        self,
        conn: AsyncConnection,
        table: Table,
        columns: tuple[str, ...],
        rows: Sequence[tuple[Any, ...]],
        same: Mapping[str, Any],
    ) -> None:
        await conn.execute(insert(table), [{**dict(zip(columns, row, strict=True)), **same} for row in rows])

    async def insert_together(self, conn: AsyncConnection, parts: Sequence[Rows]) -> None:
        for p in parts:
            await self.insert_rows(conn, p.table, p.columns, p.rows, p.same)

    async def place_kernels(
        self, conn: AsyncConnection, placed: dict[str, Placement], now: datetime
    ) -> list[dict[str, Any]]:
        """The kernels read, the allocations inserted, then a statement per agent (not per kernel)
        for the kernels' agent."""
        rows = []
        kernels_found = 0
        for part in chunks(list(placed)):
            found = (await conn.execute(_PLACED_KERNELS, {"ids": part})).all()
            rows += [
                {
                    "kernel_id": kid,
                    "session_id": sid,
                    "agent_id": ranked[rank],
                    "slots": slots,
                    "created_at": now,
                }
                for kid, sid, rank, slots in found
                if rank < len(ranked := placed[sid].agent_ids)
            ]
            kernels_found += len(found)
        all_placed(placed, len(rows), kernels_found)
        await conn.execute(insert(allocations), rows)
        by_agent: dict[str, list[str]] = defaultdict(list)
        for r in rows:
            by_agent[r["agent_id"]].append(r["kernel_id"])
        for agent_id, kernel_ids in sorted(by_agent.items()):
            for part in chunks(kernel_ids):
                await conn.execute(_ASSIGN_AGENT, {"ids": part, "agent": agent_id})
        return rows

    async def write_kernels(
        self,
        conn: AsyncConnection,
        fields: tuple[str, ...],
        rows: Sequence[tuple[Any, ...]],
        now: datetime | None,
    ) -> None:
        """One executemany of an UPDATE by id."""
        once(rows)
        shared = {"k_now": now} if now is not None else {}
        names = [name for name, _ in named(fields)]
        params = [{**dict(zip(names, row, strict=True)), **shared} for row in rows]
        await conn.execute(_writes(fields, now is not None), params)

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
        """One transaction: the contact (and the fence) first, then the reports in rounds."""
        async with transaction(engine) as conn:
            recorded = await contact(conn)
            refused = await kernel_reports.apply_reports(conn, agent_id, reports, now)
        return refused, recorded


@lru_cache(maxsize=64)
def _locked(query: Select[Any], of: Table | None, skip_locked: bool) -> Select[Any]:
    """Built once per statement: most locked reads are module-level statements."""
    return query.with_for_update(of=of, skip_locked=skip_locked)


def all_placed(placed: dict[str, Placement], allocated: int, kernels_found: int) -> None:
    """A rank without a kernel, or a kernel without a rank, is never placed: the placement's
    transaction fails instead (a half-placed gang would hold its CPUs and never start)."""
    ranks = sum(len(p.agent_ids) for p in placed.values())
    if allocated != ranks or kernels_found != ranks:
        named = ", ".join(sorted(placed)[:5]) + (", ..." if len(placed) > 5 else "")
        raise RuntimeError(
            f"placement of {ranks} kernels found {kernels_found} ({allocated} placed); sessions {named}"
        )


def once(rows: Sequence[tuple[Any, ...]]) -> None:
    """Each kernel once in a write (a round holds one report per kernel): an UPDATE ... FROM
    applies only one of two rows for the same kernel, where an executemany applies both in turn."""
    assert len({row[0] for row in rows}) == len(rows), "a kernel twice in one write"


_PLACED_KERNELS = select(kernels.c.id, kernels.c.session_id, kernels.c.rank, kernels.c.resources).where(
    kernels.c.session_id.in_(bindparam("ids", expanding=True))
)
_ASSIGN_AGENT = (
    update(kernels)
    .where(kernels.c.id.in_(bindparam("ids", expanding=True)))
    .values(agent_id=bindparam("agent"), devices=None)
)


@cache
def _writes(fields: tuple[str, ...], timed: bool) -> Any:
    """write_kernels' statement, run once per row."""
    values: dict[str, Any] = {}
    for field, (name, type_) in zip(fields, named(fields), strict=True):
        values[field] = new_value(field, bindparam(name, type_=type_))
    key = values.pop("id")
    if timed:
        values["status_changed_at"] = bindparam("k_now", type_=kernels.c.status_changed_at.type)
    return update(kernels).where(kernels.c.id == key).values(**values)
