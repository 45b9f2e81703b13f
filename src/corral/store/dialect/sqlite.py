"""SQLite's own: no row locks (its one writer holds the database's write lock from BEGIN
IMMEDIATE, store/db.py), many-row INSERTs straight to the driver (sqlite_rows.py), and the database
file's checkpoints."""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, func
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store.dialect import S, sqlite_rows
from corral.store.dialect.engine import sqlite_file
from corral.store.dialect.portable import Portable
from corral.store.dialect.sqlite_checkpoint import keep_checkpointed
from corral.store.unit import Engine
from corral.wakeup import Wakeup


class SQLite(Portable):
    name = "sqlite"
    locks_rows = False

    def upkeep(self, engine: Engine, wakeup: Wakeup) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """The database file's checkpoints, kept from stopping every writer (sqlite_checkpoint.py)."""
        database_file = sqlite_file(engine)
        return [] if database_file is None else [("checkpoints", keep_checkpointed(database_file))]

    def for_update(self, query: S, *, of: Table | None = None, skip_locked: bool = False) -> S:
        return query

    async def lock(self, conn: AsyncConnection, query: Select[Any]) -> None:
        """Nothing: the writer's BEGIN IMMEDIATE took the database's lock."""

    def clock(self) -> ColumnElement[Any]:
        """UTC with milliseconds, as text that sorts with UTCDateTime's ("2026-12-03 17:00:00.123"):
        CURRENT_TIMESTAMP has whole seconds only."""
        return func.strftime("%Y-%m-%d %H:%M:%f", "now")

    async def insert_rows(
        self,
        conn: AsyncConnection,
        table: Table,
        columns: tuple[str, ...],
        rows: Sequence[tuple[Any, ...]],
        same: Mapping[str, Any],
    ) -> None:
        await sqlite_rows.insert_rows(conn, table, columns, rows, same)
