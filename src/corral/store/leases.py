"""Leases: one holder at a time for a named piece of work (a resource group's scheduling loop, a
webhook's deliveries), timed on the database's clock, with an epoch that fences the holder's writes.

The rule: a lease is held until `expires_at` by the database's clock, so managers whose clocks
disagree still agree on who holds it.  Each change of holder raises the epoch.  A holder's write
transaction begins with `hold`, which fails unless the row still names this holder and epoch and
has not expired; on PostgreSQL it also takes the row FOR SHARE, so a takeover (an UPDATE of the
row) waits for that transaction to end: a holder that lost its lease mid-write cannot commit
beside its successor.  SQLite has one writer at a time, so the check alone is enough there."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store import dialect
from corral.store.db import transaction
from corral.store.tables import leases
from corral.store.unit import Engine


class LeaseLost(Exception):
    """The lease is no longer this holder's (expired and taken, or released): stop writing."""


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str
    epoch: int
    expires_at: datetime


async def acquire(conn: AsyncConnection, name: str, holder: str, ttl: timedelta) -> Lease | None:
    """Take the lease, or renew it (same epoch); None while another holder's has not expired."""
    now = await dialect.of(conn).now(conn)
    query = select(leases.c.holder, leases.c.epoch, leases.c.expires_at).where(leases.c.name == name)
    row = (await conn.execute(query.with_for_update())).first()
    if row is None:
        try:
            async with conn.begin_nested():
                await conn.execute(
                    insert(leases).values(name=name, holder=holder, epoch=1, expires_at=now + ttl)
                )
        except IntegrityError:
            return None  # another manager created it first
        return Lease(name, holder, 1, now + ttl)
    if row.holder != holder and row.expires_at > now:
        return None
    epoch = row.epoch if row.holder == holder else row.epoch + 1
    await conn.execute(
        update(leases).where(leases.c.name == name).values(holder=holder, epoch=epoch, expires_at=now + ttl)
    )
    return Lease(name, holder, int(epoch), now + ttl)


async def hold(conn: AsyncConnection, lease: Lease) -> None:
    """Raise LeaseLost unless `lease` is still current by the database's clock (see the module)."""
    query = select(leases.c.epoch).where(
        leases.c.name == lease.name,
        leases.c.holder == lease.holder,
        leases.c.epoch == lease.epoch,
        leases.c.expires_at > dialect.of(conn).clock(),
    )
    if (await conn.execute(query.with_for_update(read=True))).first() is None:
        raise LeaseLost(lease.name)


async def release(conn: AsyncConnection, lease: Lease) -> None:
    """Give the lease up at once (a stopping manager), so a successor need not wait for its expiry."""
    await conn.execute(
        update(leases)
        .where(leases.c.name == lease.name, leases.c.holder == lease.holder, leases.c.epoch == lease.epoch)
        .values(expires_at=await dialect.of(conn).now(conn) - timedelta(seconds=1))
    )


async def current(conn: AsyncConnection, name: str) -> Lease | None:
    row = (await conn.execute(select(leases).where(leases.c.name == name))).first()
    return None if row is None else Lease(row.name, row.holder, int(row.epoch), row.expires_at)


Begin = Callable[[], AbstractAsyncContextManager[AsyncConnection]]


def writes(engine: Engine, holding: Holding | None) -> Begin:
    """The write transactions of `holding`'s holder; plain ones where no lease guards the work (a
    coordinator a test drives alone)."""
    return holding.transaction if holding is not None else lambda: transaction(engine)


class Holding:
    """One holder's claim on one lease: renewed at half its life, and its write transactions fenced.

    `claim()` is called before each round of work; it renews when due and says whether the work
    may run.  `transaction()` is the holder's write transaction, fenced by `hold`."""

    def __init__(self, engine: Engine, name: str, holder: str, ttl: timedelta) -> None:
        self._engine = engine
        self.name = name
        self._holder = holder
        self._ttl = ttl
        self.lease: Lease | None = None
        self._renewed = 0.0  # monotonic: when to renew is this process's business, not validity

    async def claim(self) -> bool:
        if self.lease is None or time.monotonic() - self._renewed >= self._ttl.total_seconds() / 2:
            async with transaction(self._engine) as conn:
                self.lease = await acquire(conn, self.name, self._holder, self._ttl)
            self._renewed = time.monotonic()
        return self.lease is not None

    def lost(self) -> None:
        """The lease was found lost: claim again before any more work."""
        self.lease = None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        async with transaction(self._engine) as conn:
            if self.lease is None:
                raise LeaseLost(self.name)
            try:
                await hold(conn, self.lease)
            except LeaseLost:
                self.lease = None
                raise
            yield conn

    async def release(self) -> None:
        """Idempotent: give the lease up if held."""
        if self.lease is not None:
            lease, self.lease = self.lease, None
            async with transaction(self._engine) as conn:
                await release(conn, lease)
