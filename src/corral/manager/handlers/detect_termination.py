"""DetectTermination: a kernel failed, or every kernel ended, so the session stops."""

from __future__ import annotations

from corral.domain.records import SessionRecord
from corral.domain.scheduling import KernelMatchType
from corral.domain.status import TERMINAL_KERNEL, SessionStatus
from corral.manager.handlers.base import SessionPromotionHandler


class DetectTermination(SessionPromotionHandler):
    name = "DetectTermination"
    # Startup statuses too: a kernel that fails to prepare or start fails the whole gang.
    target_session_statuses = frozenset(
        {
            SessionStatus.RUNNING,
            SessionStatus.PREPARING,
            SessionStatus.PULLING,
            SessionStatus.PREPARED,
            SessionStatus.CREATING,
        }
    )
    check_kernel_statuses = TERMINAL_KERNEL
    match_type = KernelMatchType.ANY
    # Before RUNNING only a failure stops the session (a one-shot kernel that exited 0 is read,
    # every cycle until it is RUNNING, for nothing: half the sessions of a busy array were).
    failed_kernel_only = target_session_statuses - {SessionStatus.RUNNING}

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        return SessionStatus.TERMINATING

    def matches(self, session: SessionRecord) -> bool:
        # ANY kernel ended in failure, or ALL ended: a kernel that exits 0 early leaves its peers be.
        if any(k.failed for k in session.kernels):
            return True
        return session.status is SessionStatus.RUNNING and all(
            k.status in TERMINAL_KERNEL for k in session.kernels
        )
