"""The outbox read in commit order (store/outbox.py): a reader never passes an event that commits
later, whatever the order its id was taken in."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from corral.domain.events import START, Position
from corral.store import journal, outbox
from corral.store.db import reading, transaction
from tests.support.db import migrated

BACKENDS = ["sqlite", "postgres"]


def _event(n: int) -> journal.EventRow:
    return journal.session_event(f"s{n}", "p", "session.status_changed", "PENDING", "SCHEDULED")


async def _read_all(engine: object, after: Position) -> list[str]:
    async with reading(engine) as conn:  # type: ignore[arg-type]
        return [e.session_id or "" for e in await outbox.read(conn, after, 100)]


async def test_two_writers_committing_in_reverse_id_order_are_read_in_commit_order(
    fresh_database: Callable[[str], str],
) -> None:
    """A takes the lower id, B the higher and commits first: B is held back while A is open (a
    reader given B would pass A for good), then both come, A first."""
    async with migrated(fresh_database("postgres")) as engine:
        async with transaction(engine) as conn:
            await journal.add_events(conn, [_event(0)], datetime.now(UTC))
        async with reading(engine) as conn:
            seen = await outbox.newest(conn)
        async with engine.connect() as slow:
            a = await slow.begin()
            await journal.add_events(slow, [_event(1)], datetime.now(UTC))  # the lower id
            async with transaction(engine) as conn:
                await journal.add_events(conn, [_event(2)], datetime.now(UTC))
            assert await _read_all(engine, seen) == []  # B waits for A: passing it would lose A
            async with reading(engine) as conn:
                assert await outbox.newest(conn) == seen
            await a.commit()
        async with reading(engine) as conn:
            found = await outbox.read(conn, seen, 100)
        assert [e.session_id for e in found] == ["s1", "s2"]
        assert [e.id for e in found] == sorted(e.id for e in found)  # here id order is commit order
        assert found[0].position > seen and found[1].position > found[0].position
        assert await _read_all(engine, found[-1].position) == []


async def test_a_writer_committing_first_with_the_higher_id_comes_first_by_transaction(
    fresh_database: Callable[[str], str],
) -> None:
    """B takes its transaction id first but its event id last; A (later transaction, lower event
    id) commits first: the position orders by transaction, so nothing read is passed later."""
    async with migrated(fresh_database("postgres")) as engine:
        async with engine.connect() as b_conn, engine.connect() as a_conn:
            b = await b_conn.begin()
            await b_conn.exec_driver_sql("SELECT pg_current_xact_id()")  # B's transaction id first
            a = await a_conn.begin()
            await journal.add_events(a_conn, [_event(1)], datetime.now(UTC))  # the lower event id
            await journal.add_events(b_conn, [_event(2)], datetime.now(UTC))
            await a.commit()
            assert await _read_all(engine, START) == []  # B, the older writer, is still open
            await b.commit()
        async with reading(engine) as conn:
            found = await outbox.read(conn, START, 100)
        assert [e.session_id for e in found] == ["s2", "s1"]  # B's transaction is the older
        assert found[0].id > found[1].id and found[0].position < found[1].position


@pytest.mark.parametrize("backend", BACKENDS)
async def test_successive_reads_return_each_committed_event_once_in_order(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        position, got = START, []
        for n in range(6):
            async with transaction(engine) as conn:
                await journal.add_events(conn, [_event(2 * n), _event(2 * n + 1)], datetime.now(UTC))
            async with reading(engine) as conn:
                page = await outbox.read(conn, position, 3)
            got += [e.session_id for e in page]
            position = page[-1].position
        async with reading(engine) as conn:
            got += [e.session_id for e in await outbox.read(conn, position, 100)]
        assert got == [f"s{n}" for n in range(12)]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_cursor_only_moves_forward(backend: str, fresh_database: Callable[[str], str]) -> None:
    async with migrated(fresh_database(backend)) as engine:
        now = datetime.now(UTC)
        async with transaction(engine) as conn:
            assert await outbox.cursor(conn, "c") == START
            await outbox.advance(conn, "c", Position(5, 9), now)
            await outbox.advance(conn, "c", Position(4, 100), now)  # behind: left alone
            assert await outbox.cursor(conn, "c") == Position(5, 9)
            await outbox.advance(conn, "c", Position(6, 1), now)
            assert await outbox.cursor(conn, "c") == Position(6, 1)
