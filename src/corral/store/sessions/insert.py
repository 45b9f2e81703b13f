"""New sessions: their rows, their kernels' and their first events, in as few statements as the
backend allows."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Table,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import NewSession, SessionRecord
from corral.domain.status import (
    KernelStatus,
    SessionStatus,
)
from corral.store import bulk, convert, journal
from corral.store.tables import (
    kernels,
    sessions,
)


async def insert_session(conn: AsyncConnection, new: NewSession, now: datetime) -> SessionRecord:
    """Insert a PENDING session with its kernels and its first event; returns what was written."""
    return (await insert_sessions(conn, [new], now))[0]


async def insert_sessions(
    conn: AsyncConnection, news: Sequence[NewSession], now: datetime
) -> list[SessionRecord]:
    """Insert PENDING sessions with their kernels and first events in one statement on PostgreSQL,
    three on SQLite (an array of a thousand costs what one session does, plus the rows); returns
    what was written."""
    return records_of(await insert_rows(conn, news, now))


Written = list[tuple[dict[str, Any], list[dict[str, Any]]]]
"""Each new session's row and its kernels' rows, as inserted."""


def records_of(written: Written) -> list[SessionRecord]:
    return [convert.session(row, tuple(convert.kernel(k) for k in ks)) for row, ks in written]


async def insert_many(conn: AsyncConnection, news: Sequence[NewSession], now: datetime) -> None:
    """insert_sessions without the records back (a job array answers with its ids)."""
    await insert_rows(conn, news, now)


async def insert_rows(conn: AsyncConnection, news: Sequence[NewSession], now: datetime) -> Written:
    """insert_sessions, the records left to make (records_of): for a caller that must tell a
    failure of the write from one after it."""
    if not news:
        return []
    rows = [_session_row(new, now) for new in news]
    kernel_rows = [_kernel_rows(new, row["resources"], now) for new, row in zip(news, rows, strict=True)]
    created = [
        journal.session_event(new.id, new.spec.project, "session.created", to_status="PENDING")
        for new in news
    ]
    parts = [_every_column(sessions, rows), _every_column(kernels, [k for ks in kernel_rows for k in ks])]
    await bulk.insert_together(conn, [*parts, journal.events(created, now)])
    return list(zip(rows, kernel_rows, strict=True))


def _every_column(table: Table, rows: Sequence[dict[str, Any]]) -> bulk.Rows:
    names = tuple(c.name for c in table.columns if c.computed is None)  # the database computes the rest
    return bulk.Rows(table, names, [tuple(row[n] for n in names) for row in rows], {})


def _session_row(new: NewSession, now: datetime) -> dict[str, Any]:
    row: dict[str, Any] = {c.name: None for c in sessions.columns}
    row.update(convert.spec_columns(new.spec, new.spec_hash))
    row.update(
        id=new.id,
        name=new.name,
        status=str(SessionStatus.PENDING),
        status_changed_at=now,
        result="undefined",
        owner=new.owner,
        parent_session_id=new.parent_session_id,
        root_session_id=new.root_session_id or new.id,
        retry_count=new.retry_count,
        chain_submitted_at=new.chain_submitted_at or now,
        retry_after=new.retry_after,
        attempt=new.attempt,
        manual_retry=new.manual_retry,
        total_retries=new.total_retries,
        free_requeues=new.free_requeues,
        rule_counts=new.rule_counts or None,
        first_started_at=new.first_started_at,
        retry_cause=new.retry_cause,
        planned_attempts=new.planned_attempts,
        avoid_agent=new.avoid_agent,
        phase_tries=0,
        reschedule_count=0,
        resume_count=0,
        created_at=now,
    )
    return row


def _kernel_rows(new: NewSession, resources: Any, now: datetime) -> list[dict[str, Any]]:
    kernel_rows: list[dict[str, Any]] = []
    for rank in range(new.spec.cluster_size):
        k: dict[str, Any] = {c.name: None for c in kernels.columns if c.computed is None}
        k.update(
            id=str(uuid.uuid4()),
            session_id=new.id,
            rank=rank,
            role="main" if rank == 0 else "sub",
            status=str(KernelStatus.PENDING),
            status_changed_at=now,
            generation=0,
            resources=resources,
            kill_requested=False,
            kill_forced=False,
            logs_done=False,
            log_dropped=0,
            started=False,
            oom_killed=False,
            killed_by_corral=False,
            agent_lost=False,
            image_failed=False,
            conditions=[],
            detail={},
        )
        kernel_rows.append(k)
    return kernel_rows


async def find_creation(conn: AsyncConnection, owner: str, creation_id: str) -> tuple[str, str | None] | None:
    """(session id, spec hash) of the owner's session with this creation_id; never another owner's."""
    row = await conn.execute(
        select(sessions.c.id, sessions.c.spec_hash).where(
            sessions.c.owner == owner, sessions.c.creation_id == creation_id
        )
    )
    found = row.first()
    return (found.id, found.spec_hash) if found else None
