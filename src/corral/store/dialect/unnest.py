"""Many rows in one PostgreSQL statement: each field's values as one array, `unnest()`ed into rows.

A many-row VALUES list is a statement of its own for every row count, which asyncpg prepares
(a round trip and a parse in the server), and an executemany runs the statement once per row in
the server.  One array per field is one statement whatever the count."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    JSON,
    ColumnElement,
    Insert,
    Table,
    Text,
    bindparam,
    cast,
    column,
    func,
    insert,
    select,
)
from sqlalchemy.sql.selectable import TableValuedAlias
from sqlalchemy.types import TypeEngine

from corral.store.dialect.engine import unbounded


def rows(fields: Sequence[tuple[str, TypeEngine[Any]]]) -> TableValuedAlias:
    """`unnest(:f1, :f2, ...)` as a derived table with columns f1, f2, ...: one array parameter
    per field, named as the field (JSON fields travel as text: see `picked`)."""
    arrays = [bindparam(name, type_=ARRAY(_element(type_))) for name, type_ in fields]
    named = [column(name, _element(type_)) for name, type_ in fields]
    return func.unnest(*arrays).table_valued(*named).render_derived()


def picked(table: TableValuedAlias, name: str, type_: TypeEngine[Any]) -> ColumnElement[Any]:
    """A field of the rows, as its own type (an array of JSON would take a JSON list apart, so
    JSON goes as text and is cast back here)."""
    return cast(table.c[name], JSON) if isinstance(type_, JSON) else table.c[name]


def arrays(
    fields: Sequence[tuple[str, TypeEngine[Any]]], values: Sequence[Sequence[Any]]
) -> dict[str, list[Any]]:
    """The parameters of `rows(fields)` for these rows (each a tuple in the fields' order)."""
    by_field = zip(*values, strict=True) if values else ((),) * len(fields)
    return {
        name: _json(type_, column_values) if isinstance(type_, JSON) else list(column_values)
        for (name, type_), column_values in zip(fields, by_field, strict=True)
    }


def _json(type_: JSON, values: Sequence[Any]) -> list[str | None]:
    """JSON values as text; None as SQL NULL where the column says so (as SQLAlchemy binds it),
    JSON null elsewhere."""
    if type_.none_as_null:
        return [None if v is None else json.dumps(v) for v in values]
    return [json.dumps(v) for v in values]


def _element(type_: TypeEngine[Any]) -> TypeEngine[Any]:
    return Text() if isinstance(type_, JSON) else unbounded(type_)


def unnest_insert(
    table: Table,
    columns: tuple[str, ...],
    prefix: str,
    same: Mapping[str, ColumnElement[Any]],
    kept: Callable[[TableValuedAlias], ColumnElement[bool]] | None = None,
) -> Insert:
    """INSERT ... SELECT FROM unnest(one array per column, each bound as prefix + column), plus
    the values every row shares (`same`), of the rows `kept` keeps (all without it)."""
    fields = unnest_fields(table, columns, prefix)
    unnested = rows(fields)
    chosen = [picked(unnested, name, type_) for name, type_ in fields]
    query = select(*chosen, *same.values())
    if kept is not None:
        query = query.where(kept(unnested))
    return insert(table).from_select([*columns, *same], query)


def unnest_params(
    table: Table, columns: tuple[str, ...], prefix: str, values: Sequence[tuple[Any, ...]]
) -> dict[str, list[Any]]:
    """unnest_insert's arrays for these rows."""
    return arrays(unnest_fields(table, columns, prefix), values)


@cache
def unnest_fields(table: Table, columns: tuple[str, ...], prefix: str) -> tuple[tuple[str, Any], ...]:
    """The unnest fields of these columns, each named prefix + column."""
    return tuple((prefix + c, table.c[c].type) for c in columns)
