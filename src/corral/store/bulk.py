"""Many rows in one INSERT on either backend: on PostgreSQL one statement whatever the row count
(one array per column, store/unnest.py), on SQLite straight to the driver (store/driver_rows.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Insert, Table, bindparam, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.selectable import TableValuedAlias

from corral.store import driver_rows, unnest


async def insert_rows(
    conn: AsyncConnection,
    table: Table,
    columns: tuple[str, ...],
    rows: Sequence[tuple[Any, ...]],
    same: Mapping[str, Any] | None = None,
) -> None:
    """Rows of `columns` (in that order), plus the values every row shares (`same`)."""
    if not rows:
        return
    same = same or {}
    if conn.dialect.name == "postgresql":
        params = {**unnest_params(table, columns, "", rows), **same}
        await conn.execute(_unnest_insert(table, columns, tuple(same)), params)
        return
    await driver_rows.insert_rows(conn, table, columns, rows, same)


class Rows(NamedTuple):
    """Rows for one table, as insert_rows takes them."""

    table: Table
    columns: tuple[str, ...]
    rows: Sequence[tuple[Any, ...]]
    same: Mapping[str, Any]


async def insert_together(conn: AsyncConnection, parts: Sequence[Rows]) -> None:
    """Rows into several tables, in the parts' order.  On PostgreSQL one statement, each part but
    the last a data-modifying WITH of the last (a round trip each saved: a submit's session, kernels
    and event were three); the server checks foreign keys at the statement's end, so a part's rows
    may refer to an earlier part's."""
    parts = [p for p in parts if p.rows]
    if conn.dialect.name != "postgresql" or len(parts) < 2:
        for p in parts:
            await insert_rows(conn, p.table, p.columns, p.rows, p.same)
        return
    params: dict[str, Any] = {}
    for i, p in enumerate(parts):
        params |= unnest_params(p.table, p.columns, _prefix(i), p.rows)
        params |= {_prefix(i) + name: value for name, value in p.same.items()}
    await conn.execute(_together(tuple((p.table, p.columns, tuple(p.same)) for p in parts)), params)


def unnest_insert(
    table: Table,
    columns: tuple[str, ...],
    prefix: str,
    same: Mapping[str, ColumnElement[Any]],
    kept: Callable[[TableValuedAlias], ColumnElement[bool]] | None = None,
) -> Insert:
    """PostgreSQL's INSERT ... SELECT FROM unnest(one array per column, each bound as prefix +
    column), plus the values every row shares (`same`), of the rows `kept` keeps (all without it)."""
    fields = unnest_fields(table, columns, prefix)
    unnested = unnest.rows(fields)
    picked = [unnest.picked(unnested, name, type_) for name, type_ in fields]
    query = select(*picked, *same.values())
    if kept is not None:
        query = query.where(kept(unnested))
    return insert(table).from_select([*columns, *same], query)


def unnest_params(
    table: Table, columns: tuple[str, ...], prefix: str, rows: Sequence[tuple[Any, ...]]
) -> dict[str, list[Any]]:
    """unnest_insert's arrays for these rows."""
    return unnest.arrays(unnest_fields(table, columns, prefix), rows)


@cache
def unnest_fields(table: Table, columns: tuple[str, ...], prefix: str) -> tuple[tuple[str, Any], ...]:
    """The unnest fields (store/unnest.py) of these columns, each named prefix + column."""
    return tuple((prefix + c, table.c[c].type) for c in columns)


@cache
def _unnest_insert(table: Table, columns: tuple[str, ...], same: tuple[str, ...]) -> Insert:
    """unnest_insert of every row, the shared values bound as their columns' names."""
    return unnest_insert(table, columns, "", {c: bindparam(c, type_=table.c[c].type) for c in same})


def _prefix(part: int) -> str:
    return f"t{part}_"


@cache
def _together(shape: tuple[tuple[Table, tuple[str, ...], tuple[str, ...]], ...]) -> Insert:
    """insert_together's statement for parts of this shape (table, columns, shared values)."""
    inserts = [
        unnest_insert(
            table,
            columns,
            _prefix(i),
            {c: bindparam(_prefix(i) + c, type_=table.c[c].type) for c in same},
        )
        for i, (table, columns, same) in enumerate(shape)
    ]
    *first, last = inserts
    return last.add_cte(*(ins.cte(f"inserted_{i}") for i, ins in enumerate(first)))
