"""PromoteToRunning: every kernel has started (or already ended)."""

from __future__ import annotations

from corral.domain.scheduling import KernelMatchType
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.handlers.base import SessionPromotionHandler


class PromoteToRunning(SessionPromotionHandler):
    name = "PromoteToRunning"
    target_session_statuses = frozenset({SessionStatus.CREATING})
    check_kernel_statuses = frozenset(
        {
            KernelStatus.PENDING,
            KernelStatus.SCHEDULED,
            KernelStatus.PREPARING,
            KernelStatus.PULLING,
            KernelStatus.PREPARED,
            KernelStatus.CREATING,
        }
    )
    match_type = KernelMatchType.NOT_ANY
    termination_requested = False

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        return SessionStatus.RUNNING
