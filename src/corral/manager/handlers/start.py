"""StartSessions: hands start orders to the agents (PREPARED -> CREATING)."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.scheduling import Failure, StatusTransitions, TransitionStatus
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult
from corral.manager.handlers.liveness import lost_agents_of
from corral.store.records import SessionRecord


class StartSessions(LifecycleHandler):
    name = "StartSessions"
    target_session_statuses = frozenset({SessionStatus.PREPARED})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return StatusTransitions(
            success=TransitionStatus(SessionStatus.CREATING, KernelStatus.CREATING),
            need_retry=None,
            expired=TransitionStatus(SessionStatus.PENDING, KernelStatus.PENDING),
            give_up=TransitionStatus(SessionStatus.PENDING, KernelStatus.PENDING),
        )

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        result = LifecycleResult()
        lost = await lost_agents_of(ctx.conn, targets)
        for s in targets:
            gone = sorted({k.agent_id for k in s.kernels if k.agent_id in lost})
            if gone:
                result.failures.append(Failure(s.id, "agent not reachable: " + ", ".join(gone)))
            else:
                result.success(s.id, "start orders handed to agents")
        return result
