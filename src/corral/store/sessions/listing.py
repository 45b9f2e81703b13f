"""Sessions a page at a time, newest first, by keyset: a page starts below the last row of the one
before (its created_at and id), so page 1,000 costs what page 1 does (indexes ix_sessions_listed
and ix_sessions_project_listed, migration 0015)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import SessionRecord
from corral.store.sessions.read import select_with_kernels
from corral.store.tables import sessions

s = sessions.c


@dataclass(frozen=True)
class Listing:
    """What a list shows: every field optional (None: any)."""

    statuses: tuple[str, ...] = ()
    project: str | None = None
    owner: str | None = None
    array_id: str | None = None
    cause: str | None = None
    text: str | None = None
    """a prefix of the session's name or id"""


async def page(
    conn: AsyncConnection,
    projects: Collection[str] | None,
    where: Listing,
    below: tuple[datetime, str] | None,
    limit: int,
) -> list[SessionRecord]:
    """Up to `limit` sessions visible in `projects` (None: all), newest first, after `below`."""
    query = select(sessions).order_by(s.created_at.desc(), s.id).limit(limit)
    if projects is not None:
        query = query.where(s.project.in_(sorted(projects)))
    if where.statuses:
        query = query.where(s.status.in_(where.statuses))
    if where.project is not None:
        query = query.where(s.project == where.project)
    if where.owner is not None:
        query = query.where(s.owner == where.owner)
    if where.array_id is not None:
        query = query.where(s.array_id == where.array_id)
    if where.cause is not None:
        query = query.where(s.cause == where.cause)
    if where.text:
        like = where.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        query = query.where(or_(s.name.like(like, escape="\\"), s.id.like(like, escape="\\")))
    if below is not None:
        at, last_id = below
        query = query.where(or_(s.created_at < at, and_(s.created_at == at, s.id > last_id)))
    return await select_with_kernels(conn, query)
