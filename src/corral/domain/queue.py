"""Queue order of pending sessions: priority desc, then the chain's first submission, then id."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class QueueEntry:
    """A pending session as the queue sees it."""

    session_id: str
    """The session."""
    priority: int
    """0..100; higher goes first."""
    chain_submitted_at: datetime
    """First submission of the retry chain, so a retry keeps its place."""
    retry_after: datetime | None = None
    """Not eligible before this time."""


def queue_key(entry: QueueEntry) -> tuple[int, datetime, str]:
    return (-entry.priority, entry.chain_submitted_at, entry.session_id)


def queue_order(entries: Iterable[QueueEntry], now: datetime) -> list[QueueEntry]:
    """Eligible entries (retry_after passed) in the order the scheduler should try them."""
    ready = [e for e in entries if e.retry_after is None or e.retry_after <= now]
    return sorted(ready, key=queue_key)
