"""Times on SQLite are stored as the text SQLAlchemy's DATETIME always wrote, so rows written before
and after compare and sort together; every aware time reads back as the same instant, in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Column, MetaData, String, Table, select
from sqlalchemy.dialects import postgresql, sqlite

from corral.store.tables import UTCDateTime

SQLITE = sqlite.dialect()
zones = st.integers(min_value=-23 * 60, max_value=23 * 60).map(lambda m: timezone(timedelta(minutes=m)))
# Kept clear of the first and last day: another zone could push them out of datetime's range.
aware = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=zones)


def sqlalchemy_text(value: datetime) -> str:
    """What SQLAlchemy's SQLite DATETIME type stored for this instant."""
    process = sqlite.DATETIME().bind_processor(SQLITE)
    assert process is not None
    text: str = process(value.astimezone(UTC).replace(tzinfo=None))
    return text


@given(aware)
def test_the_stored_text_is_sqlalchemys_and_reads_back_as_the_same_instant(value: datetime) -> None:
    stamp = UTCDateTime()
    text = stamp.process_bind_param(value, SQLITE)
    assert text == sqlalchemy_text(value)
    back = stamp.process_result_value(text, SQLITE)
    assert back == value and back is not None and back.tzinfo is UTC


@given(aware, aware)
def test_stored_texts_sort_as_their_instants_do(a: datetime, b: datetime) -> None:
    stamp = UTCDateTime()
    assert (stamp.process_bind_param(a, SQLITE) < stamp.process_bind_param(b, SQLITE)) == (a < b)


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        UTCDateTime().process_bind_param(datetime(2026, 1, 1), SQLITE)


def test_text_without_microseconds_or_time_reads_back() -> None:
    stamp = UTCDateTime()
    expected = datetime(2026, 11, 26, 7, 19, 19, tzinfo=UTC)
    assert stamp.process_result_value("2026-11-26 07:19:19", SQLITE) == expected
    assert stamp.process_result_value("2026-11-26", SQLITE) == datetime(2026, 11, 26, tzinfo=UTC)


@pytest.mark.parametrize(
    ("dialect", "expected"),
    [(SQLITE, "'2026-01-01 00:00:00.000000'"), (postgresql.dialect(), "'2026-01-01 00:00:00+00:00'")],
)
def test_a_time_renders_as_a_literal(dialect: object, expected: str) -> None:
    t = Table("t", MetaData(), Column("id", String), Column("at", UTCDateTime))
    query = select(t.c.id).where(t.c.at < datetime(2026, 1, 1, tzinfo=UTC))
    assert str(query.compile(dialect=dialect, compile_kwargs={"literal_binds": True})).endswith(expected)
