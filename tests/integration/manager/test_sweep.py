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
from tests.integration.api.test_bounds import NOW, _insert
from tests.support.db import migrated, register_agent

CFG = SchedulerSettings(agent_lease=15, fence_timeout=30, fence_margin=5)


async def _at(engine: AsyncEngine, seconds: float) -> tuple[bool, int]:
    """Whether the probe finds anything due at NOW + seconds, and what a sweep then records."""
    at = NOW + timedelta(seconds=seconds)
    lease, silent = (
        timedelta(seconds=CFG.agent_lease),
        timedelta(seconds=CFG.fence_timeout + CFG.fence_margin),
    )
    async with engine.connect() as conn:
        due = await sessions.sweep_due(conn, "default", lease, silent, at)
    return due, await sweep(engine, "default", CFG, at)


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
        assert await _at(engine, 10) == (False, 0)  # within the lease: nothing to do

        assert await _at(engine, 16) == (True, 1)  # past the lease
        async with engine.connect() as conn:
            status, epoch = (
                await conn.execute(
                    select(agent_table.c.status, agent_table.c.epoch).where(agent_table.c.id == agent)
                )
            ).one()
        assert status == "LOST"
        # Lost, its kernel kept until the fence: nothing due in between.
        assert await _at(engine, 20) == (False, 0)

        assert await _at(engine, 36) == (True, 1)  # past fence_timeout + margin
        async with engine.connect() as conn:
            fenced = (
                await conn.execute(select(agent_table.c.epoch).where(agent_table.c.id == agent))
            ).scalar()
            [kernel_status] = (
                await conn.execute(select(kernel_table.c.status).where(kernel_table.c.session_id == sid))
            ).scalars()
        assert fenced == epoch + 1 and kernel_status == "ERROR"
        assert await _at(engine, 40) == (False, 0)  # it holds no kernel any more


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_sweep_finds_a_running_session_with_a_time_limit(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        _, sid = await _agent(engine)
        assert await _at(engine, 1) == (False, 0)
        async with transaction(engine) as conn:
            await conn.execute(
                update(session_table).where(session_table.c.id == sid).values(timeout=5, started_at=NOW)
            )
        assert await _at(engine, 1) == (True, 0)  # not yet past it
        assert await _at(engine, 6) == (True, 1)
        async with engine.connect() as conn:
            found = await sessions.get(conn, sid)
        assert found is not None and found.termination_reason == "deadline_exceeded"
        assert await _at(engine, 7) == (False, 0)  # its request is made: nothing more to do
