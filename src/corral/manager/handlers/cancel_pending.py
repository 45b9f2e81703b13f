"""CancelPendingSessions: a termination request on a queued session cancels it outright."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.cause import Cause
from corral.domain.final import FinalVerdict
from corral.domain.records import SessionRecord
from corral.domain.scheduling import StatusTransitions, TransitionStatus
from corral.domain.status import KernelStatus, SessionResult, SessionStatus
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult


class CancelPendingSessions(LifecycleHandler):
    name = "CancelPendingSessions"
    target_session_statuses = frozenset({SessionStatus.PENDING})
    termination_requested = True

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return StatusTransitions(success=TransitionStatus(SessionStatus.CANCELLED, KernelStatus.CANCELLED))

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        result = LifecycleResult(finals={})
        assert result.finals is not None
        for s in targets:
            cause = Cause(s.termination_reason) if s.termination_reason in set(Cause) else Cause.UNKNOWN
            result.finals[s.id] = FinalVerdict(
                SessionStatus.CANCELLED, SessionResult.UNDEFINED, cause, None, None
            )
            result.success(s.id, f"cancelled while queued ({s.termination_reason})")
        return result
