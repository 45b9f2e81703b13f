"""PromoteToTerminated: every kernel is gone; the final status is computed from them."""

from __future__ import annotations

from corral.domain.cause import TerminationReason
from corral.domain.final import FinalVerdict, final_verdict
from corral.domain.records import SessionRecord
from corral.domain.scheduling import KernelMatchType
from corral.domain.status import NON_TERMINAL_KERNEL, SessionStatus
from corral.manager.handlers.base import SessionPromotionHandler


class PromoteToTerminated(SessionPromotionHandler):
    name = "PromoteToTerminated"
    target_session_statuses = frozenset({SessionStatus.TERMINATING})
    check_kernel_statuses = NON_TERMINAL_KERNEL
    match_type = KernelMatchType.NOT_ANY

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        return SessionStatus.TERMINATED

    def verdict(self, session: SessionRecord) -> FinalVerdict:
        reason = session.termination_reason
        known = TerminationReason(reason) if reason in set(TerminationReason) else None
        return final_verdict([k.outcome() for k in session.kernels], known, session.spec.error_strategy)
