"""Agents: registration (new epoch), heartbeats, liveness, the capacity snapshot."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, bindparam, case, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import AgentRecord
from corral.domain.resources import ResourceSlots
from corral.domain.status import KERNEL_ON_AGENT, KERNEL_PROCESS, AgentStatus, KernelStatus
from corral.store import convert, kernels
from corral.store.tables import LIVE_KERNEL, agents, allocations, resource_groups
from corral.store.tables import kernels as kernel_table

_EPOCH = select(agents.c.epoch).where(agents.c.id == bindparam("agent_id"))

SCHEDULABLE = "schedulable"
"""The key of an agent's `info` that placement reads (placement_view) and `corral agent list`
shows: one flag for both, so what is displayed is what is enforced.  Absent (an agent from before
it existed) reads as schedulable."""
REASON = "unschedulable_reason"


IMAGES = "images"
"""The `info` key of the images an agent offers: name -> {"kind", "ready"}."""


def standing(schedulable: bool, reason: str | None) -> dict[str, Any]:
    """The `info` keys that say whether kernels can start on an agent, and if not why."""
    return {SCHEDULABLE: schedulable, REASON: None if schedulable else reason or "unknown"}


async def register(
    conn: AsyncConnection,
    agent_id: str,
    *,
    hostname: str,
    address: str,
    resource_group: str,
    capacity: ResourceSlots,
    info: dict[str, Any],
    now: datetime,
) -> int:
    """(Re)register: a new epoch fences every earlier incarnation of this agent."""
    row = (await conn.execute(_EPOCH, {"agent_id": agent_id})).first()
    values = {
        "hostname": hostname,
        "address": address,
        "resource_group": resource_group,
        "status": str(AgentStatus.ALIVE),
        "capacity": capacity.to_json(),
        "info": info,
        "last_heartbeat": now,
        "lost_at": None,
    }
    if row is None:
        epoch = 1
        await conn.execute(insert(agents).values(id=agent_id, epoch=epoch, registered_at=now, **values))
    else:
        epoch = row.epoch + 1
        await conn.execute(update(agents).where(agents.c.id == agent_id).values(epoch=epoch, **values))
        # A new incarnation has no supervisors for what the old one started: those processes died
        # with it, so their kernels are gone now.  Kernels still preparing will simply be re-sent.
        await kernels.end_kernels(
            conn,
            await started_kernels_on(conn, [agent_id]),
            KernelStatus.ERROR,
            now,
            agent_lost=True,
            termination_message="agent restarted",
        )
        await kernels.close_output_of(conn, agent_id)
    return epoch


async def live_incarnation(
    conn: AsyncConnection, agent_id: str, instance: str, lease: timedelta, fence: timedelta, now: datetime
) -> datetime | None:
    """The last contact of another process holding this id that may still run, if there is one.

    Only the very process that holds the id may register again while it may be alive (it does so
    after being fenced, having killed its kernels).  Anyone else, a registration naming no instance
    included, waits: out the lease, and while the old process has started kernels, out the fence
    (`fence` = fence timeout + margin), because registering declares those kernels gone."""
    row = (
        await conn.execute(
            select(agents.c.status, agents.c.info, agents.c.last_heartbeat).where(agents.c.id == agent_id)
        )
    ).first()
    if row is None:
        return None
    other = (row.info or {}).get("instance")
    last: datetime = row.last_heartbeat
    if bool(instance) and other == instance:
        return None
    if row.status == str(AgentStatus.ALIVE) and last >= now - lease:
        return last
    if last >= now - fence and await started_kernels_on(conn, [agent_id]):
        return last
    return None


async def resource_group_exists(conn: AsyncConnection, name: str) -> bool:
    row = await conn.execute(select(resource_groups.c.name).where(resource_groups.c.name == name))
    return row.first() is not None


async def resource_group_names(conn: AsyncConnection) -> list[str]:
    return list(
        (await conn.execute(select(resource_groups.c.name).order_by(resource_groups.c.name))).scalars()
    )


async def ensure_resource_group(conn: AsyncConnection, name: str, now: datetime) -> None:
    if not await resource_group_exists(conn, name):
        await conn.execute(insert(resource_groups).values(name=name, config={}, created_at=now))


async def heartbeat(conn: AsyncConnection, agent_id: str, epoch: int, now: datetime) -> bool:
    """Refresh the lease; False when this epoch has been fenced."""
    # Never backwards (two managers, or two requests in flight): the latest contact stands.
    latest = case((agents.c.last_heartbeat > now, agents.c.last_heartbeat), else_=now)
    result = await conn.execute(
        update(agents)
        .where(agents.c.id == agent_id, agents.c.epoch == epoch)
        .values(last_heartbeat=latest, status=str(AgentStatus.ALIVE), lost_at=None)
    )
    return bool(result.rowcount)


async def set_standing(
    conn: AsyncConnection,
    agent_id: str,
    epoch: int,
    schedulable: bool,
    reason: str | None,
    images: dict[str, Any] | None = None,
) -> bool:
    """Record whether kernels can start on the agent (`standing`), and its images as they are now
    (None: as registered); False when this epoch is fenced. Read, then written under the same
    epoch guard: a registration in between (a new epoch, its own info) wins, and this write updates
    nothing."""
    where = (agents.c.id == agent_id, agents.c.epoch == epoch)
    info = (await conn.execute(select(agents.c.info).where(*where))).scalar()
    if info is None:
        return False
    info = {**info, **standing(schedulable, reason), **({} if images is None else {IMAGES: images})}
    return bool((await conn.execute(update(agents).where(*where).values(info=info))).rowcount)


async def current_epoch(conn: AsyncConnection, agent_id: str) -> int | None:
    return (await conn.execute(_EPOCH, {"agent_id": agent_id})).scalar()


async def address_of(conn: AsyncConnection, agent_id: str) -> str:
    """Where the agent's kernels are reached (what it registered with)."""
    return str((await conn.execute(select(agents.c.address).where(agents.c.id == agent_id))).scalar_one())


# What mark_lost and fence_expired act on, and what sessions.sweep_due probes for.
STALE = and_(agents.c.status == str(AgentStatus.ALIVE), agents.c.last_heartbeat < bindparam("before"))
FENCE_DUE = and_(
    agents.c.status == str(AgentStatus.LOST),
    agents.c.last_heartbeat < bindparam("silent_before"),
    select(kernel_table.c.id)
    .where(
        kernel_table.c.agent_id == agents.c.id,
        LIVE_KERNEL,  # by the index of kernels on agents, not the whole table (it runs every sweep)
        kernel_table.c.status.in_([str(s) for s in KERNEL_ON_AGENT]),
    )
    .exists(),
)
_MARK_LOST = (
    update(agents)
    .where(STALE)
    .values(status=str(AgentStatus.LOST), lost_at=bindparam("now"))
    .returning(agents.c.id)
)
_FENCE = update(agents).where(FENCE_DUE).values(epoch=agents.c.epoch + 1).returning(agents.c.id)


async def mark_lost(conn: AsyncConnection, lease: timedelta, now: datetime) -> list[str]:
    """Agents whose heartbeat is older than the lease become LOST; returns their ids."""
    result = await conn.execute(_MARK_LOST, {"before": now - lease, "now": now})
    return list(result.scalars())


async def fence_expired(conn: AsyncConnection, fence: timedelta, now: datetime) -> list[str]:
    """LOST agents silent past the fence timeout that still hold kernels (`kernels_held_by`).

    Their epoch is bumped, so a late report from them is refused; the caller declares the kernels
    gone.  By now the agent has killed them itself (self-fencing), or died with them.
    """
    result = await conn.execute(_FENCE, {"silent_before": now - fence})
    return list(result.scalars())


async def heartbeats(conn: AsyncConnection, agent_ids: list[str]) -> dict[str, datetime]:
    rows = await conn.execute(select(agents.c.id, agents.c.last_heartbeat).where(agents.c.id.in_(agent_ids)))
    return {r.id: r.last_heartbeat for r in rows}


async def started_kernels_on(conn: AsyncConnection, agent_ids: list[str]) -> list[str]:
    return await _kernels_on(conn, agent_ids, KERNEL_PROCESS)


async def kernels_held_by(conn: AsyncConnection, agent_ids: list[str]) -> list[str]:
    """Kernels these agents may run: started ones, and those handed over and not yet reported (a
    "prepare and start" order may have started them just before the agent went silent)."""
    return await _kernels_on(conn, agent_ids, KERNEL_ON_AGENT)


async def _kernels_on(
    conn: AsyncConnection, agent_ids: list[str], statuses: frozenset[KernelStatus]
) -> list[str]:
    rows = await conn.execute(
        select(kernel_table.c.id).where(
            kernel_table.c.agent_id.in_(agent_ids),
            LIVE_KERNEL,
            kernel_table.c.status.in_([str(s) for s in statuses]),
        )
    )
    return list(rows.scalars())


async def refresh_all_leases(conn: AsyncConnection, now: datetime) -> None:
    """A starting manager gives every agent a fresh lease: its own downtime is not their fault."""
    await conn.execute(
        update(agents).where(agents.c.status == str(AgentStatus.ALIVE)).values(last_heartbeat=now)
    )


async def list_agents(conn: AsyncConnection, resource_group: str | None = None) -> list[AgentRecord]:
    query = select(agents).order_by(agents.c.id)
    if resource_group is not None:
        query = query.where(agents.c.resource_group == resource_group)
    rows = (await conn.execute(query)).all()
    used = await _used(conn, [r.id for r in rows])
    return [convert.agent(r, used.get(r.id)) for r in rows]


async def alive_ids(conn: AsyncConnection) -> set[str]:
    rows = await conn.execute(select(agents.c.id).where(agents.c.status == str(AgentStatus.ALIVE)))
    return set(rows.scalars())


async def _used(conn: AsyncConnection, agent_ids: list[str]) -> dict[str, ResourceSlots]:
    if not agent_ids:
        return {}
    rows = await conn.execute(
        select(allocations.c.agent_id, allocations.c.slots).where(
            allocations.c.agent_id.in_(agent_ids), allocations.c.released_at.is_(None)
        )
    )
    used: dict[str, ResourceSlots] = defaultdict(ResourceSlots)
    for agent_id, slots in rows:
        used[agent_id] = used[agent_id] + ResourceSlots.from_json(slots)
    return used


async def declared_slots(conn: AsyncConnection) -> set[str]:
    """Every slot name some agent declares (custom slots must be declared to be requested)."""
    rows = await conn.execute(select(agents.c.capacity))
    names: set[str] = set()
    for (cap,) in rows:
        names.update(cap)
    return names


async def image_offered(conn: AsyncConnection, name: str) -> bool:
    """Some registered agent (alive or not) offers the image."""
    # As text: the JSON element itself is `null` text on SQLite where the key is missing.
    found = select(agents.c.id).where(agents.c.info[(IMAGES, name)].as_string().is_not(None)).limit(1)
    return (await conn.execute(found)).first() is not None


async def offering(conn: AsyncConnection, resource_group: str) -> dict[str, frozenset[str]]:
    """Agent id -> the names of the images it offers, for a group's agents (read by placement only
    when a session in line names an image)."""
    rows = await conn.execute(
        select(agents.c.id, agents.c.info[IMAGES]).where(agents.c.resource_group == resource_group)
    )
    return {aid: frozenset(images) if isinstance(images, dict) else frozenset() for aid, images in rows}


async def capacities(conn: AsyncConnection, resource_group: str) -> list[ResourceSlots]:
    """The declared capacity of every agent registered in a group (alive or not)."""
    rows = await conn.execute(select(agents.c.capacity).where(agents.c.resource_group == resource_group))
    return [ResourceSlots.from_json(cap) for (cap,) in rows]


async def fence(conn: AsyncConnection, agent_ids: list[str], now: datetime) -> None:
    """Fence live agents now (new epoch, LOST): each must kill what it runs before it may register
    again, and a silent one has its kernels declared gone by the fence rule."""
    if agent_ids:
        await conn.execute(
            update(agents)
            .where(agents.c.id.in_(agent_ids), agents.c.status == str(AgentStatus.ALIVE))
            .values(epoch=agents.c.epoch + 1, status=str(AgentStatus.LOST), lost_at=now)
        )


async def leave(conn: AsyncConnection, agent_id: str, now: datetime) -> None:
    """A clean stop: LOST at once (no placement), so a successor need not wait out the lease.

    Its kernels are not declared gone here: the agent reported them, or the fence rule does it."""
    await conn.execute(
        update(agents)
        .where(agents.c.id == agent_id, agents.c.status == str(AgentStatus.ALIVE))
        .values(status=str(AgentStatus.LOST), lost_at=now)
    )
    await kernels.close_output_of(conn, agent_id)
