"""History rows (the coordinator's outcomes) and event rows (the outbox), written in-transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.history import HistoryRow as HistoryRow  # the rows add_history takes
from corral.domain.records import HistoryRecord
from corral.store import bulk, convert
from corral.store.db import chunks
from corral.store.tables import session_events, session_history

EVENT_COLUMNS = (
    "entity_kind",
    "entity_id",
    "project",
    "session_id",
    "kind",
    "from_status",
    "to_status",
    "payload",
)
EventRow = tuple[str, str, str | None, str | None, str, str | None, str | None, dict[str, Any]]
"""An event's values in EVENT_COLUMNS' order (session_event, entity_event make them)."""
HISTORY_COLUMNS = ("session_id", "handler", "result", "from_status", "to_status", "message")


def session_event(
    session_id: str,
    project: str,
    kind: str,
    from_status: str | None = None,
    to_status: str | None = None,
    payload: dict[str, Any] | None = None,
) -> EventRow:
    """A session's event, readable by its project's members."""
    return ("session", session_id, project, session_id, kind, from_status, to_status, payload or {})


def entity_event(
    entity_kind: str,
    entity_id: str,
    project: str | None,
    kind: str,
    payload: dict[str, Any],
    from_status: str | None = None,
    to_status: str | None = None,
) -> EventRow:
    """An event about something other than a session (a webhook, a deployment, ...): `project`
    None is for admins only."""
    return (entity_kind, entity_id, project, None, kind, from_status, to_status, payload)


async def add_events(conn: AsyncConnection, rows: Sequence[EventRow], now: datetime) -> None:
    await bulk.insert_together(conn, [events(rows, now)])


def events(rows: Sequence[EventRow], now: datetime) -> bulk.Rows:
    """Event rows, to insert with others (bulk.insert_together)."""
    return bulk.Rows(session_events, EVENT_COLUMNS, rows, {"created_at": now})


async def add_history(conn: AsyncConnection, rows: Sequence[HistoryRow], now: datetime) -> None:
    same = {"count": 1, "created_at": now, "last_at": now}
    await bulk.insert_rows(conn, session_history, HISTORY_COLUMNS, history_values(rows), same)


def history_values(rows: Sequence[HistoryRow]) -> list[tuple[str, str, str, str, str | None, str]]:
    """The rows' values in HISTORY_COLUMNS' order, as bulk inserts take them."""
    return [(h.session_id, h.handler, h.result, h.from_status, h.to_status, h.message) for h in rows]


async def add_skips(
    conn: AsyncConnection, handler: str, rows: Sequence[tuple[str, str, str]], now: datetime
) -> None:
    """SKIPPED collapses: one row per (session, handler, reason), with a count and last time."""
    await add_collapsed(conn, handler, "SKIPPED", rows, now)


async def add_collapsed(
    conn: AsyncConnection, handler: str, result: str, rows: Sequence[tuple[str, str, str]], now: datetime
) -> None:
    """Rows of (session_id, from_status, message) that repeat each cycle: one row per session,
    handler, result and message, with a count and the last time."""
    if not rows:
        return
    h = session_history
    existing = await conn.execute(
        select(h.c.id, h.c.session_id, h.c.message)
        .where(h.c.session_id.in_({s for s, _, _ in rows}), h.c.handler == handler, h.c.result == result)
        .order_by(h.c.id)  # the newest row of a (session, message) is the one counted
    )
    known = {(r.session_id, r.message): r.id for r in existing}
    bump = [known[(s, m)] for s, _, m in rows if (s, m) in known]
    if bump:
        await conn.execute(update(h).where(h.c.id.in_(bump)).values(count=h.c.count + 1, last_at=now))
    new = [HistoryRow(s, handler, result, st, None, m) for s, st, m in rows if (s, m) not in known]
    await add_history(conn, new, now)


async def latest_skip(conn: AsyncConnection, session_id: str) -> str | None:
    """The reason of the session's most recent SKIPPED outcome (why it waits)."""
    row = await conn.execute(
        select(session_history.c.message)
        .where(session_history.c.session_id == session_id, session_history.c.result == "SKIPPED")
        .order_by(session_history.c.last_at.desc(), session_history.c.id.desc())
        .limit(1)
    )
    return row.scalar()


async def history_of(conn: AsyncConnection, session_id: str) -> list[HistoryRecord]:
    rows = await conn.execute(
        select(session_history)
        .where(and_(session_history.c.session_id == session_id))
        .order_by(session_history.c.id)
    )
    return [convert.history(r) for r in rows]


async def histories_of(conn: AsyncConnection, session_ids: Sequence[str]) -> dict[str, list[HistoryRecord]]:
    """The history of each session, oldest first, by session id (one statement for a page)."""
    out: dict[str, list[HistoryRecord]] = {sid: [] for sid in session_ids}
    for part in chunks(session_ids):
        rows = await conn.execute(
            select(session_history)
            .where(session_history.c.session_id.in_(part))
            .order_by(session_history.c.session_id, session_history.c.id)
        )
        for r in rows:
            out[r.session_id].append(convert.history(r))
    return out
