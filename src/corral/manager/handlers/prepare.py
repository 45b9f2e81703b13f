"""PrepareSessions: hands prepare orders to the agents (SCHEDULED -> PREPARING)."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.scheduling import Failure, StatusTransitions, TransitionStatus
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult
from corral.manager.handlers.liveness import lost_agents_of
from corral.store.records import SessionRecord


class PrepareSessions(LifecycleHandler):
    name = "PrepareSessions"
    target_session_statuses = frozenset({SessionStatus.SCHEDULED, SessionStatus.PREPARING})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return StatusTransitions(
            success=TransitionStatus(SessionStatus.PREPARING, KernelStatus.PREPARING),
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
            elif s.status is SessionStatus.SCHEDULED:
                # Orders are the kernels' PREPARING rows: agents pull them, so handing over is
                # this transaction's commit, and a slow agent never blocks the cycle.
                result.success(s.id, "prepare orders handed to agents")
        return result
