"""Termination requests (cancel, deadline, preemption, agent loss) and the sweep that finds them due."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import (
    and_,
    bindparam,
    case,
    exists,
    func,
    literal,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.cause import TerminationReason
from corral.domain.records import SessionRecord
from corral.domain.status import (
    TERMINAL_SESSION,
    SessionStatus,
)
from corral.store import agents as agent_store
from corral.store import dialect, journal
from corral.store.db import chunks
from corral.store.sessions.read import select_with_kernels
from corral.store.tables import (
    sessions,
)


async def request_termination(
    conn: AsyncConnection,
    session_id: str,
    reason: str,
    message: str,
    now: datetime,
    preempted_by: str | None = None,
) -> bool:
    """Record why a session must stop; False when it has already ended.  The first reason wins,
    except that a stop for good (a cancel, a deadline) replaces a suspension in progress.
    `preempted_by`: the preemptor, for a preemption's stop."""
    return bool(await request_terminations(conn, [session_id], reason, message, now, preempted_by))


async def request_terminations(
    conn: AsyncConnection,
    session_ids: Sequence[str],
    reason: str,
    message: str,
    now: datetime,
    preempted_by: str | None = None,
) -> list[str]:
    """`request_termination` for many sessions in one statement; returns those not yet ended."""
    suspending = and_(
        sessions.c.termination_reason == str(TerminationReason.SUSPENDED),
        literal(reason) != str(TerminationReason.SUSPENDED),
    )
    stopped: list[str] = []
    said: list[journal.EventRow] = []
    why = {"reason": reason}
    for part in chunks(session_ids):
        result = await conn.execute(
            update(sessions)
            .where(
                sessions.c.id.in_(part),
                sessions.c.status.not_in([str(s) for s in TERMINAL_SESSION]),
            )
            .values(
                termination_reason=case(
                    (suspending, reason), else_=func.coalesce(sessions.c.termination_reason, reason)
                ),
                termination_message=case(
                    (suspending, message), else_=func.coalesce(sessions.c.termination_message, message)
                ),
                termination_requested_at=func.coalesce(sessions.c.termination_requested_at, now),
                # A new request names its preemptor; one in progress keeps its own.
                **(
                    {}
                    if preempted_by is None
                    else {
                        "preempted_by": case(
                            (sessions.c.termination_requested_at.is_(None), literal(preempted_by)),
                            else_=sessions.c.preempted_by,
                        )
                    }
                ),
            )
            .returning(sessions.c.id, sessions.c.project)
        )
        found = [(sid, project) for sid, project in result]
        stopped += [sid for sid, _ in found]
        said += [
            journal.session_event(sid, project, "session.termination_requested", payload=why)
            for sid, project in found
        ]
    await journal.add_events(conn, said, now)
    return stopped


async def clear_termination_request(conn: AsyncConnection, session_ids: list[str]) -> None:
    """A suspension is done: the session waits without a request, so a later cancel is its own."""
    if session_ids:
        await conn.execute(
            update(sessions)
            .where(sessions.c.id.in_(session_ids))
            .values(termination_reason=None, termination_message=None, termination_requested_at=None)
        )


# Running sessions with a time limit in a group (their time is judged in Python).
_TIMED_RUNNING = and_(
    sessions.c.resource_group == bindparam("group"),
    sessions.c.status == str(SessionStatus.RUNNING),
    sessions.c.timeout.is_not(None),
    sessions.c.termination_reason.is_(None),
)


_DEADLINES = select(sessions).where(_TIMED_RUNNING)


_SWEEP_DUE = select(
    exists().where(agent_store.STALE), exists().where(agent_store.FENCE_DUE), exists().where(_TIMED_RUNNING)
)


async def due_deadlines(conn: AsyncConnection, resource_group: str, now: datetime) -> list[SessionRecord]:
    """Running sessions with a timeout, for the deadline check."""
    return await select_with_kernels(conn, _DEADLINES, {"group": resource_group})


async def sweep_due(
    conn: AsyncConnection, resource_group: str, lease: timedelta, fence: timedelta, now: datetime
) -> bool:
    """Whether the sweep may find anything now: an agent for agents.mark_lost or fence_expired, or
    a session for due_deadlines.  One read, where finding nothing in a transaction was five round
    trips on PostgreSQL, several times a second."""
    params = {"group": resource_group, "before": now - lease, "silent_before": now - fence}
    return any((await conn.execute(_SWEEP_DUE, params)).one())


async def lock(conn: AsyncConnection, session_id: str) -> None:
    """Serialise writers of one session's rows (PostgreSQL row lock; SQLite has one writer anyway)."""
    await dialect.of(conn).lock(conn, select(sessions.c.id).where(sessions.c.id == session_id))
