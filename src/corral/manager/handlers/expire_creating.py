"""ExpireCreating: a session whose kernels take too long to start is stopped, not re-queued.

DESIGN §3 sends an expired CREATING session back to PENDING; we stop it through TERMINATING
instead (ERROR scheduler_timeout, which the retry policy may retry), because some of its kernels
may already run: re-queueing would release their capacity before they are confirmed dead, and could
start a second copy beside them.
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.cause import Cause
from corral.domain.records import SessionRecord
from corral.domain.scheduling import StatusTransitions, TransitionStatus
from corral.domain.status import SessionStatus
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult


class ExpireCreating(LifecycleHandler):
    """Reports nothing: the coordinator judges `creating_timeout`."""

    name = "ExpireCreating"
    target_session_statuses = frozenset({SessionStatus.CREATING})
    expiry_only = True
    with_kernels = False
    failure_cause = Cause.SCHEDULER_TIMEOUT

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        stop = TransitionStatus(SessionStatus.TERMINATING)
        return StatusTransitions(success=None, need_retry=None, expired=stop, give_up=stop)

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        return LifecycleResult()
