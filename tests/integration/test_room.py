"""Placement runs when room may have been made: a cycle woken only by kernels' progress skips it, a
timed cycle or a cycle after room was made never does (coordinator on a real database)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from corral.domain.judge import PhaseLimits
from corral.manager.coordinator import Coordinator
from corral.manager.handlers.cancel_pending import CancelPendingSessions
from corral.manager.handlers.schedule_new import ScheduleNewSessions
from corral.store import journal, sessions
from corral.store.db import make_engine, transaction, upgrade
from corral.wakeup import Wakeup
from tests.conftest import BACKENDS
from tests.integration.test_bounds import NOW, _insert


async def _skips(engine: object, sid: str) -> int:
    """How many cycles placement looked at the session and left it waiting (no agent here)."""
    async with engine.connect() as conn:  # type: ignore[attr-defined]
        history = await journal.history_of(conn, sid)
    return sum(h.count for h in history if h.result == "SKIPPED")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_placement_runs_only_when_room_may_have_been_made(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    engine = make_engine(fresh_database(backend))
    try:
        await upgrade(engine)
        [waiting, cancelled] = await _insert(engine, 2, 10, NOW)
        handlers = [CancelPendingSessions(), ScheduleNewSessions()]
        coordinator = Coordinator(engine, "default", handlers, PhaseLimits(timeouts={}), lambda: NOW)
        await coordinator.run_cycle(timed=False, room=True)
        assert await _skips(engine, waiting) == 1
        await coordinator.run_cycle(timed=False, room=False)
        assert await _skips(engine, waiting) == 1  # nothing changed: not looked at again
        await coordinator.run_cycle(timed=True, room=False)
        assert await _skips(engine, waiting) == 2  # a timed cycle always places
        async with transaction(engine) as conn:
            await sessions.request_termination(conn, cancelled, "user_cancelled", "", NOW)
        # Cancelling a queued session changes the queue: placement runs in that same cycle.
        await coordinator.run_cycle(timed=False, room=False)
        assert await _skips(engine, waiting) == 3
        assert coordinator.room_left is False
    finally:
        await engine.dispose()


async def test_only_an_ending_or_a_change_of_queue_signals_room() -> None:
    wakeup = Wakeup()
    assert wakeup.take_room() is True  # a fresh manager places at once
    assert wakeup.take_room() is False
    wakeup.scheduler(room=False)  # kernels progressing
    assert wakeup.take_room() is False
    wakeup.scheduler(room=False)
    wakeup.scheduler()  # e.g. a submission, a cancel, an agent registering
    assert wakeup.take_room() is True
    await wakeup.receive("scheduler")  # another manager's wake-up does not say which: room
    assert wakeup.take_room() is True
