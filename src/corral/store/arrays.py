"""Job arrays: the latest attempt of each element, read together."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import SessionRecord
from corral.store import convert
from corral.store.tables import sessions


async def latest(conn: AsyncConnection, array_id: str) -> list[SessionRecord]:
    """Each element's latest attempt (the one no retry followed yet), by index; no kernels."""
    rows = await conn.execute(
        select(sessions)
        .where(sessions.c.array_id == array_id, sessions.c.next_attempt_id.is_(None))
        .order_by(sessions.c.array_index, sessions.c.attempt)
    )
    return [convert.session(r) for r in rows]


async def project_of(conn: AsyncConnection, array_id: str) -> str | None:
    """The project its elements belong to (None: no such array)."""
    row = await conn.execute(select(sessions.c.project).where(sessions.c.array_id == array_id).limit(1))
    return row.scalar()


async def counts(conn: AsyncConnection, array_id: str) -> dict[str, int]:
    """Elements per status of their latest attempt."""
    rows = await conn.execute(
        select(sessions.c.status, func.count())
        .where(sessions.c.array_id == array_id, sessions.c.next_attempt_id.is_(None))
        .group_by(sessions.c.status)
    )
    return {status: n for status, n in rows}
