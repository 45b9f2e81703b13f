"""Many-row INSERTs on SQLite handed to the driver as it takes them: positional rows, each value
through its column type's own bind processing (the values every row shares, once).

SQLAlchemy's executemany builds, merges and processes a dict per row, key by key, which costs
more than the INSERT itself for the history and event rows of every session and a job array's
sessions and kernels (bench/throughput.py).  The statement is SQLAlchemy's, compiled
once per shape; what SQLAlchemy would apply beyond the given values (Python-side column defaults)
is not, so every column with one must be given (a column left out is NULL, as with SQLAlchemy)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import Table, bindparam, insert
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

Processor = Callable[[Any], Any] | None


async def insert_rows(
    conn: AsyncConnection,
    table: Table,
    columns: tuple[str, ...],
    rows: Iterable[Sequence[Any]],
    same: Mapping[str, Any] | None = None,
) -> None:
    """Rows of `columns` (in that order), each with the values of `same` too."""
    same = same or {}
    sql, processors = _statement(table, columns, tuple(same), conn.dialect)
    later = zip(processors[len(columns) :], same.values(), strict=True)
    shared = [v if p is None else p(v) for p, v in later]
    # Only the columns with a processor are touched (most are text, which goes as it is).
    active = [(i, p) for i, p in enumerate(processors[: len(columns)]) if p is not None]
    params: list[tuple[Any, ...]] = []
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"{table.name}: a row of {len(row)} values for {len(columns)} columns")
        values = [*row, *shared]
        for i, p in active:
            values[i] = p(values[i])
        params.append(tuple(values))
    if params:
        await conn.exec_driver_sql(sql, params)


@lru_cache(maxsize=32)
def _statement(
    table: Table, columns: tuple[str, ...], same: tuple[str, ...], dialect: Dialect
) -> tuple[str, tuple[Processor, ...]]:
    """The positional INSERT of `columns` then `same` as the dialect renders it, and each column's
    bind processor (None: the value goes as it is)."""
    names = (*columns, *same)
    missing = [c.name for c in table.columns if c.default is not None and c.name not in names]
    if missing:
        raise ValueError(f"{table.name}: {', '.join(missing)} have Python-side defaults; give them")
    compiled = insert(table).values({c: bindparam(c) for c in names}).compile(dialect=dialect)
    if tuple(compiled.positiontup or ()) != names:
        raise ValueError(f"{table.name}: {dialect.name} does not bind by position in column order")
    processors = tuple(table.c[c].type.dialect_impl(dialect).bind_processor(dialect) for c in names)
    return compiled.string, processors
