"""Two coordinators racing on the same queue: the loser updates zero rows, nothing is double-placed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select

from corral.domain.judge import PhaseLimits
from corral.domain.records import NewSession, SessionRecord
from corral.domain.resources import ResourceSlots
from corral.domain.spec import SessionSpec
from corral.manager.coordinator import Coordinator
from corral.manager.handlers.base import HandlerContext, LifecycleResult
from corral.manager.handlers.schedule_new import ScheduleNewSessions
from corral.store import sessions
from corral.store.db import transaction, upgrade
from corral.store.dialect.engine import make_engine
from corral.store.tables import allocations
from tests.conftest import BACKENDS
from tests.support.db import register_agent


class MeetThenSchedule(ScheduleNewSessions):
    """The real handler, but both racers have read the same PENDING sessions before either places."""

    def __init__(self, barrier: asyncio.Barrier | None) -> None:
        self.barrier = barrier

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        if self.barrier is not None:
            await self.barrier.wait()
        return await super().execute(ctx, targets)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_two_coordinators_race(backend: str, fresh_database: Callable[[str], str]) -> None:
    url = fresh_database(backend)
    first, second = make_engine(url), make_engine(url)
    try:
        await upgrade(first)
        now = datetime.now(UTC)
        async with transaction(first) as conn:
            await register_agent(conn, "a", {"cpu": 20}, hostname="h", now=now)
            for i in range(10):
                sid = str(uuid.uuid4())
                await sessions.insert_session(
                    conn,
                    NewSession(
                        id=sid,
                        name=f"s{i}",
                        owner="t",
                        spec=SessionSpec(command=("true",), resources=ResourceSlots.parse({"cpu": 1})),
                    ),
                    now,
                )
        # On PostgreSQL both racers read the same PENDING sessions before either places (a real race).
        # SQLite serialises whole write transactions (BEGIN IMMEDIATE): a barrier there would deadlock,
        # so there this checks what SQLite guarantees instead: the second writer sees the first's
        # placements and places nothing twice.
        barrier = asyncio.Barrier(2) if backend == "postgres" else None
        limits = PhaseLimits(timeouts={})
        racers = [Coordinator(e, "default", [], limits, lambda: datetime.now(UTC)) for e in (first, second)]
        moved = await asyncio.gather(*(r.run_handler(MeetThenSchedule(barrier)) for r in racers))
        assert sorted(moved) == [0, 10]
        async with first.connect() as conn:
            rows = (await conn.execute(select(func.count()).select_from(allocations))).scalar_one()
            statuses = await sessions.count_by_status(conn)
        assert rows == 10
        assert statuses == {"PREPARING": 10}  # placed, and handed their prepare orders at once
    finally:
        await first.dispose()
        await second.dispose()
