"""What placement reads of a resource group, in two statements: its agents, locked (where the
backend has more than one writer: Dialect.for_update), which serialises placement in the group;
then, in one, what they have allocated and the holds pending preemptors keep on them (DESIGN §6).

The second read cannot ride in the first: a READ COMMITTED statement takes its snapshot before it
waits for a lock, so allocations or holds read with the lock could be older than the commit of the
placement that held it, and two managers could place on the same room."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from sqlalchemy import Text, bindparam, cast, func, literal, null, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import AgentCapacity
from corral.domain.resources import ResourceSlots
from corral.domain.status import AgentStatus, SessionStatus
from corral.store import convert, dialect
from corral.store.agents import SCHEDULABLE
from corral.store.tables import agents, allocations, sessions

_AGENTS = (
    # The flag `corral agent list` shows, read from the JSON itself (both backends extract a key).
    select(
        agents.c.id, agents.c.status, cast(agents.c.capacity, Text), agents.c.info[SCHEDULABLE].as_boolean()
    )
    .where(agents.c.resource_group == bindparam("group"))
    .order_by(agents.c.id)
)
_SHAPE = cast(allocations.c.slots, Text)
# Allocations counted per agent and slot shape (each distinct JSON text is parsed once: most
# kernels ask for the same few shapes, so a 5,000-agent group costs milliseconds, not an object per
# row); then the holds. No status in the holds' WHERE: then the partial index of holds (a handful
# of rows) is the one used, not the queue's (every pending session).
_USED_AND_HELD = union_all(
    select(literal("used"), allocations.c.agent_id, _SHAPE, func.count(), null())
    .where(
        allocations.c.released_at.is_(None),
        allocations.c.agent_id.in_(select(agents.c.id).where(agents.c.resource_group == bindparam("group"))),
    )
    .group_by(allocations.c.agent_id, _SHAPE),
    select(
        literal("held"), sessions.c.id, cast(sessions.c.reservation, Text), literal(0), sessions.c.status
    ).where(sessions.c.resource_group == bindparam("group"), sessions.c.reservation.is_not(None)),
)


async def read(
    conn: AsyncConnection, resource_group: str
) -> tuple[list[AgentCapacity], dict[str, dict[str, Any]]]:
    """Every agent of the group with its capacity and live allocations summed, in id order; and
    the holds, session id -> {"agents": [...], "victims": [...]}."""
    rows = await conn.execute(dialect.of(conn).for_update(_AGENTS), {"group": resource_group})
    found = [
        (aid, AgentStatus(status), convert.slots_of(cap), ok is not False) for aid, status, cap, ok in rows
    ]
    used: dict[str, ResourceSlots] = defaultdict(ResourceSlots)
    holds: dict[str, dict[str, Any]] = {}
    pending = str(SessionStatus.PENDING)
    for kind, key, text, n, session_status in await conn.execute(_USED_AND_HELD, {"group": resource_group}):
        if kind == "used":
            used[key] = used[key] + convert.slots_of(text).times(n)
        elif session_status == pending and (held := json.loads(text)):
            holds[key] = dict(held)
    return [
        AgentCapacity(aid, status, cap, used.get(aid, ResourceSlots()), ok) for aid, status, cap, ok in found
    ], holds
