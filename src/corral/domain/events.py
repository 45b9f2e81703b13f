"""The outbox's vocabulary: every event type Corral writes, and an event's position in commit order.

A position is the pair (writer's transaction id, event id).  An event id is taken when the row is
inserted, not when it commits, so on a backend with concurrent writers an event can commit after
one with a higher id; a reader that kept "id > last seen" would miss it for good.  The store only
hands out events whose writers have all ended (store/dialect: `committed`), in (txid, id) order, so
a position read once is never passed by a later commit.  SQLite has one writer at a time: its
txid is always 0, and a position is the event id alone."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

# The one registry of event types: what validates `/events?type=`, stream filters and webhooks'
# patterns.  A type written anywhere that is not here fails its test (tests/unit/domain).
EVENT_TYPES: dict[str, str] = {
    "session.created": "a session was submitted (to_status PENDING)",
    "session.status_changed": "a session moved from one status to another (from_status, to_status)",
    "session.termination_requested": "a cancel, a preemption or a time limit asked the session to stop",
    "session.retry_scheduled": "a failed attempt will be retried (payload: attempt, child_id)",
    "session.retry_exhausted": "a failed attempt will not be retried (payload: why)",
    "session.retry_succeeded": "a retried session's attempt succeeded (payload: attempt)",
    "webhook.disabled": "a webhook was disabled: its receiver answered 410 Gone, or one event failed "
    "for a day (payload: reason, event_id)",
    "webhook.test": "`corral webhook test`: sent to that webhook alone, whatever its event types",
    "deployment.created": "a deployment was created (payload: name, replicas, revision)",
    "deployment.updated": "a deployment's replicas or revision changed (payload: name, replicas, revision)",
    "deployment.status_changed": "a deployment moved from one status to another (from_status, to_status)",
    "deployment.rollout_stalled": "a revision did not become healthy within its progress deadline: the "
    "rollout stopped, the old routes serve (payload: name, revision)",
    "route.created": "a replica was started for a deployment (payload: deployment, session_id, revision)",
    "route.status_changed": "a route moved from one status to another (from_status, to_status)",
    "route.traffic_changed": "a route was put in or taken out of traffic (payload: in_traffic, reason)",
}

ENTITY_KINDS = ("session", "webhook", "deployment", "route")


def entity_of(event_type: str) -> str:
    """The kind of entity an event type is about: the part before its first dot."""
    return event_type.partition(".")[0]


def matching(pattern: str) -> list[str]:
    """The known types a glob (`session.retry_*`) names, in registry order; [] when none."""
    return [t for t in EVENT_TYPES if fnmatch.fnmatchcase(t, pattern)]


def unknown_patterns(patterns: list[str]) -> list[str]:
    """Those of `patterns` that name no known type."""
    return [p for p in patterns if not matching(p)]


@dataclass(frozen=True, order=True)
class Position:
    """Where a reader of the outbox is: after every event at or before (txid, id)."""

    txid: int = 0
    id: int = 0

    def __str__(self) -> str:
        return str(self.id) if self.txid == 0 else f"{self.txid}-{self.id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """`123` or `812-123`, as `str` writes them; ValueError for anything else."""
        txid, dash, event_id = text.strip().rpartition("-")
        if (
            not event_id.isascii()
            or not event_id.isdigit()
            or (dash and not (txid.isascii() and txid.isdigit()))
        ):
            raise ValueError(f"not an event position: {text[:40]!r} (give one an event or stream carried)")
        position = cls(int(txid) if dash else 0, int(event_id))
        if max(position.txid, position.id) >= 2**63:
            raise ValueError("an event position's numbers are below 2^63")
        return position


START = Position()
