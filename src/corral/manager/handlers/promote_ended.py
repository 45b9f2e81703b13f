"""PromoteEnded: a RUNNING session whose kernels have all ended passes TERMINATING to its end in
one update, as DetectTermination then PromoteToTerminated would move it in turn."""

from __future__ import annotations

from corral.domain.status import SessionStatus
from corral.manager.handlers.base import Step
from corral.manager.handlers.detect_termination import DetectTermination
from corral.manager.handlers.promote_terminated import PromoteToTerminated


class PromoteEnded(PromoteToTerminated):
    """Both rules at once, each move recorded under the handler whose rule it is: every kernel has
    ended (DetectTermination stops it; its kernels need no stopping) and none is left non-terminal
    (PromoteToTerminated's verdict, from the same kernels).  A session with a termination request
    is ApplyTerminationRequests' first, as before."""

    name = "PromoteEnded"
    target_session_statuses = frozenset({SessionStatus.RUNNING})
    termination_requested = False
    through = (Step(DetectTermination.name, SessionStatus.TERMINATING),)
    last_step = Step(PromoteToTerminated.name, SessionStatus.TERMINATED)
