"""Who runs a resource group's scheduling loop: a renewable lease row, same on both backends."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store.tables import scheduler_leases


async def acquire(
    conn: AsyncConnection, resource_group: str, holder: str, ttl: timedelta, now: datetime
) -> bool:
    """Take or renew the lease; False while another live holder has it."""
    result = await conn.execute(
        update(scheduler_leases)
        .where(
            scheduler_leases.c.resource_group == resource_group,
            or_(scheduler_leases.c.holder == holder, scheduler_leases.c.expires_at < now),
        )
        .values(holder=holder, expires_at=now + ttl)
    )
    if result.rowcount:
        return True
    exists = await conn.execute(
        select(scheduler_leases.c.holder).where(scheduler_leases.c.resource_group == resource_group)
    )
    if exists.first() is not None:
        return False
    try:
        async with conn.begin_nested():
            await conn.execute(
                insert(scheduler_leases).values(
                    resource_group=resource_group, holder=holder, expires_at=now + ttl
                )
            )
    except IntegrityError:
        return False
    return True
