"""The session handlers, in the order one scheduling cycle runs them."""

from __future__ import annotations

from corral.manager.handlers.apply_termination import ApplyTerminationRequests
from corral.manager.handlers.base import LifecycleHandler, SessionPromotionHandler
from corral.manager.handlers.cancel_pending import CancelPendingSessions
from corral.manager.handlers.detect_termination import DetectTermination
from corral.manager.handlers.expire_creating import ExpireCreating
from corral.manager.handlers.expire_pulling import ExpirePulling
from corral.manager.handlers.prepare import PrepareSessions
from corral.manager.handlers.promote_prepared import PromoteToPrepared
from corral.manager.handlers.promote_pulling import PromoteToPulling
from corral.manager.handlers.promote_running import PromoteToRunning
from corral.manager.handlers.promote_terminated import PromoteToTerminated
from corral.manager.handlers.schedule_new import ScheduleNewSessions
from corral.manager.handlers.start import StartSessions
from corral.manager.handlers.suspend import SuspendSessions
from corral.manager.handlers.terminate import TerminateSessions


def cycle_handlers() -> list[LifecycleHandler | SessionPromotionHandler]:
    # Placement first, so agents start new kernels while the rest of the cycle records how others
    # progressed: room freed by the kernels' own reports is used at once; room freed by this
    # cycle's stops (TerminateSessions, SuspendSessions) is used by the next, which runs at once.
    return [
        CancelPendingSessions(),
        ApplyTerminationRequests(),
        ScheduleNewSessions(),
        PrepareSessions(),
        PromoteToPulling(),
        PromoteToPrepared(),
        StartSessions(),
        PromoteToRunning(),
        ExpirePulling(),
        ExpireCreating(),
        DetectTermination(),
        TerminateSessions(),
        PromoteToTerminated(),
        SuspendSessions(),
    ]
