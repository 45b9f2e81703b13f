"""What pages say in words, from the records the API shows (never recomputed differently)."""

from __future__ import annotations

from corral.api.schemas.session_out import SessionOut
from corral.domain.cause import Cause
from corral.domain.records import SessionRecord


def how_made(attempt: SessionRecord) -> str:
    """Why this attempt exists: the first, a manual retry, a free requeue, or the engine's retry."""
    if attempt.parent_session_id is None:
        return "the first attempt"
    if attempt.manual_retry:
        return "a manual retry"
    if attempt.retry_cause is Cause.PREEMPTED:
        return "a free requeue after preemption (not counted against max_retries)"
    cause = attempt.retry_cause or "a failure"
    return f"a retry after {cause}" + (f", avoiding {attempt.avoid_agent}" if attempt.avoid_agent else "")


def decision(out: SessionOut, attempt: SessionRecord) -> str:
    """This attempt in words: how it was made, where it stands in its chain, and what the retry
    engine decided when it ended (its rule or policy, the delay with jitter), as it recorded it."""
    said = [f"attempt {out.attempt} of {out.max_attempts}", how_made(attempt)]
    if attempt.retry_reason:
        said.append(attempt.retry_reason)
    return "; ".join(said)
