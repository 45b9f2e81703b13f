"""The interleaving that made test_nobody_outside_the_rules_is_preempted flaky, forced: the
preemptor's kernel starts, and the preemptor is RUNNING, before the cycle that placed it has moved
its victims from TERMINATING to ERROR. The coordinator, its handlers, the agent protocol and the
store are the real ones on a real database; only the order of their steps is chosen here."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from corral.clock import utcnow
from corral.domain.judge import PhaseLimits
from corral.domain.records import KernelReport, Principal, SessionRecord
from corral.domain.resources import ResourceSlots
from corral.domain.spec import SessionSpec
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.coordinator import Coordinator
from corral.manager.handlers import cycle_handlers
from corral.manager.handlers.promote_running_alone import PromoteRunningAlone
from corral.manager.handlers.promote_terminated import PromoteToTerminated
from corral.manager.handlers.schedule_new import ScheduleNewSessions
from corral.services import admission as session_service
from corral.services.agent_protocol import AgentProtocol
from corral.settings import SchedulerSettings
from corral.store import auth, journal, sessions
from corral.store.db import reading, transaction
from corral.wakeup import Wakeup
from tests.conftest import BACKENDS
from tests.support.db import migrated, register_agent

STARTED = [KernelStatus.PREPARING, KernelStatus.PREPARED, KernelStatus.CREATING, KernelStatus.RUNNING]


async def _get(engine: object, session_id: str) -> SessionRecord:
    async with reading(engine) as conn:  # type: ignore[arg-type]
        found = await sessions.get(conn, session_id)
    assert found is not None
    return found


async def _report(
    protocol: AgentProtocol, epoch: int, s: SessionRecord, steps: Sequence[KernelStatus], **end: object
) -> None:
    """Its agent's reports of its kernels, in order from where each is (the last with `end`'s fields)."""
    reports = [
        KernelReport(k.id, status, generation=k.generation, **(end if i == len(steps) - 1 else {}))  # type: ignore[arg-type]
        for k in s.kernels
        for i, status in enumerate(steps)
        if status not in steps[: steps.index(k.status) + 1 if k.status in steps else 0]
    ]
    _, refused, _ = await protocol.report("a", epoch, reports)
    assert refused == [], refused


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_preemptor_running_before_its_victims_are_decided(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        async with transaction(engine) as conn:
            user_id = await auth.ensure_user(conn, "alice", "admin", utcnow())
            epoch = await register_agent(conn, "a", {"cpu": 2})
        alice = Principal(user_id, "alice", "admin", frozenset({"default"}))
        protocol = AgentProtocol(engine, SchedulerSettings(), Wakeup(), log_cap=1 << 20)
        coordinator = Coordinator(engine, "default", cycle_handlers(), PhaseLimits(timeouts={}), utcnow)

        async def submit(priority: int, cpu: int) -> SessionRecord:
            spec = SessionSpec(
                command=("sleep", "600"), priority=priority, resources=ResourceSlots.parse({"cpu": cpu})
            )
            return (await session_service.create(engine, alice, spec, None, priority))[0]

        low = [await submit(1, 1) for _ in range(2)]
        await coordinator.run_cycle()  # placed, prepare-and-start orders handed
        for s in low:
            await _report(protocol, epoch, await _get(engine, s.id), STARTED)
        await coordinator.run_cycle()
        assert {(await _get(engine, s.id)).status for s in low} == {SessionStatus.RUNNING}

        urgent = await submit(50, 2)
        for _ in range(3):  # victims chosen and asked to stop, then kill orders handed to the agent
            await coordinator.run_cycle()
        assert {(await _get(engine, s.id)).status for s in low} == {SessionStatus.TERMINATING}
        for s in low:  # the agent confirms them gone: their CPUs are free
            await _report(
                protocol,
                epoch,
                await _get(engine, s.id),
                [KernelStatus.TERMINATED],
                exit_code=143,
                signal=15,
                killed_by_corral=True,
            )

        # The forced order: the preemptor is placed, its agent starts it, and it is promoted to
        # RUNNING, all before PromoteToTerminated's turn in that cycle.
        await coordinator.run_handler(ScheduleNewSessions())
        await _report(protocol, epoch, await _get(engine, urgent.id), STARTED)
        await coordinator.run_handler(PromoteRunningAlone())
        assert (await _get(engine, urgent.id)).status is SessionStatus.RUNNING
        assert {(await _get(engine, s.id)).status for s in low} == {SessionStatus.TERMINATING}
        assert {(await _get(engine, s.id)).cause for s in low} == {None}  # not decided yet

        await coordinator.run_handler(PromoteToTerminated())
        for s in low:
            ended = await _get(engine, s.id)
            assert (ended.status, str(ended.cause)) == (SessionStatus.ERROR, "preempted"), ended
            async with reading(engine) as conn:
                said = [h.message for h in await journal.history_of(conn, s.id)]
            assert any(f"preempted by session {urgent.id} (priority 50)" in m for m in said), said
        assert (await _get(engine, urgent.id)).status is SessionStatus.RUNNING
