"""StartSessions: hands start orders to the agents (PREPARED -> CREATING)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from corral.domain.records import SessionRecord
from corral.domain.scheduling import StatusTransitions, TransitionStatus
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult
from corral.manager.handlers.liveness import hand_over


class StartSessions(LifecycleHandler):
    name = "StartSessions"
    hands_orders = True
    target_session_statuses = frozenset({SessionStatus.PREPARED})
    # Its history message for a session that needed no start order (prepare and start).
    started_alone: ClassVar[str] = "started by its agents as soon as prepared"

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return StatusTransitions(
            success=TransitionStatus(SessionStatus.CREATING, KernelStatus.CREATING),
            need_retry=None,
            expired=TransitionStatus(SessionStatus.PENDING, KernelStatus.PENDING),
            give_up=TransitionStatus(SessionStatus.PENDING, KernelStatus.PENDING),
        )

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        return await hand_over(
            ctx.conn,
            targets,
            SessionStatus.PREPARED,
            "start orders handed to agents",
            # Prepare and start (domain/rendezvous.py): the audit says no start order was needed.
            started_alone=self.started_alone,
        )
