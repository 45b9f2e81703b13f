"""ApplyTerminationRequests: a cancel, deadline, preemption or agent loss moves a session to TERMINATING."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.records import SessionRecord
from corral.domain.scheduling import StatusTransitions, TransitionStatus
from corral.domain.status import NON_TERMINAL_SESSION, SessionStatus
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult


class ApplyTerminationRequests(LifecycleHandler):
    name = "ApplyTerminationRequests"
    target_session_statuses = NON_TERMINAL_SESSION - {SessionStatus.PENDING, SessionStatus.TERMINATING}
    termination_requested = True

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return StatusTransitions(success=TransitionStatus(SessionStatus.TERMINATING))

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        result = LifecycleResult()
        for s in targets:
            message = s.termination_reason or ""
            if s.termination_message:
                message += f": {s.termination_message}"
            result.success(s.id, message)
        return result
