"""PromoteRunningAlone: a session whose kernels all run (or ran) by themselves passes PREPARED and
CREATING to RUNNING in one update, as PromoteStartedAlone then PromoteToRunning would move it in
two, one after the other in the same cycle: one version of the session's row where there were two."""

from __future__ import annotations

from corral.domain.scheduling import KernelMatchType
from corral.domain.status import SessionStatus
from corral.manager.handlers.base import SessionPromotionHandler, Step
from corral.manager.handlers.promote_running import PromoteToRunning
from corral.manager.handlers.promote_started import PromoteStartedAlone


class PromoteRunningAlone(SessionPromotionHandler):
    """The three rules at once, each move recorded under the handler whose rule it is: every kernel
    is past PromoteToRunning's condition (none before RUNNING), so past PromoteStartedAlone's too.
    Whatever PromoteStartedAlone leaves to the handlers one by one (a failed kernel, a kernel on an
    agent not ALIVE) this leaves as well."""

    name = "PromoteRunningAlone"
    target_session_statuses = PromoteStartedAlone.target_session_statuses
    check_kernel_statuses = PromoteToRunning.check_kernel_statuses
    match_type = KernelMatchType.NOT_ANY
    termination_requested = False
    healthy_only = True
    through = (*PromoteStartedAlone.through, PromoteStartedAlone.last_step)
    last_step = Step(PromoteToRunning.name, SessionStatus.RUNNING)

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        return SessionStatus.RUNNING
