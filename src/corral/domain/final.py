"""The final status of a session whose kernels have all ended (DESIGN §3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from corral.domain.cause import Cause, KernelOutcome, TerminationReason, classify_failure, own_failure
from corral.domain.error_record import ErrorRecord, error_record
from corral.domain.root_cause import RootCause, aggregate
from corral.domain.spec import ErrorStrategy
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
    root_cause: RootCause | None = None
    """The root-cause worker's error record, when a worker failed on its own."""


_STOPS = frozenset(
    {
        TerminationReason.USER_CANCELLED,
        TerminationReason.DEADLINE_EXCEEDED,
        TerminationReason.PREEMPTED,
        TerminationReason.SUSPENDED,
    }
)


def failure_records(kernels: Sequence[KernelOutcome]) -> list[ErrorRecord]:
    """One record per kernel that failed or that Corral stopped; none for kernels that succeeded."""
    return [error_record(k) for k in kernels if own_failure(k) or k.killed_by_corral]


def final_verdict(
    kernels: Sequence[KernelOutcome],
    reason: TerminationReason | None,
    strategy: ErrorStrategy = ErrorStrategy.EARLIEST_PRIMARY,
) -> FinalVerdict:
    found = aggregate(failure_records(kernels), strategy)
    if (
        found is not None
        and reason in _STOPS
        and (found.record.killed_by_corral or found.record.kind == "lost")
    ):
        # Stopped for a reason (cancel, deadline, preemption), by a kill or by the fence that follows
        # an unconfirmed kill: the reason is the cause, not the stop.
        found = None
    root = next((k for k in kernels if k.rank == found.record.rank), None) if found else None
    cause = classify_failure(root, reason)
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
    return FinalVerdict(SessionStatus.ERROR, SessionResult.FAILURE, cause, root.rank, root.exit_code, found)
