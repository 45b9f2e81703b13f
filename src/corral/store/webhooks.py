"""Webhooks and their deliveries: the rows, each webhook's cursor over the outbox, and each event's
attempts.  Writes of a webhook's deliverer run in its lease's transactions (store/leases)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import delete, func, insert, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.events import Position
from corral.domain.records import EventRecord
from corral.domain.webhooks import DeliveryRecord, WebhookRecord
from corral.store.webhook_tables import webhook_deliveries, webhooks

w = webhooks
d = webhook_deliveries


def _hook(row: Any) -> WebhookRecord:
    return WebhookRecord(**dict(row._mapping))


async def add(conn: AsyncConnection, values: Mapping[str, Any]) -> None:
    await conn.execute(insert(w).values(**values))


async def get(conn: AsyncConnection, webhook_id: str) -> WebhookRecord | None:
    row = (await conn.execute(select(w).where(w.c.id == webhook_id))).first()
    return None if row is None else _hook(row)


async def listed(conn: AsyncConnection, projects: Sequence[str] | None) -> list[WebhookRecord]:
    """Every webhook (None), or those of these projects."""
    query = select(w).order_by(w.c.created_at, w.c.id)
    if projects is not None:
        query = query.where(w.c.project.in_(list(projects)))
    return [_hook(r) for r in await conn.execute(query)]


async def enabled_ids(conn: AsyncConnection) -> list[str]:
    return [str(i) for i in (await conn.execute(select(w.c.id).where(w.c.enabled))).scalars()]


async def change(conn: AsyncConnection, webhook_id: str, values: Mapping[str, Any]) -> bool:
    result = await conn.execute(update(w).where(w.c.id == webhook_id).values(**values))
    return bool(result.rowcount)


async def remove(conn: AsyncConnection, webhook_id: str) -> bool:
    await conn.execute(delete(d).where(d.c.webhook_id == webhook_id))  # SQLite enforces no cascade
    return bool((await conn.execute(delete(w).where(w.c.id == webhook_id))).rowcount)


async def advance(conn: AsyncConnection, webhook_id: str, position: Position) -> None:
    """Move the cursor past `position` (never back)."""
    await conn.execute(
        update(w)
        .where(w.c.id == webhook_id, tuple_(w.c.cursor_txid, w.c.cursor_id) < (position.txid, position.id))
        .values(cursor_txid=position.txid, cursor_id=position.id)
    )


async def delivery(conn: AsyncConnection, webhook_id: str, event_id: int) -> DeliveryRecord | None:
    query = select(d).where(d.c.webhook_id == webhook_id, d.c.event_id == event_id)
    row = (await conn.execute(query)).first()
    return None if row is None else DeliveryRecord(**dict(row._mapping))


async def deliveries_of(
    conn: AsyncConnection, webhook_id: str, event_ids: Sequence[int]
) -> dict[int, DeliveryRecord]:
    """The delivery rows of these events (those tried before), by event id, in one query."""
    if not event_ids:
        return {}
    query = select(d).where(d.c.webhook_id == webhook_id, d.c.event_id.in_(sorted(set(event_ids))))
    return {r.event_id: DeliveryRecord(**dict(r._mapping)) for r in await conn.execute(query)}


async def record_new(
    conn: AsyncConnection, webhook_id: str, done: Sequence[tuple[EventRecord, Mapping[str, Any]]]
) -> None:
    """Rows for events delivered at their first attempt, in one statement."""
    await conn.execute(
        insert(d),
        [
            {"webhook_id": webhook_id, "event_id": e.id, "event_txid": e.txid, "event_type": e.kind, **values}
            for e, values in done
        ],
    )


async def record(
    conn: AsyncConnection, webhook_id: str, event: EventRecord, values: Mapping[str, Any]
) -> None:
    """An attempt's outcome on the event's delivery row (made at its first attempt)."""
    moved = await conn.execute(
        update(d).where(d.c.webhook_id == webhook_id, d.c.event_id == event.id).values(**values)
    )
    if not moved.rowcount:
        await conn.execute(
            insert(d).values(
                webhook_id=webhook_id,
                event_id=event.id,
                event_txid=event.txid,
                event_type=event.kind,
                **values,
            )
        )


async def change_delivery(conn: AsyncConnection, delivery_id: int, values: Mapping[str, Any]) -> None:
    await conn.execute(update(d).where(d.c.id == delivery_id).values(**values))


async def restart_failures(conn: AsyncConnection, webhook_id: str) -> None:
    """A re-enabled webhook's undelivered events: tried at once, their day of failures afresh."""
    await conn.execute(
        update(d)
        .where(d.c.webhook_id == webhook_id, d.c.status.in_(["pending", "failed"]))
        .values(status="pending", first_attempt_at=None, next_attempt_at=None)
    )


async def deliveries(
    conn: AsyncConnection, webhook_id: str, limit: int, status: str | None = None
) -> list[DeliveryRecord]:
    """The latest deliveries first."""
    query = select(d).where(d.c.webhook_id == webhook_id).order_by(d.c.id.desc()).limit(limit)
    if status is not None:
        query = query.where(d.c.status == status)
    return [DeliveryRecord(**dict(r._mapping)) for r in await conn.execute(query)]


async def pending_counts(conn: AsyncConnection) -> dict[str, int]:
    """Per webhook: deliveries tried and not yet delivered (the rest of a backlog has no row yet)."""
    query = select(d.c.webhook_id, func.count()).where(d.c.status == "pending").group_by(d.c.webhook_id)
    return {str(h): int(n) for h, n in await conn.execute(query)}
