"""Outside inputs the loop records each cycle: lost agents, fenced kernels, deadlines."""

from __future__ import annotations

from datetime import datetime, timedelta

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from corral.domain.cause import TerminationReason
from corral.domain.status import KernelStatus
from corral.manager.settings import SchedulerSettings
from corral.store import agents, kernels, sessions
from corral.store.db import transaction

log = structlog.get_logger("corral.sweep")


async def sweep(engine: AsyncEngine, resource_group: str, cfg: SchedulerSettings, now: datetime) -> int:
    """Returns how many things it recorded (so the loop knows to run the handlers)."""
    changed = 0
    async with transaction(engine) as conn:
        lost = await agents.mark_lost(conn, timedelta(seconds=cfg.agent_lease), now)
        if lost:
            # Nothing is killed yet: a LOST agent that comes back before the fence timeout keeps its
            # kernels.  Only past the fence are they declared gone (the agent has killed them by then).
            log.warning("agents lost", agents=lost)
            changed += len(lost)
        fenced = await agents.fence_expired(conn, timedelta(seconds=cfg.fence_timeout), now)
        if fenced:
            gone = await agents.started_kernels_on(conn, fenced)
            log.warning("kernels of fenced agents declared gone", agents=fenced, kernels=len(gone))
            await kernels.end_kernels(
                conn,
                gone,
                KernelStatus.ERROR,
                now,
                agent_lost=True,
                termination_message="agent lost past the fence timeout",
            )
            changed += len(gone)
        for s in await sessions.due_deadlines(conn, resource_group, now):
            if s.timeout and s.started_at and now - s.started_at > timedelta(seconds=s.timeout):
                await sessions.request_termination(
                    conn, s.id, TerminationReason.DEADLINE_EXCEEDED, f"timeout {s.timeout}s elapsed", now
                )
                changed += 1
    return changed
