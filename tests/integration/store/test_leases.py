"""Leases (store/leases.py) on both backends: one holder at a time by the database's clock, the
epoch raised at each change of holder, and a holder's writes refused once its lease is gone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest

from corral.store import leases
from corral.store.db import transaction
from corral.store.unit import Engine
from tests.support.db import migrated

BACKENDS = ["sqlite", "postgres"]
TTL = timedelta(seconds=30)


async def _acquire(engine: Engine, holder: str, ttl: timedelta = TTL) -> leases.Lease | None:
    async with transaction(engine) as conn:
        return await leases.acquire(conn, "work", holder, ttl)


async def _expire(engine: Engine) -> None:
    async with transaction(engine) as conn:
        lease = await leases.current(conn, "work")
        assert lease is not None
        await leases.release(conn, lease)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_one_holder_at_a_time_and_each_takeover_raises_the_epoch(
    fresh_database: Callable[[str], str], backend: str
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        first = await _acquire(engine, "a")
        assert first is not None and first.epoch == 1
        assert await _acquire(engine, "b") is None  # a's has not expired
        renewed = await _acquire(engine, "a")
        assert renewed is not None and renewed.epoch == 1 and renewed.expires_at >= first.expires_at
        await _expire(engine)
        taken = await _acquire(engine, "b")
        assert taken is not None and taken.epoch == 2
        assert await _acquire(engine, "a") is None


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_holder_whose_lease_was_taken_cannot_write(
    fresh_database: Callable[[str], str], backend: str
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        old = leases.Holding(engine, "work", "a", TTL)
        assert await old.claim()
        async with old.transaction():
            pass  # its own lease: the write goes ahead
        await _expire(engine)
        assert await _acquire(engine, "b") is not None
        with pytest.raises(leases.LeaseLost):
            async with old.transaction():
                raise AssertionError("a write under a lost lease began")
        assert old.lease is None
        assert not await old.claim()  # b holds it now


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_lease_runs_out_by_the_database_clock(
    fresh_database: Callable[[str], str], backend: str
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        held = await _acquire(engine, "a", timedelta(seconds=0.3))
        assert held is not None
        deadline = asyncio.get_running_loop().time() + 10
        while (taken := await _acquire(engine, "b")) is None:
            assert asyncio.get_running_loop().time() < deadline, "the lease never ran out"
            await asyncio.sleep(0.05)
        assert taken.epoch == held.epoch + 1
        async with transaction(engine) as conn:
            with pytest.raises(leases.LeaseLost):
                await leases.hold(conn, held)


async def test_on_postgresql_a_takeover_waits_for_the_holders_open_write(
    fresh_database: Callable[[str], str],
) -> None:
    """The holder's write began under its lease (hold took the row FOR SHARE); the lease then runs
    out mid-write: the successor's takeover waits until that write ends, never overlapping it."""
    async with migrated(fresh_database("postgres")) as engine:
        held = await _acquire(engine, "a", timedelta(seconds=0.5))
        assert held is not None
        async with engine.connect() as conn:
            await conn.begin()
            await leases.hold(conn, held)
            await asyncio.sleep(0.8)  # the lease has run out while the write is open
            takeover = asyncio.create_task(_acquire(engine, "b"))
            done, _ = await asyncio.wait({takeover}, timeout=1.0)
            assert not done, "the takeover did not wait for the holder's open write"
            await conn.commit()
        taken = await asyncio.wait_for(takeover, 10)
        assert taken is not None and taken.epoch == held.epoch + 1
