"""/ui/agents: every agent's capacity against what is allocated, its lease age and status, and how
it runs kernels (as which account, which memory and CPU limits), as its agent reported them."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Request
from fastapi.responses import Response

from corral.api.schemas.agents import AgentOut
from corral.api.state import State
from corral.clock import utcnow
from corral.domain.status import AgentStatus
from corral.services import agents
from corral.web.auth import Seen
from corral.web.templating import page

router = APIRouter(include_in_schema=False)


@router.get("/ui/agents")
async def agents_page(request: Request, state: State, viewer: Seen) -> Response:
    found = await agents.list_agents(state.reader, viewer.who)
    # A LOST agent silent for fence_timeout has stopped its own kernels (self-fencing, DESIGN §3).
    now, fence = utcnow(), timedelta(seconds=state.scheduler.fence_timeout)
    fenced = {a.id for a in found if a.status is AgentStatus.LOST and now - a.last_heartbeat >= fence}
    return page(request, "agents.html", viewer, agents=[AgentOut.of(a) for a in found], fenced=fenced)
