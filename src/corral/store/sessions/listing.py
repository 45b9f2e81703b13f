"""Sessions a page at a time, newest first, by keyset: a page starts below the last row of the one
before (its created_at and id), so page 1,000 costs what page 1 does (indexes ix_sessions_listed
and ix_sessions_project_listed, migration 0015)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import SessionRecord
from corral.store.sessions.read import select_with_kernels
from corral.store.tables import sessions

col = sessions.c


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
    query = select(sessions).order_by(col.created_at.desc(), col.id).limit(limit)
    if projects is not None:
        query = query.where(col.project.in_(sorted(projects)))
    if where.statuses:
        query = query.where(col.status.in_(where.statuses))
    if where.project is not None:
        query = query.where(col.project == where.project)
    if where.owner is not None:
        query = query.where(col.owner == where.owner)
    if where.array_id is not None:
        query = query.where(col.array_id == where.array_id)
    if where.cause is not None:
        query = query.where(col.cause == where.cause)
    if where.text:
        like = where.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        query = query.where(or_(col.name.like(like, escape="\\"), col.id.like(like, escape="\\")))
    if below is not None:
        at, last_id = below
        query = query.where(or_(col.created_at < at, and_(col.created_at == at, col.id > last_id)))
    return await select_with_kernels(conn, query)


async def queue_position(conn: AsyncConnection, s: SessionRecord) -> int:
    """Its place (1: the head) among its group's PENDING sessions, in the scheduler's order:
    priority, then the chain's submission, then id (the ix_sessions_queue index)."""
    p, at = s.spec.priority, s.chain_submitted_at
    ahead = (
        select(col.id)
        .where(
            col.resource_group == s.spec.resource_group,
            col.status == "PENDING",
            or_(
                col.priority > p,
                and_(
                    col.priority == p,
                    or_(col.chain_submitted_at < at, and_(col.chain_submitted_at == at, col.id < s.id)),
                ),
            ),
        )
        .subquery()
    )
    return int((await conn.execute(select(func.count()).select_from(ahead))).scalar_one()) + 1


async def queue_head(conn: AsyncConnection, resource_group: str, limit: int) -> list[str]:
    """The ids of the group's first `limit` PENDING sessions, in the scheduler's order: one scan
    of the queue index, however many of a page's sessions are placed by it."""
    query = (
        select(col.id)
        .where(col.resource_group == resource_group, col.status == "PENDING")
        .order_by(col.priority.desc(), col.chain_submitted_at, col.id)
        .limit(limit)
    )
    return list((await conn.execute(query)).scalars())


async def queue(conn: AsyncConnection, resource_group: str, limit: int) -> list[SessionRecord]:
    """The group's PENDING sessions in the scheduler's order (the head first)."""
    query = (
        select(sessions)
        .where(col.resource_group == resource_group, col.status == "PENDING")
        .order_by(col.priority.desc(), col.chain_submitted_at, col.id)
        .limit(limit)
    )
    return await select_with_kernels(conn, query)


async def victims(conn: AsyncConnection, preemptor_id: str) -> list[SessionRecord]:
    """The sessions this one's preemptions asked to stop (ix_sessions_preempted_by)."""
    query = select(sessions).where(col.preempted_by == preemptor_id).order_by(col.created_at, col.id)
    return await select_with_kernels(conn, query)
