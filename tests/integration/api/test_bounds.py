"""Every non-terminal status is bounded, judged over the whole queue (coordinator on a real database)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from corral.domain.judge import PhaseLimits
from corral.domain.records import NewSession
from corral.domain.spec import SessionSpec
from corral.domain.status import SessionStatus
from corral.manager.coordinator import Coordinator
from corral.manager.handlers.expire_pulling import ExpirePulling
from corral.manager.handlers.schedule_new import ScheduleNewSessions
from corral.store import journal, sessions
from corral.store.db import transaction
from corral.store.tables import sessions as session_table
from tests.conftest import BACKENDS
from tests.support.db import migrated

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


async def _insert(engine: object, n: int, priority: int, at: datetime) -> list[str]:
    ids = [str(uuid.uuid4()) for _ in range(n)]
    async with transaction(engine) as conn:  # type: ignore[arg-type]
        for sid in ids:
            spec = SessionSpec(command=("true",), priority=priority)
            await sessions.insert_session(conn, NewSession(id=sid, name="b", owner="t", spec=spec), at)
    return ids


@pytest.mark.parametrize("backend", BACKENDS)
async def test_pulling_expires_back_to_the_queue(backend: str, fresh_database: Callable[[str], str]) -> None:
    async with migrated(fresh_database(backend)) as engine:
        [sid] = await _insert(engine, 1, 10, NOW)
        async with transaction(engine) as conn:
            await conn.execute(
                update(session_table)
                .where(session_table.c.id == sid)
                .values(status="PULLING", status_changed_at=NOW - timedelta(seconds=5))
            )
        limits = PhaseLimits(timeouts={SessionStatus.PULLING: timedelta(seconds=2)})
        coordinator = Coordinator(engine, "default", [ExpirePulling()], limits, lambda: NOW)
        assert await coordinator.run_cycle() == 1
        async with engine.connect() as conn:
            found = await sessions.get(conn, sid)
            history = await journal.history_of(conn, sid)
        assert found is not None and found.status is SessionStatus.PENDING
        assert [(h.handler, h.result, h.from_status, h.to_status) for h in history] == [
            ("ExpirePulling", "EXPIRED", "PULLING", "PENDING")
        ]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_pending_timeout_reaches_past_the_queue_window(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        window = ScheduleNewSessions.queue_window
        assert window is not None
        await _insert(engine, window + 20, 90, NOW)  # the head of the queue: fresh, high priority
        [old] = await _insert(engine, 1, 1, NOW - timedelta(hours=2))  # far behind them
        limits = PhaseLimits(timeouts={SessionStatus.PENDING: timedelta(hours=1)})
        coordinator = Coordinator(engine, "default", [ScheduleNewSessions()], limits, lambda: NOW)
        await coordinator.run_cycle()
        async with engine.connect() as conn:
            found = await sessions.get(conn, old)
            counts = await sessions.count_by_status(conn)
        assert found is not None and found.status is SessionStatus.CANCELLED
        assert counts == {"PENDING": window + 20, "CANCELLED": 1}
