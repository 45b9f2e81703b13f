"""Agents' reports of their kernels, epoch-fenced: a batch in one transaction, a round of guarded
UPDATEs per report position."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import ColumnElement, String, bindparam, cast, literal, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import ReturningUpdate

from corral.domain.cause import TerminationReason
from corral.domain.records import KernelReport
from corral.domain.status import KERNEL_STARTED, TERMINAL_KERNEL, KernelStatus
from corral.domain.transitions import kernel_sources
from corral.store import dialect
from corral.store.db import transaction
from corral.store.kernels.ends import IDS, NOW, release
from corral.store.kernels.rows import (
    AGENT_REPORTS,
    END_FIELDS,
    PORT_FIELDS,
    ending,
    suspended_detail,
    write_kernels,
)
from corral.store.tables import kernels, sessions
from corral.store.unit import Engine


async def apply_report(
    engine: Engine,
    agent_id: str,
    reports: Sequence[KernelReport],
    now: datetime,
    *,
    contact: Callable[[AsyncConnection], Awaitable[bool]],
) -> tuple[list[str], bool]:
    """An agent's batch of reports in one transaction, `contact(conn)` first (it refuses a fenced
    epoch, and writes the contact when due): the refused kernel ids and whether the contact was
    recorded."""
    async with transaction(engine) as conn:
        recorded = await contact(conn)
        refused, held = await apply_reports(conn, agent_id, reports, now)
    if held:  # sessions someone held: marked now, in a transaction holding nothing else
        async with transaction(engine) as conn:
            await mark_started(conn, held, now)
    return refused, recorded


async def apply_reports(
    conn: AsyncConnection, agent_id: str, reports: Sequence[KernelReport], now: datetime
) -> tuple[list[str], list[str]]:
    """A batch of reports, each kernel's in the order sent; returns the refused kernel ids, and
    the started sessions another transaction held, to mark started once it lets go (`mark_started`).

    Kernels are independent rows, so the batch is applied in rounds: round i holds every kernel's
    i-th report, and a round's non-terminal reports go in one guarded UPDATE per status (the same
    guard as a single report: this agent, this generation, a legal source).  An ending is its own
    guarded UPDATE (it carries its own outcome); allocations freed by endings are written once per
    round, and sessions whose first process started once per batch."""
    refused, rounds = report_rounds(reports)
    started: set[str] = set()
    for batch in rounds:
        steps = [r for r in batch if r.status not in TERMINAL_KERNEL]
        moved = await _apply_steps(conn, agent_id, steps, now, started)
        endings = [r for r in batch if r.status in TERMINAL_KERNEL]
        moved |= await _apply_endings(conn, agent_id, endings, now, started)
        refused += [r.kernel_id for r in batch if r.kernel_id not in moved]
    held = await mark_started(conn, sorted(started), now, skip_held=True)
    return refused, held


def report_rounds(reports: Sequence[KernelReport]) -> tuple[list[str], list[list[KernelReport]]]:
    """The kernels refused outright (a status no agent may report), and the rest in rounds: round i
    holds every kernel's i-th report."""
    refused = [r.kernel_id for r in reports if r.status not in AGENT_REPORTS]
    rounds: list[list[KernelReport]] = []
    seen: dict[str, int] = defaultdict(int)
    for r in (r for r in reports if r.status in AGENT_REPORTS):
        i = seen[r.kernel_id]
        seen[r.kernel_id] += 1
        if i == len(rounds):
            rounds.append([])
        rounds[i].append(r)
    return refused, rounds


async def _apply_steps(
    conn: AsyncConnection, agent_id: str, steps: Sequence[KernelReport], now: datetime, started: set[str]
) -> set[str]:
    """Non-terminal reports of distinct kernels, one guarded UPDATE per status; the moved.  Adds
    to `started` the sessions of kernels that started."""
    groups: dict[KernelStatus, list[KernelReport]] = defaultdict(list)
    for r in steps:
        groups[r.status].append(r)
    moved: set[str] = set()
    ports: list[tuple[Any, ...]] = []
    for status, group in groups.items():
        result = await conn.execute(_step(status), {**_guard_params(agent_id, group), "k_now": now})
        for kernel_id, session_id in result:
            moved.add(kernel_id)
            if status is KernelStatus.RUNNING:
                started.add(session_id)
        # Every rank 0 picks its own port: set apart, in one write_kernels for those that moved.
        ports += [(r.kernel_id, r.master_port) for r in group if r.master_port is not None]
    ports = [p for p in ports if p[0] in moved]
    if ports:
        await write_kernels(conn, PORT_FIELDS, ports, None)
    return moved


def _guard(status: KernelStatus | None) -> list[ColumnElement[bool]]:
    """A report's guard: this agent's current placement (a re-placed kernel is a new generation,
    and reports about an earlier one are stale), from a legal source of the reported status
    (checked by the caller without `status`)."""
    guard = [
        # The ids alone too: that is what makes the planner look kernels up by key (the pair alone
        # made SQLite scan every kernel the agent ever ran).
        kernels.c.id.in_(IDS),
        # The pair as one text, `id:generation`: a list of scalars is one parameter on PostgreSQL
        # (store/db.py), where a list of pairs is a statement of its own for every length.
        (kernels.c.id + ":" + cast(kernels.c.generation, String)).in_(bindparam("k_pairs", expanding=True)),
        kernels.c.agent_id == bindparam("k_agent"),
    ]
    if status is not None:
        guard.append(kernels.c.status.in_([str(s) for s in kernel_sources(status)]))
    return guard


def _guard_params(agent_id: str, group: Sequence[KernelReport]) -> dict[str, Any]:
    return {
        "k_ids": [r.kernel_id for r in group],
        "k_pairs": [f"{r.kernel_id}:{r.generation}" for r in group],
        "k_agent": agent_id,
    }


@cache
def _step(status: KernelStatus) -> ReturningUpdate[str, str]:
    """Kernels reported in a non-terminal `status` move there, through the guard."""
    values: dict[str, Any] = {"status": str(status), "status_changed_at": NOW}
    if status in KERNEL_STARTED:
        values["started"] = True
    return (
        update(kernels).where(*_guard(status)).values(**values).returning(kernels.c.id, kernels.c.session_id)
    )


_STARTED = (
    update(sessions).where(sessions.c.id.in_(IDS), sessions.c.started_at.is_(None)).values(started_at=NOW)
)


async def mark_started(
    conn: AsyncConnection, session_ids: list[str], now: datetime, *, skip_held: bool = False
) -> list[str]:
    """A session has started when its first process has, even one that ended before a cycle
    promoted the session to RUNNING (its time budget and its history count from then).

    With `skip_held`, a session whose row another transaction holds is left out and returned: a
    move holds its session and then waits on its kernels, which the caller's reports hold, so
    waiting here would deadlock.  The caller marks those once it holds nothing else."""
    if not session_ids:
        return []
    held: list[str] = []
    if skip_held and dialect.of(conn).locks_rows:
        free_rows = dialect.of(conn).for_update(
            select(sessions.c.id).where(sessions.c.id.in_(IDS)), skip_locked=True
        )
        free = set((await conn.execute(free_rows, {"k_ids": session_ids})).scalars())
        held = [sid for sid in session_ids if sid not in free]
        session_ids = [sid for sid in session_ids if sid in free]
    if session_ids:
        await conn.execute(_STARTED, {"k_ids": session_ids, "k_now": now})
    return held


async def _apply_endings(
    conn: AsyncConnection, agent_id: str, endings: Sequence[KernelReport], now: datetime, started: set[str]
) -> set[str]:
    """Terminal reports of distinct kernels through the single report's guard, set-wise: the rows
    that pass it are read (and locked) in one query, then written in one write_kernels; the
    moved.  A kernel of a session being suspended waits SUSPENDED instead (preemption in suspend mode).
    Adds to `started` the sessions of kernels whose process ran (an end with an exit code or a
    signal), for a session whose start was never reported."""
    if not endings:
        return set()
    found = await _ending_kernels(conn, agent_id, endings)
    suspending = {kid for kid, (_, _, suspended) in found.items() if suspended}
    moved: set[str] = set()
    for r in endings:
        if r.kernel_id in suspending and await _suspend(conn, agent_id, r, now):
            moved.add(r.kernel_id)
    passing = {
        r.kernel_id: found[r.kernel_id][0]
        for r in endings
        if r.kernel_id in found
        and r.kernel_id not in suspending
        and found[r.kernel_id][1] in kernel_sources(r.status)  # a legal source of the reported end
    }
    rows = [ending(r) for r in endings if r.kernel_id in passing]
    started.update(passing[r[0]] for r in rows if r[-1])  # id first, `started` last (END_FIELDS)
    if rows:
        await write_kernels(conn, END_FIELDS, rows, now)
    ended = sorted(r[0] for r in rows)
    moved.update(ended)
    await release(conn, ended, now)  # a suspended kernel's is freed by _suspend
    return moved


async def _ending_kernels(
    conn: AsyncConnection, agent_id: str, reports: Sequence[KernelReport]
) -> dict[str, tuple[str, KernelStatus, bool]]:
    """The reported kernels that are this agent's current placement (a re-placed kernel is a new
    generation), as (session id, status, whether its session is being suspended): one read for
    the guard of every ending, whatever its status, and for suspend mode's preemption.  The
    kernels' rows are locked (where the writer does not hold the whole database's lock), so what
    was read still holds when they are written."""
    query = dialect.of(conn).for_update(_ENDING_KERNELS, of=kernels)
    rows = await conn.execute(query, _guard_params(agent_id, reports))
    return {kid: (sid, KernelStatus(status), bool(suspended)) for kid, sid, status, suspended in rows}


_ENDING_KERNELS = (
    select(
        kernels.c.id,
        kernels.c.session_id,
        kernels.c.status,
        sessions.c.termination_reason == str(TerminationReason.SUSPENDED),
    )
    .join(sessions, sessions.c.id == kernels.c.session_id)
    .where(*_guard(None))
)


async def _guarded(
    conn: AsyncConnection, agent_id: str, report: KernelReport, status: KernelStatus, values: dict[str, Any]
) -> bool:
    """The report's move to `status`, only for this agent's current placement from a legal source."""
    result = await conn.execute(
        update(kernels)
        .where(
            kernels.c.id == report.kernel_id,
            kernels.c.agent_id == agent_id,
            # A re-placed kernel is a new generation: reports about an earlier placement are stale.
            kernels.c.generation == report.generation,
            kernels.c.status.in_([str(s) for s in kernel_sources(status)]),
        )
        .values(**values)
    )
    return bool(result.rowcount)


async def _suspend(conn: AsyncConnection, agent_id: str, report: KernelReport, now: datetime) -> bool:
    """A suspended session's kernel has stopped: it waits SUSPENDED, its allocation freed. How it
    ended is kept in its detail only: it is not an outcome (a resumed kernel starts afresh)."""
    values = {
        "status": str(KernelStatus.SUSPENDED),
        "status_changed_at": now,
        "detail": suspended_detail(report),
        "logs_done": or_(kernels.c.logs_done, literal(report.output_done)),
    }
    moved = await _guarded(conn, agent_id, report, KernelStatus.SUSPENDED, values)
    if moved:
        await release(conn, [report.kernel_id], now)
    return moved
