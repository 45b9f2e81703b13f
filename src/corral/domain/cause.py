"""Failure causes (DESIGN §4) and the pure classification of a failed session."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from corral.domain.status import KernelStatus


class Cause(StrEnum):
    AGENT_TRANSIENT = "agent_transient"
    SCHEDULER_TIMEOUT = "scheduler_timeout"
    IMAGE_PULL_FAILURE = "image_pull_failure"
    KERNEL_NONZERO_EXIT = "kernel_nonzero_exit"
    OOM_KILLED = "oom_killed"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    PREEMPTED = "preempted"
    UNKNOWN = "unknown"
    USER_CANCELLED = "user_cancelled"
    VALIDATION_ERROR = "validation_error"
    QUOTA_EXCEEDED = "quota_exceeded"


NEVER_RETRIABLE = frozenset({Cause.USER_CANCELLED, Cause.VALIDATION_ERROR, Cause.QUOTA_EXCEEDED})


class TerminationReason(StrEnum):
    """Why a termination request was written; each maps onto a cause."""

    USER_CANCELLED = "user_cancelled"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    PREEMPTED = "preempted"
    SUSPENDED = "preempted_suspend"
    """Preempted in suspend mode: the session keeps its id and waits SUSPENDED to be resumed."""
    AGENT_LOST = "agent_transient"
    SCHEDULER_TIMEOUT = "scheduler_timeout"


@dataclass(frozen=True)
class KernelOutcome:
    """What is known of one kernel once it has ended."""

    rank: int
    """Cluster rank."""
    status: KernelStatus
    """Its final status."""
    exit_code: int | None = None
    """Normalised exit code, if a process exited."""
    signal: int | None = None
    """Signal that ended it, if any."""
    oom_killed: bool = False
    """Killed for memory (cgroup counter or watchdog)."""
    killed_by_corral: bool = False
    """Corral sent the kill (a side effect, not a root cause)."""
    started: bool = False
    """A process was started for it."""
    exited_at_ns: int | None = None
    """Exit time as the agent saw it."""
    agent_lost: bool = False
    """Declared gone because its agent was lost."""
    image_failed: bool = False
    """Its runtime environment could not be prepared."""
    kernel_id: str = ""
    """Its id."""
    agent_id: str | None = None
    """The agent it was placed on."""
    worker: str = ""
    """Its worker name ($CORRAL_WORKER_NAME)."""
    error_file: Mapping[str, Any] | None = None
    """Its error file, normalised when reported (a {"note"} when unusable), or None."""
    log_tail: str = ""
    """The end of its output, read by the agent when it failed."""
    termination_log: str = ""
    """Its own words on why it ended: its termination log, or why it could not be executed."""


def own_failure(k: KernelOutcome) -> bool:
    """Failed on its own account, not because Corral stopped it."""
    if k.agent_lost or k.image_failed or k.oom_killed:
        return True
    if k.killed_by_corral:
        return False
    return k.status is KernelStatus.ERROR or (k.exit_code is not None and k.exit_code != 0)


def kernel_cause(k: KernelOutcome) -> Cause:
    if k.agent_lost:
        return Cause.AGENT_TRANSIENT
    if k.image_failed:
        return Cause.IMAGE_PULL_FAILURE
    if k.oom_killed:
        return Cause.OOM_KILLED
    if k.exit_code is not None and k.exit_code != 0:
        return Cause.KERNEL_NONZERO_EXIT
    return Cause.UNKNOWN


_REASON_CAUSE = {
    TerminationReason.USER_CANCELLED: Cause.USER_CANCELLED,
    TerminationReason.DEADLINE_EXCEEDED: Cause.DEADLINE_EXCEEDED,
    TerminationReason.PREEMPTED: Cause.PREEMPTED,
    # Only when a suspension could not keep every kernel (one was lost meanwhile).
    TerminationReason.SUSPENDED: Cause.PREEMPTED,
    TerminationReason.AGENT_LOST: Cause.AGENT_TRANSIENT,
    TerminationReason.SCHEDULER_TIMEOUT: Cause.SCHEDULER_TIMEOUT,
}


def classify_failure(root: KernelOutcome | None, reason: TerminationReason | None) -> Cause:
    """One cause for a failed session: its root-cause kernel's, else its termination reason's."""
    if root is not None:
        return kernel_cause(root)
    if reason is not None and reason in _REASON_CAUSE:
        return _REASON_CAUSE[reason]
    return Cause.UNKNOWN
