"""The portable implementation of every Dialect operation: plain SQLAlchemy Core, one statement
at a time where a backend has no set-wise form of its own."""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from datetime import datetime
from functools import cache, lru_cache
from typing import Any, cast

from sqlalchemy import ColumnElement, Insert, Select, Table, func, insert, select, type_coerce
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store.dialect import S
from corral.store.dialect.types import UTCDateTime
from corral.store.unit import Engine
from corral.wakeup import Wakeup


class Portable:
    name = "portable"
    reads_outside_transactions = False
    locks_rows = True
    seeks_each_status = False

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
        """One executemany of the rows as dicts."""
        await conn.execute(_insert(table), [{**dict(zip(columns, r, strict=True)), **same} for r in rows])

    def committed(self, query: S, txid: ColumnElement[int]) -> S:
        return query

    def clock(self) -> ColumnElement[Any]:
        return func.current_timestamp()

    async def now(self, conn: AsyncConnection) -> datetime:
        stamp: datetime = (await conn.execute(select(type_coerce(self.clock(), UTCDateTime)))).scalar_one()
        return stamp


@cache
def _insert(table: Table) -> Insert:
    """Built once per table: a construct built per call is keyed for the statement cache anew."""
    return insert(table)


@lru_cache(maxsize=64)
def _locked(query: Select[Any], of: Table | None, skip_locked: bool) -> Select[Any]:
    """The lock an UPDATE of the rows' non-key columns takes (PostgreSQL: FOR NO KEY UPDATE): it
    serialises the rows' writers as FOR UPDATE does, but not the foreign-key checks of rows that
    refer to them.  A kernel written twice in one transaction (two report rounds) checks its key
    again, so a session held FOR UPDATE would hold up its kernels' reports, and a holder waiting
    on those kernels deadlock with them.  Built once per statement (most are module-level)."""
    return query.with_for_update(of=of, skip_locked=skip_locked, key_share=True)
