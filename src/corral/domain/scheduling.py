"""The handler contract of the coordinator (seed: sokovan-status-transitions)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from corral.domain.status import KernelStatus, SessionStatus


class SchedulingResult(StrEnum):
    SUCCESS = "SUCCESS"
    NEED_RETRY = "NEED_RETRY"
    EXPIRED = "EXPIRED"
    GIVE_UP = "GIVE_UP"
    SKIPPED = "SKIPPED"


class KernelMatchType(StrEnum):
    ALL = "all"
    ANY = "any"
    NOT_ANY = "not_any"


@dataclass(frozen=True)
class TransitionStatus:
    """Where an outcome moves a session and its kernels."""

    session: SessionStatus | None = None
    """New session status; None keeps it."""
    kernel: KernelStatus | None = None
    """New status for the session's non-terminal kernels; None keeps them."""


@dataclass(frozen=True)
class StatusTransitions:
    """A handler's declared moves, one per outcome; None records history only."""

    success: TransitionStatus | None = None
    """Applied to the sessions the handler reports as successes."""
    need_retry: TransitionStatus | None = None
    """Applied to failures still under the try limit."""
    expired: TransitionStatus | None = None
    """Applied to sessions that stayed in the status longer than its timeout."""
    give_up: TransitionStatus | None = None
    """Applied to failures that reached the try limit."""


@dataclass(frozen=True)
class Failure:
    """A session the handler attempted and could not move on."""

    session_id: str
    """The session."""
    message: str
    """Why, for the history."""


@dataclass(frozen=True)
class Skip:
    """A session the handler could not attempt this cycle."""

    session_id: str
    """The session."""
    reason: str
    """Why, for the (collapsed) history."""


@dataclass
class HandlerResult:
    """What a handler reports; the coordinator judges and applies."""

    successes: list[str] = field(default_factory=list)
    """Sessions that succeeded."""
    failures: list[Failure] = field(default_factory=list)
    """Sessions attempted that failed: their try count rises."""
    skipped: list[Skip] = field(default_factory=list)
    """Sessions not attempted: history only."""
    messages: dict[str, str] = field(default_factory=dict)
    """Optional success message per session, for the history."""

    def success(self, session_id: str, message: str = "") -> None:
        self.successes.append(session_id)
        if message:
            self.messages[session_id] = message


def kernels_match(
    statuses: Iterable[KernelStatus], check: frozenset[KernelStatus], match: KernelMatchType
) -> bool:
    """The promotion condition of a SessionPromotionHandler over one session's kernels."""
    hits = [s in check for s in statuses]
    if match is KernelMatchType.ALL:
        return all(hits)
    if match is KernelMatchType.ANY:
        return any(hits)
    return not any(hits)
