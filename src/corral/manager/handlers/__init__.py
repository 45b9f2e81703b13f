"""The session handlers, in the order one scheduling cycle runs them."""

from __future__ import annotations

from corral.manager.handlers.apply_termination import ApplyTerminationRequests
from corral.manager.handlers.base import LifecycleHandler, SessionPromotionHandler
from corral.manager.handlers.cancel_pending import CancelPendingSessions
from corral.manager.handlers.detect_termination import DetectTermination
from corral.manager.handlers.expire_creating import ExpireCreating
from corral.manager.handlers.expire_pulling import ExpirePulling
from corral.manager.handlers.prepare import PrepareSessions
from corral.manager.handlers.promote_ended import PromoteEnded
from corral.manager.handlers.promote_prepared import PromoteToPrepared
from corral.manager.handlers.promote_pulling import PromoteToPulling
from corral.manager.handlers.promote_running import PromoteToRunning
from corral.manager.handlers.promote_running_alone import PromoteRunningAlone
from corral.manager.handlers.promote_started import PromoteStartedAlone
from corral.manager.handlers.promote_terminated import PromoteToTerminated
from corral.manager.handlers.schedule_new import ScheduleNewSessions
from corral.manager.handlers.start import StartSessions
from corral.manager.handlers.suspend import SuspendSessions
from corral.manager.handlers.terminate import TerminateSessions


def cycle_handlers() -> list[LifecycleHandler | SessionPromotionHandler]:
    # Reports first (promotions), then stops, then capacity freed by them is reused in the same cycle
    # (room agents' reports signalled is placed before all of these: Coordinator.run_cycle).
    # Start orders last: a gang with a failed kernel is stopped (DetectTermination) before any of
    # its prepared ranks could be started.
    return [
        CancelPendingSessions(),
        ApplyTerminationRequests(),
        PromoteToPulling(),
        PromoteRunningAlone(),
        PromoteStartedAlone(),
        PromoteToPrepared(),
        PromoteToRunning(),
        ExpirePulling(),
        ExpireCreating(),
        PromoteEnded(),
        DetectTermination(),
        TerminateSessions(),
        PromoteToTerminated(),
        SuspendSessions(),
        ScheduleNewSessions(),
        PrepareSessions(),
        StartSessions(),
    ]
