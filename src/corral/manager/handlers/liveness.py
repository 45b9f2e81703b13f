"""Helpers shared by handlers that hand orders to agents."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.status import AgentStatus
from corral.store import agents
from corral.store.records import SessionRecord


async def lost_agents_of(conn: AsyncConnection, targets: Sequence[SessionRecord]) -> set[str]:
    """Agents of these sessions' kernels that are not ALIVE (or no longer registered)."""
    wanted = {k.agent_id for s in targets for k in s.kernels if k.agent_id}
    if not wanted:
        return set()
    alive = {a.id for a in await agents.list_agents(conn) if a.status is AgentStatus.ALIVE}
    return wanted - alive
