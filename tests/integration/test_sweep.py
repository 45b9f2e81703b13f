"""The sweep probes before it writes: it finds each thing it acts on (an agent past its lease, a
lost agent past the fence, a running session with a time limit), and with nothing due it writes
nothing (on a real database, both backends)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from corral.manager.sweep import sweep
from corral.settings import SchedulerSettings
from corral.store import agents, sessions
from corral.store.db import transaction
from corral.store.tables import agents as agent_table
from corral.store.tables import kernels as kernel_table
from corral.store.tables import sessions as session_table
from tests.conftest import BACKENDS
from tests.integration.test_bounds import NOW, _insert
from tests.support.db import migrated, register_agent

CFG = SchedulerSettings(agent_lease=15, fence_timeout=30, fence_margin=5)


async def _due(engine: AsyncEngine, at: timedelta) -> bool:
    async with engine.connect() as conn:
        silent = timedelta(seconds=CFG.fence_timeout + CFG.fence_margin)
        return await agents.sweep_due(conn, "default", timedelta(seconds=CFG.agent_lease), silent, NOW + at)


async def _agent(engine: AsyncEngine) -> tuple[str, str]:
    """Agent "a" (heartbeat at NOW) and one session whose kernel runs on it."""
    async with transaction(engine) as conn:
        await agents.ensure_resource_group(conn, "default", NOW)
        await register_agent(conn, "a", {"cpu": 8, "mem": "8G"}, hostname="h", now=NOW)
    [sid] = await _insert(engine, 1, 10, NOW)
    async with transaction(engine) as conn:
        await conn.execute(update(session_table).where(session_table.c.id == sid).values(status="RUNNING"))
        await conn.execute(
            update(kernel_table)
            .where(kernel_table.c.session_id == sid)
            .values(status="RUNNING", agent_id="a")
        )
    return "a", sid


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_sweep_finds_each_thing_it_acts_on_and_writes_nothing_else(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        agent, sid = await _agent(engine)
        assert not await _due(engine, timedelta(seconds=10))  # within the lease: nothing to do
        assert await sweep(engine, "default", CFG, NOW + timedelta(seconds=10)) == 0

        assert await _due(engine, timedelta(seconds=16))  # past the lease
        assert await sweep(engine, "default", CFG, NOW + timedelta(seconds=16)) == 1
        async with engine.connect() as conn:
            status, epoch = (
                await conn.execute(
                    select(agent_table.c.status, agent_table.c.epoch).where(agent_table.c.id == agent)
                )
            ).one()
        assert status == "LOST"
        # Lost, its kernel kept until the fence: nothing due in between.
        assert not await _due(engine, timedelta(seconds=20))
        assert await sweep(engine, "default", CFG, NOW + timedelta(seconds=20)) == 0

        assert await _due(engine, timedelta(seconds=36))  # past fence_timeout + margin
        assert await sweep(engine, "default", CFG, NOW + timedelta(seconds=36)) == 1
        async with engine.connect() as conn:
            fenced = (
                await conn.execute(select(agent_table.c.epoch).where(agent_table.c.id == agent))
            ).scalar()
            [kernel_status] = (
                await conn.execute(select(kernel_table.c.status).where(kernel_table.c.session_id == sid))
            ).scalars()
        assert fenced == epoch + 1 and kernel_status == "ERROR"
        assert not await _due(engine, timedelta(seconds=40))  # it holds no kernel any more


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_sweep_finds_a_running_session_with_a_time_limit(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        _, sid = await _agent(engine)
        assert not await _due(engine, timedelta(seconds=1))
        async with transaction(engine) as conn:
            await conn.execute(
                update(session_table).where(session_table.c.id == sid).values(timeout=5, started_at=NOW)
            )
        assert await _due(engine, timedelta(seconds=1))
        assert await sweep(engine, "default", CFG, NOW + timedelta(seconds=1)) == 0  # not yet past it
        assert await sweep(engine, "default", CFG, NOW + timedelta(seconds=6)) == 1
        async with engine.connect() as conn:
            found = await sessions.get(conn, sid)
        assert found is not None and found.termination_reason == "deadline_exceeded"
        assert not await _due(engine, timedelta(seconds=7))  # its request is made: nothing more to do
