"""The coordinator's judgements, pure with the clock passed in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from corral.domain.status import SessionStatus


@dataclass(frozen=True)
class PhaseLimits:
    """How long a session may stay in a status, and how often a handler may fail it."""

    timeouts: Mapping[SessionStatus, timedelta | None]
    """Per-status time limit; None (or absent) means no limit."""
    max_tries: int = 3
    """Failures in one status before GIVE_UP."""
    max_reschedules: int = 3
    """Returns to PENDING before the session fails with scheduler_timeout."""
    declare_gone_after: timedelta = timedelta(seconds=35)
    """Silence after which an agent has certainly killed its kernels (fence timeout + margin)."""


def for_group(base: PhaseLimits, queue: Mapping[str, object] | None) -> PhaseLimits:
    """A resource group's queue settings over the manager's: `pending_timeout` (seconds, 0 = a
    queued session waits for ever) and `max_reschedules`; an unset key keeps the manager's."""
    if not queue:
        return base
    limits = base
    pending = queue.get("pending_timeout")
    if isinstance(pending, int | float):
        timeouts = dict(base.timeouts)
        timeouts[SessionStatus.PENDING] = timedelta(seconds=pending) if pending > 0 else None
        limits = replace(limits, timeouts=timeouts)
    reschedules = queue.get("max_reschedules")
    if isinstance(reschedules, int):
        limits = replace(limits, max_reschedules=reschedules)
    return limits


def is_expired(status: SessionStatus, since: datetime, now: datetime, limits: PhaseLimits) -> bool:
    limit = limits.timeouts.get(status)
    return limit is not None and now - since > limit


def gives_up(tries_after_failure: int, limits: PhaseLimits) -> bool:
    return tries_after_failure >= limits.max_tries


def reschedules_exhausted(reschedule_count: int, limits: PhaseLimits) -> bool:
    """True when one more return to PENDING would exceed the limit."""
    return reschedule_count >= limits.max_reschedules
