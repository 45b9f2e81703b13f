"""An agent's batch of reports is applied in order in one transaction, through the same guards as a
single report: a transition about an earlier placement (stale generation) or another agent's kernel
is refused while the rest of the batch applies."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from corral.domain.judge import PhaseLimits
from corral.domain.records import KernelRecord, KernelReport, Move, NewSession
from corral.domain.spec import SessionSpec
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.coordinator import Coordinator
from corral.manager.handlers.schedule_new import ScheduleNewSessions
from corral.services.agent_protocol import AgentProtocol
from corral.settings import SchedulerSettings
from corral.store import logs, sessions
from corral.store.db import transaction
from corral.store.tables import kernels as kernels_table
from corral.wakeup import Wakeup
from tests.conftest import BACKENDS
from tests.support.db import migrated, register_agent


class _PlaceOnly(ScheduleNewSessions):
    """Placement without its hand-over: kernels stay SCHEDULED, and the reports below start there
    (PREPARING is a report the store accepts from SCHEDULED)."""

    then = ()


async def _register(engine: AsyncEngine, agent_id: str) -> int:
    async with transaction(engine) as conn:
        return await register_agent(conn, agent_id, {"cpu": 4})


async def _kernel(engine: AsyncEngine, session_id: str) -> KernelRecord:
    async with engine.connect() as conn:
        found = await sessions.get(conn, session_id)
    assert found is not None
    [kernel] = found.kernels
    return kernel


async def _placed(engine: AsyncEngine, n: int) -> tuple[int, list[str], list[str], AgentProtocol]:
    """n one-kernel sessions placed on agent "a" (just room for them) and not handed over: its
    epoch, the sessions, their kernels, and the manager's side of the protocol."""
    async with transaction(engine) as conn:
        epoch = await register_agent(conn, "a", {"cpu": n})
    ids = [str(uuid.uuid4()) for _ in range(n)]
    async with transaction(engine) as conn:
        spec = SessionSpec(command=("true",))
        news = [NewSession(id=sid, name=f"s{i}", owner="t", spec=spec) for i, sid in enumerate(ids)]
        await sessions.insert_sessions(conn, news, datetime.now(UTC))
    scheduler = Coordinator(engine, "default", [], PhaseLimits(timeouts={}), lambda: datetime.now(UTC))
    assert await scheduler.run_handler(_PlaceOnly()) == n
    kernel_ids = [(await _kernel(engine, sid)).id for sid in ids]
    return epoch, ids, kernel_ids, AgentProtocol(engine, SchedulerSettings(), Wakeup(), log_cap=1 << 20)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_batch_applies_in_order_and_refuses_only_its_stale_reports(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        epoch = await _register(engine, "a")
        ids = [str(uuid.uuid4()) for _ in range(3)]
        async with transaction(engine) as conn:
            await sessions.insert_sessions(
                conn,
                [
                    NewSession(id=sid, name=f"s{i}", owner="t", spec=SessionSpec(command=("true",)))
                    for i, sid in enumerate(ids)
                ],
                datetime.now(UTC),
            )
        scheduler = Coordinator(engine, "default", [], PhaseLimits(timeouts={}), lambda: datetime.now(UTC))
        assert await scheduler.run_handler(_PlaceOnly()) == 3
        current, replaced, foreign = ids
        # `replaced` goes back to the queue and is placed again: its kernel is a new generation, and
        # whatever the agent says about the first placement is stale.
        async with transaction(engine) as conn:
            back = Move(replaced, SessionStatus.SCHEDULED, SessionStatus.PENDING, KernelStatus.PENDING)
            assert await sessions.apply_moves(conn, [back], datetime.now(UTC))
        assert await scheduler.run_handler(_PlaceOnly()) == 1
        k_current, k_replaced, k_foreign = [await _kernel(engine, sid) for sid in ids]
        assert (k_current.generation, k_replaced.generation) == (0, 1)
        await _register(engine, "b")  # another agent, reporting about a kernel placed on "a"

        protocol = AgentProtocol(engine, SchedulerSettings(), Wakeup(), log_cap=1 << 20)
        batch = [
            KernelReport(k_current.id, KernelStatus.PREPARING, generation=0),
            KernelReport(k_replaced.id, KernelStatus.PREPARING, generation=0),  # stale
            KernelReport(k_current.id, KernelStatus.PREPARED, generation=0),
            KernelReport(k_current.id, KernelStatus.CREATING, generation=0),
            KernelReport(k_current.id, KernelStatus.RUNNING, generation=0, master_port=29500),
        ]
        applied, refused, _ = await protocol.report("a", epoch, batch)
        assert (applied, refused) == (4, [k_replaced.id])
        after = await _kernel(engine, current)
        # Each step is legal only from the one before it: RUNNING means all four applied, in order.
        assert after.status is KernelStatus.RUNNING and after.master_port == 29500
        assert (await _kernel(engine, replaced)).status is KernelStatus.SCHEDULED

        # The current generation of the replaced kernel still applies; a kernel of agent "a"
        # reported by agent "b" does not, whatever else that batch holds.
        applied, refused, _ = await protocol.report(
            "a", epoch, [KernelReport(k_replaced.id, KernelStatus.PREPARING, generation=1)]
        )
        assert (applied, refused) == (1, [])
        applied, refused, _ = await protocol.report(
            "b", 1, [KernelReport(k_foreign.id, KernelStatus.PREPARING, generation=0)]
        )
        assert (applied, refused) == (0, [k_foreign.id])
        assert (await _kernel(engine, foreign)).status is KernelStatus.SCHEDULED

        # Out of order, a batch cannot skip steps: RUNNING before PREPARED is refused, the rest not.
        applied, refused, _ = await protocol.report(
            "a",
            epoch,
            [
                KernelReport(k_foreign.id, KernelStatus.PREPARING, generation=0),
                KernelReport(k_foreign.id, KernelStatus.RUNNING, generation=0),
                KernelReport(k_foreign.id, KernelStatus.PREPARED, generation=0),
            ],
        )
        assert (applied, refused) == (2, [k_foreign.id])
        assert (await _kernel(engine, foreign)).status is KernelStatus.PREPARED

        # What only the manager decides is never taken from a report, even the kernel's own agent's.
        for status in (
            KernelStatus.PENDING,
            KernelStatus.SCHEDULED,
            KernelStatus.TERMINATING,
            KernelStatus.SUSPENDED,
        ):
            applied, refused, _ = await protocol.report(
                "a", epoch, [KernelReport(k_foreign.id, status, generation=0)]
            )
            assert (applied, refused) == (0, [k_foreign.id]), status
        assert (await _kernel(engine, foreign)).status is KernelStatus.PREPARED


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_session_has_started_once_a_process_of_it_ran_whatever_was_reported(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """started_at is the time of the batch in which a kernel's process was first known to run: its
    RUNNING report, or an end with an exit code or a signal when no start was reported.  A kernel
    that failed before it ran leaves its session not started."""
    async with migrated(fresh_database(backend)) as engine:
        epoch, ids, k, protocol = await _placed(engine, 4)
        ran_and_said, ended_only, never_ran, not_yet = k
        batch = [
            KernelReport(ran_and_said, KernelStatus.PREPARING),
            KernelReport(ran_and_said, KernelStatus.PREPARED),
            KernelReport(ran_and_said, KernelStatus.CREATING),
            KernelReport(ran_and_said, KernelStatus.RUNNING),
            KernelReport(ran_and_said, KernelStatus.TERMINATED, exit_code=0),
            KernelReport(ended_only, KernelStatus.PREPARING),
            KernelReport(ended_only, KernelStatus.TERMINATED, signal=9),
            KernelReport(never_ran, KernelStatus.PREPARING),
            KernelReport(never_ran, KernelStatus.ERROR, termination_message="image not found"),
            KernelReport(not_yet, KernelStatus.PREPARING),
        ]
        before = datetime.now(UTC)
        applied, refused, _ = await protocol.report("a", epoch, batch)
        after = datetime.now(UTC)
        assert (applied, refused) == (len(batch), [])
        async with engine.connect() as conn:
            found = {s.id: s.started_at for s in await sessions.get_many(conn, ids)}
        for sid in ids[:2]:
            started = found[sid]
            assert started is not None and before <= started <= after, sid
        assert (found[ids[2]], found[ids[3]]) == (None, None)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_batch_of_endings_is_written_as_reported(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """Every field of every ending lands on its own kernel, whatever the others carried (a port
    reported with the start is kept by an ending without one, output once done stays done)."""
    async with migrated(fresh_database(backend)) as engine:
        epoch, ids, k, protocol = await _placed(engine, 5)
        steps = (KernelStatus.PREPARING, KernelStatus.PREPARED, KernelStatus.CREATING, KernelStatus.RUNNING)
        started = [KernelReport(kid, status) for kid in k for status in steps]
        started[3] = KernelReport(k[0], KernelStatus.RUNNING, master_port=29501)
        started[7] = KernelReport(k[1], KernelStatus.RUNNING, master_port=29502)
        assert (await protocol.report("a", epoch, started))[:2] == (len(started), [])

        record = {"exit_code": 3, "nested": [1, "é", {"k": None}]}
        endings = [
            KernelReport(k[0], KernelStatus.TERMINATED, exit_code=0, exited_at_ns=2**62, output_done=True),
            KernelReport(k[1], KernelStatus.TERMINATED, signal=9, killed_by_corral=True),
            KernelReport(k[2], KernelStatus.ERROR, exit_code=137, oom_killed=True, master_port=29503),
            KernelReport(
                k[3], KernelStatus.ERROR, exit_code=3, error_record=record, termination_message="boom\nline 2"
            ),
            KernelReport(k[4], KernelStatus.CANCELLED, agent_lost=True, detail={"why": ["lost", 1]}),
        ]
        async with transaction(engine) as conn:
            await logs.mark_done(conn, k[1])  # its output shipped in full before it ended
        before = datetime.now(UTC)
        assert (await protocol.report("a", epoch, endings))[:2] == (len(endings), [])
        after = datetime.now(UTC)

        got = {kid: await _kernel(engine, sid) for kid, sid in zip(k, ids, strict=True)}
        first, killed, oom, failed, lost = (got[kid] for kid in k)
        assert (first.status, first.exit_code, first.exited_at_ns) == (KernelStatus.TERMINATED, 0, 2**62)
        assert (first.master_port, first.logs_done, first.started) == (29501, True, True)
        assert (killed.signal, killed.killed_by_corral, killed.exit_code) == (9, True, None)
        assert (killed.master_port, killed.logs_done) == (29502, True)  # done stays done
        assert all(before <= got[kid].status_changed_at <= after for kid in k)
        assert (oom.status, oom.exit_code, oom.oom_killed, oom.conditions) == (
            KernelStatus.ERROR,
            137,
            True,
            ["oom_killed"],
        )
        assert oom.master_port == 29503 and not oom.logs_done
        assert (failed.error_record, failed.termination_message) == (record, "boom\nline 2")
        assert (failed.conditions, failed.detail, failed.oom_killed) == ([], {}, False)
        assert (lost.status, lost.agent_lost, lost.detail, lost.error_record) == (
            KernelStatus.CANCELLED,
            True,
            {"why": ["lost", 1]},
            None,
        )
        assert lost.started  # it ran (its RUNNING report), though it ended without an exit code
        async with engine.connect() as conn:  # no record is JSON null, as it always was, not SQL NULL
            stored = select(kernels_table.c.error_record.is_(None)).where(kernels_table.c.id == lost.id)
            assert (await conn.execute(stored)).scalar() is False
