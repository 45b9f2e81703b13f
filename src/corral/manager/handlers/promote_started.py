"""PromoteStartedAlone: a session whose kernels all started by themselves (prepare and start) passes
PREPARED to CREATING in one update, as PromoteToPrepared then StartSessions would move it a cycle
apart; PromoteToRunning, next in the same cycle, takes it on once none is still CREATING."""

from __future__ import annotations

from corral.domain.scheduling import KernelMatchType
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.handlers.base import SessionPromotionHandler, Step
from corral.manager.handlers.promote_prepared import PromoteToPrepared
from corral.manager.handlers.start import StartSessions


class PromoteStartedAlone(SessionPromotionHandler):
    """Both rules at once, each move recorded under the handler whose rule it is: every kernel is
    past PromoteToPrepared's condition, and none waits PREPARED for a start order (StartSessions
    would hand none).  A session with a failed kernel is left to the handlers one by one
    (DetectTermination stops it from where it is), and so is one with a kernel on an agent not
    ALIVE (StartSessions' hand-over fails it, as it would have)."""

    name = "PromoteStartedAlone"
    target_session_statuses = frozenset(
        {SessionStatus.SCHEDULED, SessionStatus.PREPARING, SessionStatus.PULLING, SessionStatus.PREPARED}
    )
    check_kernel_statuses = PromoteToPrepared.check_kernel_statuses | {KernelStatus.PREPARED}
    match_type = KernelMatchType.NOT_ANY
    termination_requested = False
    healthy_only = True
    through = (Step(PromoteToPrepared.name, SessionStatus.PREPARED),)
    last_step = Step(StartSessions.name, SessionStatus.CREATING, StartSessions.started_alone)

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        return SessionStatus.CREATING
