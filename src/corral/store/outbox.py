"""Reading the outbox in commit order (domain/events: Position), and durable consumers' cursors.

Every read here keeps to events whose writers have ended (`Dialect.committed`), in (txid, id)
order: an event read past is never followed by one committing behind it.  A read must not run in a
transaction that has written (on PostgreSQL its own open transaction would hold every later event
back): `reading` connections, as every caller here uses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, insert, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.events import START, Position
from corral.domain.records import EventRecord
from corral.store import dialect
from corral.store.tables import event_cursors, session_events, sessions

e = session_events


@dataclass(frozen=True)
class Filter:
    """Which events a reader wants; None is "any"."""

    projects: Sequence[str] | None = None
    """The caller's projects (None: an admin, who reads every event)."""
    kinds: Sequence[str] | None = None
    session_id: str | None = None
    array_id: str | None = None
    project: str | None = None


def after(position: Position) -> Any:
    """Events past `position`."""
    return tuple_(e.c.txid, e.c.id) > tuple_(position.txid, position.id)


def committed(conn: AsyncConnection, query: Select[Any]) -> Select[Any]:
    return dialect.of(conn).committed(query, e.c.txid)


async def read(
    conn: AsyncConnection, position: Position, limit: int, where: Filter = Filter(), newest: bool = False
) -> list[EventRecord]:
    """The first `limit` events after `position` that `where` lets through, in commit order (with
    `newest` the last `limit`, newest first)."""
    order = (e.c.txid.desc(), e.c.id.desc()) if newest else (e.c.txid, e.c.id)
    query = committed(conn, select(e).where(after(position)).order_by(*order).limit(limit))
    if where.kinds:
        query = query.where(e.c.kind.in_(list(where.kinds)))
    if where.session_id is not None:
        query = query.where(e.c.session_id == where.session_id)
    if where.project is not None:
        query = query.where(e.c.project == where.project)
    if where.projects is not None:
        query = query.where(e.c.project.in_(list(where.projects)))
    if where.array_id is not None:
        elements = select(sessions.c.id).where(sessions.c.array_id == where.array_id)
        query = query.where(e.c.session_id.in_(elements.scalar_subquery()))
    return [EventRecord(**dict(r._mapping)) for r in await conn.execute(query)]


async def events(conn: AsyncConnection, ids: Sequence[int]) -> dict[int, EventRecord]:
    """These events by id (those that exist)."""
    if not ids:
        return {}
    found = await conn.execute(select(e).where(e.c.id.in_(list(ids))))
    return {int(r.id): EventRecord(**dict(r._mapping)) for r in found}


async def newest(conn: AsyncConnection) -> Position:
    """The position of the last committed event (START when there is none): a reader from here
    gets only what commits later."""
    query = committed(conn, select(e.c.txid, e.c.id).order_by(e.c.txid.desc(), e.c.id.desc()).limit(1))
    row = (await conn.execute(query)).first()
    return START if row is None else Position(int(row.txid), int(row.id))


async def arrays_of(conn: AsyncConnection, found: Sequence[EventRecord]) -> dict[str, str]:
    """The job array of each of these events' sessions that is an array's element."""
    ids = sorted({ev.session_id for ev in found if ev.session_id})
    if not ids:
        return {}
    query = select(sessions.c.id, sessions.c.array_id).where(
        sessions.c.id.in_(ids), sessions.c.array_id.is_not(None)
    )
    return {str(i): str(a) for i, a in await conn.execute(query)}


async def cursor(conn: AsyncConnection, consumer: str) -> Position:
    """A durable consumer's stored position (START before its first advance)."""
    query = select(event_cursors.c.txid, event_cursors.c.position).where(event_cursors.c.consumer == consumer)
    row = (await conn.execute(query)).first()
    return START if row is None else Position(int(row.txid), int(row.position))


async def advance(conn: AsyncConnection, consumer: str, position: Position, now: datetime) -> None:
    """Move the cursor forward (never back: another manager may be ahead)."""
    c = event_cursors
    moved = await conn.execute(
        update(c)
        .where(c.c.consumer == consumer, tuple_(c.c.txid, c.c.position) < tuple_(position.txid, position.id))
        .values(txid=position.txid, position=position.id, updated_at=now)
    )
    if moved.rowcount:
        return
    exists = await conn.execute(select(c.c.position).where(c.c.consumer == consumer))
    if exists.first() is None:
        await conn.execute(
            insert(c).values(consumer=consumer, txid=position.txid, position=position.id, updated_at=now)
        )
