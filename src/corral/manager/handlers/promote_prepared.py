"""PromoteToPrepared: no kernel is still waiting for its environment."""

from __future__ import annotations

from corral.domain.scheduling import KernelMatchType
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.handlers.base import SessionPromotionHandler


class PromoteToPrepared(SessionPromotionHandler):
    name = "PromoteToPrepared"
    target_session_statuses = frozenset(
        {SessionStatus.SCHEDULED, SessionStatus.PREPARING, SessionStatus.PULLING}
    )
    check_kernel_statuses = frozenset(
        {KernelStatus.PENDING, KernelStatus.SCHEDULED, KernelStatus.PREPARING, KernelStatus.PULLING}
    )
    match_type = KernelMatchType.NOT_ANY
    termination_requested = False

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        return SessionStatus.PREPARED
