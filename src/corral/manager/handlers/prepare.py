"""PrepareSessions: hands prepare orders to the agents (SCHEDULED -> PREPARING)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from corral.domain.records import SessionRecord
from corral.domain.scheduling import StatusTransitions, TransitionStatus
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult
from corral.manager.handlers.liveness import hand_over


class PrepareSessions(LifecycleHandler):
    name = "PrepareSessions"
    hands_orders = True
    awaits_agents = SessionStatus.PREPARING
    target_session_statuses = frozenset({SessionStatus.SCHEDULED, SessionStatus.PREPARING})
    # Sessions already handed over wait for their agents: looked at only when one is lost.
    lost_agent_only = frozenset({SessionStatus.PREPARING})
    # Its history message (ScheduleNewSessions hands over what it places, under this rule).
    handed_over: ClassVar[str] = "prepare orders handed to agents"

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return StatusTransitions(
            success=TransitionStatus(SessionStatus.PREPARING, KernelStatus.PREPARING),
            need_retry=None,
            expired=TransitionStatus(SessionStatus.PENDING, KernelStatus.PENDING),
            give_up=TransitionStatus(SessionStatus.PENDING, KernelStatus.PENDING),
        )

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        return await hand_over(ctx.conn, targets, SessionStatus.SCHEDULED, self.handed_over)
