"""The manager's wall clock: every time it writes is UTC (the coordinator is given it as its clock)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
