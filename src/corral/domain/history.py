"""A history row to write: one outcome the coordinator (or a service acting for it) records."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HistoryRow:
    """One outcome for a session's history, before it is stored (HistoryRecord is one read back).

    `result` is a SchedulingResult for the coordinator's outcomes; the retry engine and the
    services record their own words (FAIL, EXHAUSTED, ...), so it is a plain string here."""

    session_id: str
    handler: str
    """The handler (or engine) whose rule decided it."""
    result: str
    from_status: str
    """The session's status when it was decided."""
    to_status: str | None
    """Where the outcome moved the session; None when it stayed."""
    message: str
