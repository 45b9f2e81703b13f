"""Sessions by the start of their id (a short id as `corral run` prints it)."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store.tables import sessions


async def with_prefix(
    conn: AsyncConnection, prefix: str, projects: Collection[str] | None, limit: int
) -> list[tuple[str, str]]:
    """(id, name) of at most `limit` sessions whose id starts with `prefix`, in those projects
    (None: all), by id."""
    query = (
        select(sessions.c.id, sessions.c.name)
        .where(sessions.c.id.startswith(prefix, autoescape=True))
        .order_by(sessions.c.id)
        .limit(limit)
    )
    if projects is not None:
        query = query.where(sessions.c.project.in_(list(projects)))
    return [(str(r.id), str(r.name)) for r in await conn.execute(query)]
