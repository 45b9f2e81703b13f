"""Agents as operators see them (admin only: the route checks the role)."""

from __future__ import annotations

from corral.domain.records import AgentRecord, Principal
from corral.services.errors import Forbidden
from corral.store import agents
from corral.store.db import reading
from corral.store.unit import Engine


async def list_agents(engine: Engine, who: Principal) -> list[AgentRecord]:
    if not who.is_admin:
        raise Forbidden("admin only")
    async with reading(engine) as conn:
        return await agents.list_agents(conn)
