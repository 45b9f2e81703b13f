"""Column types whose storage differs by backend: aware UTC datetimes (SQLite keeps no zone) and
64-bit ids (SQLite's INTEGER PRIMARY KEY is its row id).  Alembic migrations name these types by
their old path, store.tables, which re-exports them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, DateTime, Integer, TypeDecorator
from sqlalchemy.dialects.sqlite import DATETIME as SQLITE_DATETIME
from sqlalchemy.engine import Dialect


class _SQLiteStamp(SQLITE_DATETIME):
    """SQLite's DATETIME column, its text written and read by UTCDateTime alone."""

    def bind_processor(self, dialect: Dialect) -> None:
        return None

    def result_processor(self, dialect: Dialect, coltype: object) -> None:
        return None

    def literal_processor(self, dialect: Dialect) -> Callable[[str], str]:
        return lambda text: f"'{text}'"  # UTCDateTime's text: digits, '-', ':', '.' and a space


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on both backends (SQLite keeps no zone).

    On SQLite the text is SQLAlchemy's DATETIME format ("2026-11-26 07:19:19.000000", which sorts
    as the time does), written and parsed here in one step: SQLAlchemy's own processors, chained
    after ours, built it field by field and made a second call per value (a session row has nine
    of them, read by every handler)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name == "sqlite":
            return _SQLiteStamp()  # type: ignore[no-untyped-call]  # (the dialect type is untyped)
        return super().load_dialect_impl(dialect)

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store")
        if value.tzinfo is not UTC:
            value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None).isoformat(" ", "microseconds")
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        stamp: datetime = datetime.fromisoformat(value) if isinstance(value, str) else value
        return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)


BigId = BigInteger().with_variant(Integer, "sqlite")
