"""Many rows in one INSERT: given as tuples in a fixed column order, with the values every row
shares given once; each backend writes them its own way (Dialect.insert_rows)."""

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
    """Rows into several tables, in the parts' order (a part's rows may refer to an earlier part's)."""
    for p in parts:
        await insert_rows(conn, p.table, p.columns, p.rows, p.same)
