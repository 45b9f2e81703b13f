"""Many rows in one INSERT on either backend, each backend its own way (store/dialect/:
PostgreSQL one statement whatever the row count, SQLite straight to the driver)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store import dialect

__all__ = ["Rows", "insert_rows", "insert_together"]


async def insert_rows(
    conn: AsyncConnection,
    table: Table,
    columns: tuple[str, ...],
    rows: Sequence[tuple[Any, ...]],
    same: Mapping[str, Any] | None = None,
) -> None:
    """Rows of `columns` (in that order), plus the values every row shares (`same`)."""
    if rows:
        await dialect.of(conn).insert_rows(conn, table, columns, rows, same or {})


class Rows(NamedTuple):
    """Rows for one table, as insert_rows takes them."""

    table: Table
    columns: tuple[str, ...]
    rows: Sequence[tuple[Any, ...]]
    same: Mapping[str, Any]


async def insert_together(conn: AsyncConnection, parts: Sequence[Rows]) -> None:
    """Rows into several tables, in the parts' order; a part's rows may refer to an earlier
    part's (on PostgreSQL one statement, whose foreign keys the server checks at its end)."""
    parts = [p for p in parts if p.rows]
    if parts:
        await dialect.of(conn).insert_together(conn, parts)
