"""What a deployment's routes should become: how many replicas to add, which routes to drain.
A pure function of the routes as they are, run by the deployment handlers each cycle.

Rules (DESIGN §7, Kubernetes' rolling update made stricter where the issue says so):
- routes of the current revision are added until there are `replicas`; surplus ones leave,
  non-HEALTHY first, then the newest;
- during a rollout (routes of an older revision are live) at most `replicas + surge` are live;
  with a surge, an old HEALTHY route drains only once the HEALTHY ones would still be at least
  `replicas` without it (new routes are HEALTHY before old ones drain); with no surge, `unavailable`
  old routes may drain first (there is no other way to make room); old routes not HEALTHY carry no
  traffic and drain at once;
- a rollout past its progress deadline adds nothing more and drains the new routes that are not
  HEALTHY: the old ones go on serving."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from corral.domain.deployment_status import LIVE_ROUTE, RouteStatus

R = RouteStatus

REPLACE_FIRST = 1.0
REPLACE_MOST = 300.0
"""A replica that ended is replaced after 1 s, doubling with each one that ends in a row, up to
5 min: a replica that cannot start is not restarted in a hot loop."""


@dataclass(frozen=True)
class RouteView:
    """What planning needs of a route."""

    id: str
    revision: int
    status: RouteStatus
    created_at: datetime
    draining: bool = False


@dataclass(frozen=True)
class Plan:
    add: int = 0
    """Replicas of the current revision to start."""
    drain: tuple[str, ...] = ()
    """Routes to take out of service (drain, then stop)."""


def _leaving_order(routes: Sequence[RouteView]) -> list[RouteView]:
    """Non-HEALTHY first, then the newest."""
    return sorted(routes, key=lambda r: (r.status is R.HEALTHY, -r.created_at.timestamp(), r.id))


def plan(
    routes: Sequence[RouteView],
    replicas: int,
    revision: int,
    surge: int,
    unavailable: int,
    stalled: bool = False,
) -> Plan:
    live = [r for r in routes if r.status in LIVE_ROUTE and not r.draining]
    new = [r for r in live if r.revision == revision]
    old = [r for r in live if r.revision != revision]
    new_healthy = sum(r.status is R.HEALTHY for r in new)
    if not old or stalled:
        if stalled:
            drain = [r for r in new if r.status is not R.HEALTHY]
            return Plan(0, tuple(r.id for r in drain))
        if len(new) > replicas:
            return Plan(0, tuple(r.id for r in _leaving_order(new)[: len(new) - replicas]))
        return Plan(replicas - len(new))
    drain = [r for r in old if r.status is not R.HEALTHY]
    old_healthy = sorted((r for r in old if r.status is R.HEALTHY), key=lambda r: (r.created_at, r.id))
    floor = replicas if surge > 0 else replicas - unavailable
    drain += old_healthy[: max(0, len(old_healthy) + new_healthy - floor)]
    staying = len(live) - len(drain)
    surplus_new = max(0, len(new) - replicas)
    drain += _leaving_order(new)[:surplus_new]
    add = max(0, min(replicas - len(new), replicas + surge - staying))
    return Plan(add, tuple(r.id for r in drain))


def replace_delay(ended_in_a_row: int) -> float:
    """Seconds before a replica is started in place of ones that ended (0 when none did)."""
    if ended_in_a_row <= 0:
        return 0.0
    return min(REPLACE_MOST, REPLACE_FIRST * 2.0 ** min(ended_in_a_row - 1, 30))
