"""The retry engine reads sessions' ends from the event outbox after a position, in commit order
(store/outbox).  On PostgreSQL events commit out of id order: an end whose writer is still open
holds back the ends after it, and is decided as soon as it commits, never passed over and left to
the backstop (tens of seconds later)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import select, update

from corral.domain.records import NewSession
from corral.domain.spec import SessionSpec
from corral.manager.retry_engine import RetryEngine
from corral.store import journal, sessions
from corral.store.db import transaction
from corral.store.tables import sessions as session_table
from corral.wakeup import Wakeup
from tests.support.db import migrated


async def _ended(engine: object, n: int) -> list[str]:
    """n sessions that ended in ERROR (no event written yet)."""
    ids = [str(uuid.uuid4()) for _ in range(n)]
    now = datetime.now(UTC)
    async with transaction(engine) as conn:  # type: ignore[arg-type]
        news = [NewSession(id=sid, name="s", owner="t", spec=SessionSpec(command=("false",))) for sid in ids]
        await sessions.insert_sessions(conn, news, now)
        await conn.execute(
            update(session_table)
            .where(session_table.c.id.in_(ids))
            .values(status="ERROR", result="failure", terminated_at=now)
        )
    return ids


async def _decided(engine: object) -> set[str]:
    async with engine.connect() as conn:  # type: ignore[attr-defined]
        rows = await conn.execute(select(session_table.c.id).where(session_table.c.retry_state.is_not(None)))
        return set(rows.scalars())


def _end(sid: str) -> journal.EventRow:
    return journal.session_event(sid, "default", "session.status_changed", "RUNNING", "ERROR")


async def test_an_end_committed_after_a_later_one_was_read_is_still_decided(
    fresh_database: Callable[[str], str],
) -> None:
    async with migrated(fresh_database("postgres")) as engine:
        early, late = await _ended(engine, 2)
        # The backstop never reaches them here: only the events can.
        retry = RetryEngine(engine, Wakeup(), grace=3600.0)
        assert not await retry.run_once()
        async with engine.connect() as slow:
            transaction_a = await slow.begin()
            await journal.add_events(slow, [_end(early)], datetime.now(UTC))  # the lower id, not committed
            async with transaction(engine) as conn:
                await journal.add_events(conn, [_end(late)], datetime.now(UTC))
            assert not await retry.run_once()  # held back behind the open writer, not passed
            assert await _decided(engine) == set()
            await transaction_a.commit()
        assert await retry.run_once()
        assert await _decided(engine) == {early, late}
        assert not await retry.run_once()  # each decided once: nothing left to do


async def test_a_rolled_back_event_holds_nothing_back(fresh_database: Callable[[str], str]) -> None:
    """A rolled-back insert leaves its id missing for ever: the end after it is decided at once,
    and the position passes both."""
    async with migrated(fresh_database("postgres")) as engine:
        [late] = await _ended(engine, 1)
        retry = RetryEngine(engine, Wakeup(), grace=3600.0)
        assert not await retry.run_once()
        start = retry._position
        async with engine.connect() as conn:
            rolled_back = await conn.begin()
            await journal.add_events(conn, [_end(str(uuid.uuid4()))], datetime.now(UTC))
            await rolled_back.rollback()
        async with transaction(engine) as conn:
            await journal.add_events(conn, [_end(late)], datetime.now(UTC))
        assert await retry.run_once()
        assert await _decided(engine) == {late}
        assert start is not None and retry._position is not None and retry._position > start
        assert retry._position.id == start.id + 2
        assert not await retry.run_once()  # nothing decided again


async def test_an_end_whose_row_is_held_when_claimed_is_decided_on_the_next_run(
    fresh_database: Callable[[str], str],
) -> None:
    """An agent storing an attempt's last output holds its session's row, often just as it ends:
    the claim skips it, and the next run (a second later at most), not the backstop, decides it."""
    async with migrated(fresh_database("postgres")) as engine:
        [sid] = await _ended(engine, 1)
        retry = RetryEngine(engine, Wakeup(), grace=3600.0)  # no backstop within the test
        async with engine.connect() as shipper:
            holding = await shipper.begin()
            await sessions.lock(shipper, sid)
            async with transaction(engine) as conn:
                await journal.add_events(conn, [_end(sid)], datetime.now(UTC))
            assert not await retry.run_once()  # read, claimed, skipped: the row is held
            assert await _decided(engine) == set()
            await holding.commit()
        assert await retry.run_once()  # no new event: tried again because it was skipped
        assert await _decided(engine) == {sid}
        assert not await retry.run_once()
