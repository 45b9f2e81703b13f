"""PromoteToPulling: an agent is preparing an image for one of the kernels."""

from __future__ import annotations

from corral.domain.scheduling import KernelMatchType
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.handlers.base import SessionPromotionHandler


class PromoteToPulling(SessionPromotionHandler):
    name = "PromoteToPulling"
    target_session_statuses = frozenset({SessionStatus.PREPARING})
    check_kernel_statuses = frozenset({KernelStatus.PULLING})
    match_type = KernelMatchType.ANY

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        return SessionStatus.PULLING
