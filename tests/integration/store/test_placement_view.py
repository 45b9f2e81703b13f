"""What placement reads of a group (store/placement_view.py), on a real database, both backends:
each agent of the group with its live allocations summed, released ones and other groups' left
out; the holds of pending preemptors and of no one else."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select, update

from corral.domain.resources import ResourceSlots
from corral.domain.status import AgentStatus
from corral.store import agents, placement_view, preemption
from corral.store.db import transaction
from corral.store.tables import agents as agent_table
from corral.store.tables import allocations
from corral.store.tables import kernels as kernel_table
from corral.store.tables import sessions as session_table
from tests.conftest import BACKENDS
from tests.integration.api.test_bounds import NOW, _insert
from tests.support.db import migrated, register_agent


@pytest.mark.parametrize("backend", BACKENDS)
async def test_placement_reads_its_groups_live_allocations_and_pending_holds(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        async with transaction(engine) as conn:
            await agents.ensure_resource_group(conn, "default", NOW)
            await agents.ensure_resource_group(conn, "other", NOW)
            for aid in ("b", "a", "c", "d"):
                await register_agent(conn, aid, {"cpu": 8, "mem": "8G"}, now=NOW)
            await conn.execute(
                update(agent_table).where(agent_table.c.id == "c").values(resource_group="other")
            )
            await conn.execute(update(agent_table).where(agent_table.c.id == "d").values(status="LOST"))
        sids = await _insert(engine, 5, 10, NOW)
        async with transaction(engine) as conn:
            kernel_of = dict(
                (
                    await conn.execute(
                        select(kernel_table.c.session_id, kernel_table.c.id).where(
                            kernel_table.c.session_id.in_(sids)
                        )
                    )
                ).all()
            )

            def allocation(
                i: int, agent: str, slots: dict[str, Any], released: bool = False
            ) -> dict[str, Any]:
                return {
                    "kernel_id": kernel_of[sids[i]],
                    "session_id": sids[i],
                    "agent_id": agent,
                    "slots": ResourceSlots.parse(slots).to_json(),
                    "created_at": NOW,
                    "released_at": NOW + timedelta(seconds=1) if released else None,
                }

            await conn.execute(
                insert(allocations),
                [
                    allocation(0, "a", {"cpu": 2}),
                    allocation(1, "a", {"cpu": 2}),  # the same shape: counted, not parsed twice
                    allocation(2, "a", {"cpu": 1, "mem": "1G"}),
                    allocation(3, "a", {"cpu": 4}, released=True),
                    allocation(3, "c", {"cpu": 3}),  # another group's agent
                    allocation(4, "d", {"cpu": 1}),  # a lost agent still holds its room
                ],
            )
            await preemption.reserve(conn, sids[0], ["b"], [sids[1]])
            await preemption.reserve(conn, sids[1], ["a"], [])
            await preemption.reserve(conn, sids[4], ["c"], [])
            # A hold left on a session that is no longer waiting is nobody's hold.
            await conn.execute(
                update(session_table).where(session_table.c.id == sids[1]).values(status="RUNNING")
            )
            await conn.execute(
                update(session_table).where(session_table.c.id == sids[4]).values(resource_group="other")
            )
        async with transaction(engine) as conn:
            registered, holds = await placement_view.read(conn, "default")
            other, other_holds = await placement_view.read(conn, "other")
        eight = ResourceSlots.parse({"cpu": 8, "mem": "8G"})
        assert [(r.id, r.status, r.capacity, r.used) for r in registered] == [
            ("a", AgentStatus.ALIVE, eight, ResourceSlots.parse({"cpu": 5, "mem": "1G"})),
            ("b", AgentStatus.ALIVE, eight, ResourceSlots()),
            ("d", AgentStatus.LOST, eight, ResourceSlots.parse({"cpu": 1})),
        ]
        assert holds == {sids[0]: {"agents": ["b"], "victims": [sids[1]]}}
        assert [(r.id, r.used) for r in other] == [("c", ResourceSlots.parse({"cpu": 3}))]
        assert other_holds == {sids[4]: {"agents": ["c"], "victims": []}}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_placement_reads_the_schedulable_flag_agent_list_shows(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """The `info` key an agent's health sets (agent/health.py) is what placement reads; absent, as
    from an agent that predates it, it reads as schedulable.  A fenced epoch sets nothing."""
    async with migrated(fresh_database(backend)) as engine:
        async with transaction(engine) as conn:
            await agents.ensure_resource_group(conn, "default", NOW)
            await register_agent(conn, "old", {"cpu": 1}, now=NOW)
            for aid in ("off", "on"):
                epoch = await register_agent(conn, aid, {"cpu": 1}, info=agents.standing(True, None), now=NOW)
                assert await agents.set_standing(conn, aid, epoch, False, "its cgroups are gone")
            assert await agents.set_standing(conn, "on", epoch, True, None)
            assert not await agents.set_standing(conn, "on", epoch + 1, False, "a fenced epoch")
        async with transaction(engine) as conn:
            registered, _ = await placement_view.read(conn, "default")
            [listed] = [a for a in await agents.list_agents(conn) if a.id == "off"]
        assert [(r.id, r.schedulable, r.placeable) for r in registered] == [
            ("off", False, False),
            ("old", True, True),
            ("on", True, True),
        ]
        assert (listed.info["schedulable"], listed.info["unschedulable_reason"]) == (
            False,
            "its cgroups are gone",
        )
