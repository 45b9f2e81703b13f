"""Kernels placed: their allocations and agents, the GPUs they hold by index and rank 0's
rendezvous port."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any

import structlog
from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.devices import assign_devices
from corral.domain.placement import Placement
from corral.domain.rendezvous import pick_port, port_range
from corral.store.db import chunks
from corral.store.tables import LIVE_KERNEL, agents, allocations, kernels

log = structlog.get_logger("corral.store.kernels")


async def write_placements(conn: AsyncConnection, placed: dict[str, Placement], now: datetime) -> None:
    """Allocation rows and agent assignment for sessions that just moved to SCHEDULED."""
    if not placed:
        return
    rows = await _place_kernels(conn, placed, now)
    await _assign_gpus(conn, [r for r in rows if int(Decimal(str(r["slots"].get("gpu", 0)))) > 0])
    await _assign_rendezvous(conn, placed)


async def _place_kernels(
    conn: AsyncConnection, placed: dict[str, Placement], now: datetime
) -> list[dict[str, Any]]:
    """The allocations of the placed sessions' kernels and each kernel's agent (devices cleared):
    the kernels read, the allocations inserted, then a statement per agent (not per kernel) for
    the kernels' agent.  Returns the allocations written."""
    rows = []
    kernels_found = 0
    for part in chunks(list(placed)):
        found = (await conn.execute(_PLACED_KERNELS, {"ids": part})).all()
        rows += [
            {
                "kernel_id": kid,
                "session_id": sid,
                "agent_id": ranked[rank],
                "slots": slots,
                "created_at": now,
            }
            for kid, sid, rank, slots in found
            if rank < len(ranked := placed[sid].agent_ids)
        ]
        kernels_found += len(found)
    all_placed(placed, len(rows), kernels_found)
    await conn.execute(insert(allocations), rows)
    by_agent: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        by_agent[r["agent_id"]].append(r["kernel_id"])
    for agent_id, kernel_ids in sorted(by_agent.items()):
        for part in chunks(kernel_ids):
            await conn.execute(_ASSIGN_AGENT, {"ids": part, "agent": agent_id})
    return rows


def all_placed(placed: dict[str, Placement], allocated: int, kernels_found: int) -> None:
    """A rank without a kernel, or a kernel without a rank, is never placed: the placement's
    transaction fails instead (a half-placed gang would hold its CPUs and never start)."""
    ranks = sum(len(p.agent_ids) for p in placed.values())
    if allocated != ranks or kernels_found != ranks:
        named = ", ".join(sorted(placed)[:5]) + (", ..." if len(placed) > 5 else "")
        raise RuntimeError(
            f"placement of {ranks} kernels found {kernels_found} ({allocated} placed); sessions {named}"
        )


async def _assign_rendezvous(conn: AsyncConnection, placed: dict[str, Placement]) -> None:
    """Rank 0's port, for gangs spread over agents whose rank-0 agent declares rendezvous ports:
    with it the rendezvous is known at placement and every rank starts once prepared.  A port no
    live gang holds on that agent's host (agents sharing an address share its ports; the group's
    lock serialises placements)."""
    spread = {sid: p.agent_ids[0] for sid, p in placed.items() if len(set(p.agent_ids)) > 1}
    if not spread:
        return
    declared = await conn.execute(
        select(agents.c.id, agents.c.info, agents.c.address).where(
            agents.c.id.in_(sorted(set(spread.values())))
        )
    )
    ranges: dict[str, tuple[int, int]] = {}
    host: dict[str, str] = {}
    for agent_id, info, address in declared:
        found = port_range(info)
        if found is not None:
            ranges[agent_id], host[agent_id] = found, address
    if not ranges:
        return
    held: dict[str, set[int]] = {address: set() for address in host.values()}
    rows = await conn.execute(
        select(agents.c.address, kernels.c.master_port)
        .join(kernels, kernels.c.agent_id == agents.c.id)
        .join(allocations, allocations.c.kernel_id == kernels.c.id)
        .where(
            agents.c.address.in_(sorted(held)),
            allocations.c.released_at.is_(None),
            LIVE_KERNEL,  # an ended kernel holds no port; and by the index of kernels on agents
            kernels.c.rank == 0,
            kernels.c.master_port.is_not(None),
        )
    )
    for address, port in rows:
        held[address].add(int(port))
    for sid, agent_id in sorted(spread.items()):
        if agent_id not in ranges:
            continue  # no ports declared: this gang takes the start order's round trip
        taken = held[host[agent_id]]
        port = pick_port(ranges[agent_id], taken, sid)
        if port is None:
            continue  # every port held: the same
        taken.add(port)
        await conn.execute(
            update(kernels).where(kernels.c.session_id == sid, kernels.c.rank == 0).values(master_port=port)
        )


async def _assign_gpus(conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
    """Whole devices by index for the kernels just placed that ask for GPUs: the lowest indexes no
    live kernel of their agent holds (the group's lock serialises placements)."""
    if not rows:
        return
    agent_ids = sorted({r["agent_id"] for r in rows})
    counts = {
        r.id: int(Decimal(str((r.capacity or {}).get("gpu", 0))))
        for r in await conn.execute(select(agents.c.id, agents.c.capacity).where(agents.c.id.in_(agent_ids)))
    }
    taken: dict[str, set[int]] = {a: set() for a in agent_ids}
    held = await conn.execute(
        select(allocations.c.agent_id, kernels.c.devices)
        .join(kernels, kernels.c.id == allocations.c.kernel_id)
        .where(
            allocations.c.agent_id.in_(agent_ids),
            allocations.c.released_at.is_(None),
            kernels.c.devices.is_not(None),
        )
    )
    for agent_id, devices in held:
        taken[agent_id].update(int(d) for d in devices or ())
    for r in rows:
        want = int(Decimal(str(r["slots"]["gpu"])))
        got = assign_devices(counts.get(r["agent_id"], 0), taken[r["agent_id"]], want)
        if got is None:  # capacity accounting said it fits: a bug, said loudly, not a wedge
            log.error("no free GPU index for a placed kernel", kernel=r["kernel_id"], agent=r["agent_id"])
            continue
        taken[r["agent_id"]].update(got)
        await conn.execute(update(kernels).where(kernels.c.id == r["kernel_id"]).values(devices=list(got)))


_PLACED_KERNELS = select(kernels.c.id, kernels.c.session_id, kernels.c.rank, kernels.c.resources).where(
    kernels.c.session_id.in_(bindparam("ids", expanding=True))
)
_ASSIGN_AGENT = (
    update(kernels)
    .where(kernels.c.id.in_(bindparam("ids", expanding=True)))
    .values(agent_id=bindparam("agent"), devices=None)
)
