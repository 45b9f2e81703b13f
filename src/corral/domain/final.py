"""The final status of a session whose kernels have all ended (DESIGN §3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from corral.domain.cause import Cause, KernelOutcome, TerminationReason, classify_failure
from corral.domain.status import KernelStatus, SessionResult, SessionStatus


@dataclass(frozen=True)
class FinalVerdict:
    """How a session ends."""

    status: SessionStatus
    """TERMINATED, ERROR or CANCELLED."""
    result: SessionResult
    """success, failure or undefined."""
    cause: Cause | None
    """Why it failed or was stopped; None on success."""
    root_rank: int | None
    """Rank of the root-cause kernel, if one is to blame."""
    exit_code: int | None
    """The root-cause kernel's exit code (or the main kernel's on success)."""


def final_verdict(kernels: Sequence[KernelOutcome], reason: TerminationReason | None) -> FinalVerdict:
    cause, root = classify_failure(kernels, reason)
    if root is None:
        if reason is None:
            if kernels and all(k.status is KernelStatus.TERMINATED and k.exit_code == 0 for k in kernels):
                main = min(kernels, key=lambda k: k.rank)
                return FinalVerdict(
                    SessionStatus.TERMINATED, SessionResult.SUCCESS, None, None, main.exit_code
                )
            return FinalVerdict(SessionStatus.ERROR, SessionResult.FAILURE, Cause.UNKNOWN, None, None)
        if reason is TerminationReason.USER_CANCELLED:
            if any(k.started for k in kernels):
                return FinalVerdict(SessionStatus.TERMINATED, SessionResult.FAILURE, cause, None, None)
            return FinalVerdict(SessionStatus.CANCELLED, SessionResult.UNDEFINED, cause, None, None)
        return FinalVerdict(SessionStatus.ERROR, SessionResult.FAILURE, cause, None, None)
    return FinalVerdict(SessionStatus.ERROR, SessionResult.FAILURE, cause, root.rank, root.exit_code)
