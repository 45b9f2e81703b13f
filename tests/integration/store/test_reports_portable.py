"""A report round on either backend: a fenced epoch writes nothing, a kernel of a session being
suspended waits SUSPENDED beside one that ends, allocations are freed and sessions marked started;
on PostgreSQL, a round racing a cancel or a move lands from where the other left the kernel, and
never waits on a session another transaction holds."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.cause import TerminationReason
from corral.domain.records import KernelReport, Move
from corral.domain.status import KernelStatus, SessionStatus
from corral.services.errors import Fenced
from corral.store import agents, sessions
from corral.store.db import reading, transaction
from corral.store.tables import agents as agent_table
from corral.store.tables import allocations
from corral.store.tables import kernels as kernel_table
from corral.store.tables import sessions as session_table
from tests.conftest import BACKENDS
from tests.integration.store.test_reports import _kernel, _placed
from tests.support.db import migrated
from tests.support.eventually import eventually


async def _released(engine: Any, kernel_id: str) -> bool:
    async with engine.connect() as conn:
        query = select(allocations.c.released_at).where(allocations.c.kernel_id == kernel_id)
        row = await conn.execute(query)
        return row.scalar_one() is not None


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_round_frees_starts_and_suspends(backend: str, fresh_database: Callable[[str], str]) -> None:
    async with migrated(fresh_database(backend)) as engine:
        epoch, ids, k, protocol = await _placed(engine, 3)
        async with transaction(engine) as conn:
            # The second session is being suspended (preemption in suspend mode).
            await conn.execute(
                update(session_table)
                .where(session_table.c.id == ids[1])
                .values(termination_reason=str(TerminationReason.SUSPENDED))
            )
        steps = (KernelStatus.PREPARING, KernelStatus.PREPARED, KernelStatus.CREATING, KernelStatus.RUNNING)
        runs = [KernelReport(kid, s) for kid in k for s in steps]
        assert (await protocol.report("a", epoch, runs))[:2] == (len(runs), [])
        ended = [
            KernelReport(k[0], KernelStatus.TERMINATED, exit_code=0),
            KernelReport(k[1], KernelStatus.TERMINATED, exit_code=143, detail={"n": 1}),
            KernelReport(k[2], KernelStatus.ERROR, exit_code=1, generation=7),  # an earlier placement
        ]
        assert (await protocol.report("a", epoch, ended))[:2] == (2, [k[2]])
        first, suspended, stale = [await _kernel(engine, sid) for sid in ids]
        assert (first.status, first.exit_code) == (KernelStatus.TERMINATED, 0)
        assert suspended.status is KernelStatus.SUSPENDED and suspended.exit_code is None
        how = {"exit_code": 143, "signal": None, "oom_killed": False}
        assert suspended.detail == {"n": 1, "suspended": how}
        assert stale.status is KernelStatus.RUNNING
        assert [await _released(engine, kid) for kid in k] == [True, True, False]
        async with engine.connect() as conn:
            found = [await sessions.get(conn, sid) for sid in ids]
        assert all(s is not None and s.started_at is not None for s in found)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_fenced_epoch_writes_nothing_not_even_its_contact(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        epoch, ids, k, protocol = await _placed(engine, 2)
        assert (await protocol.report("a", epoch, []))[:2] == (0, [])  # its contact: none due next
        async with transaction(engine) as conn:
            await agents.fence(conn, ["a"], datetime.now(UTC))
            seen = (await conn.execute(select(agent_table.c.last_heartbeat))).scalar_one()
        reports = [KernelReport(k[0], KernelStatus.PREPARING), KernelReport(k[1], KernelStatus.CANCELLED)]
        two_rounds = [*reports, KernelReport(k[0], KernelStatus.PREPARED)]
        for batch in ([], reports, two_rounds):
            with pytest.raises(Fenced):
                await protocol.report("a", epoch, batch)
        assert [(await _kernel(engine, sid)).status for sid in ids] == [KernelStatus.SCHEDULED] * 2
        assert not await _released(engine, k[1])
        async with engine.connect() as conn:
            assert (await conn.execute(select(agent_table.c.last_heartbeat))).scalar_one() == seen


async def test_a_move_back_to_the_queue_is_refused_outside_a_transaction(
    fresh_database: Callable[[str], str],
) -> None:
    """Its kernels are locked before the move: outside a transaction the lock would be gone."""
    async with migrated(fresh_database("postgres")) as engine:
        _, ids, _, _ = await _placed(engine, 1)
        move = Move(ids[0], SessionStatus.SCHEDULED, SessionStatus.PENDING, KernelStatus.PENDING)
        async with reading(engine) as conn:
            with pytest.raises(RuntimeError, match="takes a transaction"):
                await sessions.apply_moves(conn, [move], datetime.now(UTC))
        async with engine.connect() as conn:
            found = await sessions.get(conn, ids[0])
        assert found is not None and found.status is SessionStatus.SCHEDULED


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_session_starts_when_its_process_runs_not_when_it_is_created(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        epoch, ids, k, protocol = await _placed(engine, 1)
        created = (KernelStatus.PREPARING, KernelStatus.PREPARED, KernelStatus.CREATING)
        for steps in (created, (KernelStatus.RUNNING,)):
            reports = [KernelReport(k[0], s) for s in steps]
            assert (await protocol.report("a", epoch, reports))[:2] == (len(reports), [])
            async with engine.connect() as conn:
                found = await sessions.get(conn, ids[0])
            assert found is not None
            assert (found.started_at is not None) is (steps[-1] is KernelStatus.RUNNING)


async def test_a_round_does_not_wait_on_a_session_someone_holds_and_marks_it_started_after(
    fresh_database: Callable[[str], str],
) -> None:
    """The round marks sessions started only where no one holds their row: a move holds its
    session, then waits on its kernels, which the round holds (the wait would deadlock).  The
    session held is marked by the report's next statement, once it is free."""
    async with migrated(fresh_database("postgres")) as engine:
        epoch, ids, k, protocol = await _placed(engine, 1)
        steps = (KernelStatus.PREPARING, KernelStatus.PREPARED, KernelStatus.CREATING, KernelStatus.RUNNING)
        async with engine.connect() as holder:
            # As a move holds it: its row updated (and so locked) until the transaction ends.
            await holder.execute(
                update(session_table).where(session_table.c.id == ids[0]).values(phase_tries=0)
            )
            report = asyncio.create_task(protocol.report("a", epoch, [KernelReport(k[0], s) for s in steps]))

            async def running() -> bool:
                return (await _kernel(engine, ids[0])).status is KernelStatus.RUNNING

            await eventually(running, "the kernel RUNNING (the round must not wait on the session)")
            assert not report.done()  # the session's mark waits for it
            await holder.rollback()
        assert (await asyncio.wait_for(report, 10))[:2] == (len(steps), [])
        async with engine.connect() as conn:
            found = await sessions.get(conn, ids[0])
        assert found is not None and found.started_at is not None


async def test_an_ending_racing_a_cancel_is_applied_from_where_the_cancel_left_the_kernel(
    fresh_database: Callable[[str], str],
) -> None:
    """The round's write matches the kernel's status as it found it (RUNNING); a cancel commits
    TERMINATING meanwhile.  The ending is legal from there too, and lands: one report at a time
    would have had it, and an agent whose last word is refused never says it again."""
    async with migrated(fresh_database("postgres")) as engine:
        epoch, ids, k, protocol = await _placed(engine, 1)
        steps = (KernelStatus.PREPARING, KernelStatus.PREPARED, KernelStatus.CREATING, KernelStatus.RUNNING)
        assert (await protocol.report("a", epoch, [KernelReport(k[0], s) for s in steps]))[:2] == (4, [])
        async with engine.connect() as cancel:
            terminating = str(KernelStatus.TERMINATING)
            await cancel.execute(
                update(kernel_table).where(kernel_table.c.id == k[0]).values(status=terminating)
            )
            ending = [KernelReport(k[0], KernelStatus.TERMINATED, exit_code=0)]
            report = asyncio.create_task(protocol.report("a", epoch, ending))
            async with engine.connect() as look:
                # Failed once in a full clean-clone run (never alone): say what the report did.
                await eventually(_lock_waited(look, report), "the report to wait on the kernel")
            await cancel.commit()
        assert (await asyncio.wait_for(report, 10))[:2] == (1, [])
        found = await _kernel(engine, ids[0])
        assert (found.status, found.exit_code) == (KernelStatus.TERMINATED, 0)


async def test_a_step_racing_a_cancel_is_refused_from_where_the_cancel_left_the_kernel(
    fresh_database: Callable[[str], str],
) -> None:
    """The round's step matches the kernel's status as its snapshot had it (CREATING); a cancel
    commits TERMINATING meanwhile.  RUNNING is not legal from there: the guarded step, re-checked
    on the row the cancel committed, is refused; the kernel stays where the cancel left it."""
    async with migrated(fresh_database("postgres")) as engine:
        epoch, ids, k, protocol = await _placed(engine, 1)
        steps = (KernelStatus.PREPARING, KernelStatus.PREPARED, KernelStatus.CREATING)
        assert (await protocol.report("a", epoch, [KernelReport(k[0], s) for s in steps]))[:2] == (3, [])
        async with engine.connect() as cancel:
            terminating = str(KernelStatus.TERMINATING)
            await cancel.execute(
                update(kernel_table).where(kernel_table.c.id == k[0]).values(status=terminating)
            )
            report = asyncio.create_task(
                protocol.report("a", epoch, [KernelReport(k[0], KernelStatus.RUNNING)])
            )
            async with engine.connect() as look:
                await eventually(_lock_waited(look, report), "the report to wait on the kernel")
            await cancel.commit()
        assert (await asyncio.wait_for(report, 10))[:2] == (0, [k[0]])
        assert (await _kernel(engine, ids[0])).status is KernelStatus.TERMINATING


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_ending_sent_again_for_a_suspended_kernel_is_refused(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """A kernel waiting SUSPENDED whose ending comes again (an agent re-sending it): refused, and
    it stays SUSPENDED."""
    async with migrated(fresh_database(backend)) as engine:
        epoch, ids, k, protocol = await _placed(engine, 1)
        steps = (KernelStatus.PREPARING, KernelStatus.PREPARED, KernelStatus.CREATING, KernelStatus.RUNNING)
        assert (await protocol.report("a", epoch, [KernelReport(k[0], s) for s in steps]))[:2] == (4, [])
        async with transaction(engine) as conn:
            reason = str(TerminationReason.SUSPENDED)
            await conn.execute(
                update(session_table).where(session_table.c.id == ids[0]).values(termination_reason=reason)
            )
        ending = [KernelReport(k[0], KernelStatus.TERMINATED, exit_code=143)]
        assert (await protocol.report("a", epoch, ending))[:2] == (1, [])
        assert (await _kernel(engine, ids[0])).status is KernelStatus.SUSPENDED
        assert (await protocol.report("a", epoch, ending))[:2] == (0, [k[0]])
        assert (await _kernel(engine, ids[0])).status is KernelStatus.SUSPENDED


def _lock_waited(look: AsyncConnection, report: asyncio.Task[Any]) -> Callable[[], Awaitable[int]]:
    """A check for `eventually`: how many statements wait on a lock, read on `look`; failing at once
    if `report` ended without waiting."""
    waiting = text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")

    async def check() -> int:
        if found := int((await look.execute(waiting)).scalar_one()):
            return found
        assert not report.done(), f"the report ended without waiting: {_outcome(report)}"
        return 0

    return check


def _outcome(task: asyncio.Task[Any]) -> str:
    """A finished task's result or exception, for a failure message."""
    error = task.exception()
    return repr(error) if error is not None else repr(task.result())
