"""A failed attempt's place in line, whenever its retry is decided during a placement cycle.

The invariant: one CPU freed by a failed attempt, its retry decided at once, and a session queued
after the chain: the later session never gets the CPU in the cycle, whether the decision commits
before the cycle, after its holds were read, or after its queue was read. PostgreSQL only: each
statement there sees the newest commits, so a decision can land between a cycle's reads; SQLite's
cycle holds the write lock throughout and no decision lands inside it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from corral.domain.judge import PhaseLimits
from corral.domain.records import NewSession, SessionRecord
from corral.domain.resources import ResourceSlots
from corral.domain.spec import SessionSpec
from corral.manager.coordinator import Coordinator
from corral.manager.handlers.base import HandlerContext, LifecycleResult
from corral.manager.handlers.schedule_new import ScheduleNewSessions
from corral.store import retries, sessions
from corral.store.db import transaction
from corral.store.tables import sessions as sessions_table
from corral.store.unit import Tx
from tests.support.db import migrated, register_agent

ONE_CPU = SessionSpec(command=("true",), resources=ResourceSlots.parse({"cpu": 1}))


class DecideDuring(ScheduleNewSessions):
    """The real placement; the retry engine's decision commits from another connection at `when`."""

    def __init__(self, when: str, decide: Callable[[], Any]) -> None:
        self.when, self.decide = when, decide

    async def read_before_targets(self, conn: Tx, resource_group: str, now: datetime) -> Any:
        found = await super().read_before_targets(conn, resource_group, now)
        if self.when == "between the reads":
            await self.decide()
        return found

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        if self.when == "after the queue was read":
            await self.decide()
        return await super().execute(ctx, targets)


@pytest.fixture
async def engine(fresh_database: Callable[[str], str]) -> AsyncIterator[AsyncEngine]:
    async with migrated(fresh_database("postgres")) as e:
        yield e


async def _failed_attempt(engine: AsyncEngine, now: datetime) -> NewSession:
    """An attempt whose one kernel failed just now, undecided, and what freed its CPU."""
    parent = NewSession(id=str(uuid.uuid4()), name="failing", owner="t", spec=ONE_CPU)
    async with transaction(engine) as conn:
        await register_agent(conn, "only", {"cpu": 1}, now=now)
        await sessions.insert_session(conn, parent, now)
        await conn.execute(text("UPDATE sessions SET status = 'ERROR' WHERE id = :id"), {"id": parent.id})
        await conn.execute(
            text("UPDATE kernels SET status = 'ERROR', exit_code = 3 WHERE session_id = :id"),
            {"id": parent.id},
        )
    return parent


@pytest.mark.parametrize("when", ["before the cycle", "between the reads", "after the queue was read"])
async def test_a_retry_decided_at_any_moment_keeps_its_chains_place(engine: AsyncEngine, when: str) -> None:
    now = datetime.now(UTC)
    parent = await _failed_attempt(engine, now)
    later = NewSession(id=str(uuid.uuid4()), name="later", owner="t", spec=ONE_CPU)
    child = NewSession(
        id=str(uuid.uuid4()),
        name="failing-2",
        owner="t",
        spec=ONE_CPU,
        parent_session_id=parent.id,
        root_session_id=parent.id,
        chain_submitted_at=now,
        attempt=2,
    )

    async def decide() -> None:
        """What the retry engine commits for an immediate retry (manager/retry_engine.py)."""
        async with transaction(engine) as conn:
            await sessions.insert_session(conn, child, now)
            await retries.decide(conn, parent.id, "scheduled", "retry at once", child.id)

    async with transaction(engine) as conn:
        await sessions.insert_session(conn, later, datetime.now(UTC))
    if when == "before the cycle":
        await decide()
    coordinator = Coordinator(engine, "default", [], PhaseLimits(timeouts={}), lambda: datetime.now(UTC))
    await coordinator.run_handler(DecideDuring(when, decide))
    await coordinator.run_handler(ScheduleNewSessions())  # the retry, if it came too late for the first

    async with engine.connect() as conn:
        rows = await conn.execute(
            select(sessions_table.c.id, sessions_table.c.status).where(
                sessions_table.c.id.in_([later.id, child.id])
            )
        )
        status = {sid: st for sid, st in rows}
    assert status[later.id] == "PENDING", f"the later session took the chain's CPU ({when})"
    assert status[child.id] == "PREPARING", status
