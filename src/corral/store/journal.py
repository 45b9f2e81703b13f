"""History rows (the coordinator's outcomes) and event rows (the outbox), written in-transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store import bulk, convert
from corral.store.records import HistoryRecord
from corral.store.tables import session_events, session_history

EventRow = tuple[str, str, str | None, str | None, dict[str, Any]]
"""(session_id, kind, from_status, to_status, payload)"""
HistoryRow = tuple[str, str, str, str, str | None, str]
"""(session_id, handler, result, from_status, to_status, message)"""

EVENT_COLUMNS = ("session_id", "kind", "from_status", "to_status", "payload")
HISTORY_COLUMNS = ("session_id", "handler", "result", "from_status", "to_status", "message")


async def add_events(conn: AsyncConnection, rows: Sequence[EventRow], now: datetime) -> None:
    await bulk.insert_together(conn, [events(rows, now)])


def events(rows: Sequence[EventRow], now: datetime) -> bulk.Rows:
    """Event rows, to insert with others (bulk.insert_together)."""
    return bulk.Rows(session_events, EVENT_COLUMNS, rows, {"created_at": now})


async def add_history(conn: AsyncConnection, rows: Sequence[HistoryRow], now: datetime) -> None:
    same = {"count": 1, "created_at": now, "last_at": now}
    await bulk.insert_rows(conn, session_history, HISTORY_COLUMNS, rows, same)


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
    ids = [s for s, _, _ in rows]
    existing = await conn.execute(
        select(session_history.c.id, session_history.c.session_id, session_history.c.message).where(
            session_history.c.session_id.in_(ids),
            session_history.c.handler == handler,
            session_history.c.result == result,
        )
    )
    known = {(r.session_id, r.message): r.id for r in existing}
    bump = [known[(s, m)] for s, _, m in rows if (s, m) in known]
    if bump:
        await conn.execute(
            update(session_history)
            .where(session_history.c.id.in_(bump))
            .values(count=session_history.c.count + 1, last_at=now)
        )
    await add_history(
        conn, [(s, handler, result, st, None, m) for s, st, m in rows if (s, m) not in known], now
    )


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
