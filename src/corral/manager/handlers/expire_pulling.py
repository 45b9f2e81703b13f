"""ExpirePulling: a session whose image takes too long to prepare goes back to the queue."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.records import SessionRecord
from corral.domain.scheduling import StatusTransitions, TransitionStatus
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult


class ExpirePulling(LifecycleHandler):
    """Reports nothing: the coordinator judges `pulling_timeout`.  A kernel of a gang that started
    at once may already run while another still pulls: the coordinator stops such a session instead
    of re-queueing it (and the database refuses the move)."""

    name = "ExpirePulling"
    hands_orders = True
    target_session_statuses = frozenset({SessionStatus.PULLING})
    expiry_only = True

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        back = TransitionStatus(SessionStatus.PENDING, KernelStatus.PENDING)
        return StatusTransitions(success=None, need_retry=None, expired=back, give_up=back)

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        return LifecycleResult()
