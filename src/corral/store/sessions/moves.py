"""Guarded status moves: a session and its kernels change status only from a legal source, with the
move's history and events in the same transaction."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from functools import cache, lru_cache
from itertools import groupby, pairwise
from typing import Any

from sqlalchemy import (
    ColumnElement,
    bindparam,
    exists,
    func,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import ReturningUpdate, Update

from corral.domain.errors import RefusedTransition
from corral.domain.records import Move
from corral.domain.rendezvous import may_run
from corral.domain.status import (
    KERNEL_PROCESS,
    TERMINAL_SESSION,
    KernelStatus,
    SessionStatus,
)
from corral.domain.transitions import kernel_move_allowed, kernel_sources, session_move_allowed
from corral.store import agents as agent_store
from corral.store import dialect, journal
from corral.store.db import autocommitting, chunks
from corral.store.tables import (
    allocations,
    kernels,
    sessions,
)


async def apply_moves(
    conn: AsyncConnection, moves: Sequence[Move], now: datetime, history: Sequence[journal.HistoryRow] = ()
) -> list[Move]:
    """Guarded UPDATEs, grouped so a batch costs a few statements; returns the moves that won.
    Each won move's events are written, and its rows of `history` (only a won move's are)."""
    for m in moves:
        hops = (m.src, *m.via, m.dst)
        for a, b in pairwise(hops):
            if not session_move_allowed(a, b):
                raise RefusedTransition(f"{a} -> {b} is not a session transition")
        if set(m.via) & _SIDE_EFFECTS:
            raise RefusedTransition(f"{m.src} -> {m.dst} may not pass {m.via}: a status with side effects")
        if m.kernel_via and (m.kernel_dst is None or not _kernel_path_allowed((*m.kernel_via, m.kernel_dst))):
            raise RefusedTransition(f"kernels may not go {m.kernel_via} -> {m.kernel_dst}")
    groups: dict[tuple[Any, ...], list[Move]] = defaultdict(list)
    for m in moves:
        groups[(m.src, m.dst, m.kernel_dst, m.values, m.kernel_via, m.unrequested)].append(m)
    rows_of: dict[str, list[journal.HistoryRow]] = defaultdict(list)
    for row in history:
        rows_of[row.session_id].append(row)
    won: list[Move] = []
    project_of: dict[str, str] = {}
    for (src, dst, kernel_dst, values, kernel_via, unrequested), group in groups.items():
        ids = [m.session_id for m in group]
        statement = _move(src, dst, tuple(name for name, _ in values), unrequested)
        params = {"m_now": now, **{f"m_{name}": value for name, value in values}}
        for part in chunks(ids):
            if dst is SessionStatus.PENDING:
                if autocommitting(conn):
                    raise RuntimeError("a move back to the queue takes a transaction: it locks first")
                # The guard reads kernels as of the statement's start: lock them first (the order
                # reports take too), so a report committing a start in between is seen, not missed.
                await dialect.of(conn).lock(conn, select(kernels.c.id).where(kernels.c.session_id.in_(part)))
            result = await conn.execute(statement, {**params, "m_ids": part})
            found = {sid: project for sid, project in result}
            project_of.update(found)
            moved = set(found)
            won.extend(m for m in group if m.session_id in moved)
            if moved and kernel_dst is not None:
                await move_kernels_of(conn, list(moved), kernel_dst, now, kernel_via)
            if moved and dst is SessionStatus.PENDING:
                await _back_to_queue(conn, list(moved), now, resumed=src is SessionStatus.SUSPENDED)
    await journal.add_events(
        conn, [event for m in won for event in _events(m, project_of[m.session_id])], now
    )
    await journal.add_history(conn, [row for m in won for row in rows_of[m.session_id]], now)
    return won


# Statuses whose move sets more than the status (see _move): never passed on the way to another.
_SIDE_EFFECTS = frozenset({SessionStatus.PENDING, SessionStatus.RUNNING}) | TERMINAL_SESSION


def _kernel_path_allowed(path: Sequence[KernelStatus]) -> bool:
    return all(kernel_move_allowed(a, b) for a, b in pairwise(path))


def _events(m: Move, project: str) -> list[journal.EventRow]:
    """A move's event rows, one per hop."""
    hops = (m.src, *m.via, m.dst)
    return [
        journal.session_event(m.session_id, project, "session.status_changed", a, b)
        for a, b in pairwise(hops)
    ]


_MAY_RUN = [str(s) for s in KERNEL_PROCESS]


@lru_cache(maxsize=1024)
def _move(
    src: SessionStatus, dst: SessionStatus, names: tuple[str, ...], unrequested: bool = False
) -> ReturningUpdate[str, str]:
    """The guarded UPDATE of a group of moves src -> dst setting the columns `names` too (bound as
    m_<name>; the ids as m_ids, the time as m_now), built once per shape; with `unrequested`,
    only of sessions no termination was requested for."""
    now = bindparam("m_now", type_=sessions.c.status_changed_at.type)
    extra: dict[str, Any] = {name: bindparam(f"m_{name}", type_=sessions.c[name].type) for name in names}
    if dst in TERMINAL_SESSION:
        extra.setdefault("terminated_at", now)
    if dst is SessionStatus.RUNNING:
        extra.setdefault("started_at", func.coalesce(sessions.c.started_at, now))
    guard = [sessions.c.status == str(src)]
    if unrequested:
        guard.append(sessions.c.termination_reason.is_(None))
    if dst is SessionStatus.PENDING:
        # Never re-queued while a kernel of it may run (prepare and start): that would free its
        # allocation before it is confirmed dead and could start a second copy beside it.
        guard.append(~exists().where(kernels.c.session_id == sessions.c.id, kernels.c.status.in_(_MAY_RUN)))
    return (
        update(sessions)
        .where(sessions.c.id.in_(bindparam("m_ids", expanding=True)), *guard)
        .values(status=str(dst), status_changed_at=now, phase_tries=0, **extra)
        .returning(sessions.c.id, sessions.c.project)
    )


async def with_running_kernels(conn: AsyncConnection, session_ids: Sequence[str]) -> set[str]:
    """Those of these sessions of which a process may exist (domain.rendezvous.may_run)."""
    found: set[str] = set()
    alive = await agent_store.alive_ids(conn) if session_ids else set()
    for part in chunks(session_ids):
        rows = await conn.execute(
            select(kernels.c.session_id, kernels.c.status, kernels.c.agent_id, kernels.c.master_port)
            .where(kernels.c.session_id.in_(part))
            .order_by(kernels.c.session_id, kernels.c.rank)
        )
        for sid, group in groupby(rows, key=lambda r: r.session_id):
            ranks = list(group)
            if may_run([(KernelStatus(r.status), r.agent_id) for r in ranks], ranks[0].master_port, alive):
                found.add(sid)
    return found


async def move_kernels_of(
    conn: AsyncConnection,
    session_ids: list[str],
    dst: KernelStatus,
    now: datetime,
    via: tuple[KernelStatus, ...] = (),
) -> None:
    """Move the sessions' kernels that may legally go to `dst`, or through `via` to it (those that
    may go to its first status, or are at one of its statuses already); others (e.g. ended) stay."""
    await conn.execute(_move_kernels(dst, via), {"ids": session_ids, "k_now": now})


@cache
def _move_kernels(dst: KernelStatus, via: tuple[KernelStatus, ...]) -> Update:
    return (
        update(kernels)
        .where(kernels.c.session_id.in_(bindparam("ids", expanding=True)), *_kernel_guard(dst, via))
        .values(status=str(dst), status_changed_at=bindparam("k_now"))
    )


def _kernel_guard(dst: KernelStatus, via: tuple[KernelStatus, ...]) -> list[ColumnElement[bool]]:
    """move_kernels_of's guard: kernels at a source of `dst` (of via[0], or one of `via`'s, with `via`)."""
    sources = sorted(str(s) for s in (kernel_sources(via[0]) | set(via) if via else kernel_sources(dst)))
    return [kernels.c.status.in_(sources)]


async def _back_to_queue(
    conn: AsyncConnection, session_ids: list[str], now: datetime, resumed: bool = False
) -> None:
    """Re-scheduling (or resuming a suspended session): allocations released, kernels detached from
    their agents, to be placed afresh as a new generation."""
    # Only the allocations of kernels that went back to PENDING: one that did not may still run.
    back = select(kernels.c.id).where(
        kernels.c.session_id.in_(session_ids), kernels.c.status == str(KernelStatus.PENDING)
    )
    await conn.execute(
        update(allocations)
        .where(allocations.c.kernel_id.in_(back), allocations.c.released_at.is_(None))
        .values(released_at=now)
    )
    await conn.execute(
        update(kernels)
        .where(kernels.c.session_id.in_(session_ids), kernels.c.status == str(KernelStatus.PENDING))
        .values(
            agent_id=None,
            master_port=None,
            kill_requested=False,
            kill_forced=False,
            logs_done=False,
            log_dropped=0,
            kill_grace=None,
            devices=None,
            generation=kernels.c.generation + 1,
        )
    )
    counter = sessions.c.resume_count if resumed else sessions.c.reschedule_count
    await conn.execute(update(sessions).where(sessions.c.id.in_(session_ids)).values({counter: counter + 1}))


async def bump_tries(conn: AsyncConnection, session_ids: list[str]) -> dict[str, int]:
    """Increment the failure count of the current status; returns the new counts."""
    if not session_ids:
        return {}
    await conn.execute(
        update(sessions).where(sessions.c.id.in_(session_ids)).values(phase_tries=sessions.c.phase_tries + 1)
    )
    rows = await conn.execute(
        select(sessions.c.id, sessions.c.phase_tries).where(sessions.c.id.in_(session_ids))
    )
    return {sid: n for sid, n in rows}
