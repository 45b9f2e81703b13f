"""Deployment and route statuses, and their transition tables (DESIGN §7; seed:
sokovan-status-transitions, second half).  Every pair not listed is refused.

The seed's rows, plus what it leaves silent:
- deletion is a request that turns any deployment not yet DESTROYING or DESTROYED into DESTROYING
  (ApplyDeletion); DestroyingDeployment succeeds once all its routes are TERMINATED;
- DrainRoute takes a route out of service (scale-down, a rollout, deletion): out of traffic at
  once, TERMINATING after the drain.  It also takes PROVISIONING routes (they carry no traffic,
  their drain is immediate): a scale-down may remove a replica that never became healthy;
- the seed's DEPLOYING stays unused: during a rollout the deployment is SCALING."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class DeploymentStatus(StrEnum):
    PENDING = "PENDING"
    SCALING = "SCALING"
    READY = "READY"
    DESTROYING = "DESTROYING"
    DESTROYED = "DESTROYED"


class RouteStatus(StrEnum):
    PROVISIONING = "PROVISIONING"
    DEGRADED = "DEGRADED"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    FAILED_TO_START = "FAILED_TO_START"


class Outcome(StrEnum):
    """What a deployment or route handler reports for one target: no expiry, no give-up."""

    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    STALE = "STALE"


D = DeploymentStatus
R = RouteStatus

LIVE_DEPLOYMENT = frozenset({D.PENDING, D.SCALING, D.READY})
"""Deployments that run replicas (a deletion request turns them DESTROYING)."""
LIVE_ROUTE = frozenset({R.PROVISIONING, R.DEGRADED, R.HEALTHY, R.UNHEALTHY})
"""Routes whose replica is meant to serve (or to start serving)."""
ENDED_ROUTE = frozenset({R.TERMINATED})
"""A route that is gone: its replica session has ended."""

# (handler, from, to) for every move; to None is "maintain" and is not a move.
DEPLOYMENT_ROWS: tuple[tuple[str, D, D], ...] = (
    ("CheckPendingDeployment", D.PENDING, D.SCALING),
    ("ScalingDeployment", D.SCALING, D.READY),
    ("CheckReplicaDeployment", D.READY, D.SCALING),
    ("ReconcileDeployment", D.READY, D.SCALING),
    ("DestroyingDeployment", D.DESTROYING, D.DESTROYED),
    *(("ApplyDeletion", d, D.DESTROYING) for d in (D.PENDING, D.SCALING, D.READY)),
)
ROUTE_ROWS: tuple[tuple[str, R, R], ...] = (
    ("ProvisioningRoute", R.PROVISIONING, R.DEGRADED),
    ("ProvisioningRoute", R.PROVISIONING, R.FAILED_TO_START),
    *(
        ("HealthCheckRoute", r, to)
        for r in (R.HEALTHY, R.UNHEALTHY, R.DEGRADED)
        for to in (R.HEALTHY, R.UNHEALTHY, R.DEGRADED)
        if r != to
    ),
    *(("RunningRoute", r, R.TERMINATING) for r in (R.DEGRADED, R.HEALTHY, R.UNHEALTHY, R.FAILED_TO_START)),
    ("RouteEviction", R.UNHEALTHY, R.TERMINATING),
    ("TerminatingRoute", R.TERMINATING, R.TERMINATED),
    *(("DrainRoute", r, R.TERMINATING) for r in (R.PROVISIONING, R.DEGRADED, R.HEALTHY, R.UNHEALTHY)),
)

DEPLOYMENT_TRANSITIONS = frozenset((a, b) for _, a, b in DEPLOYMENT_ROWS)
ROUTE_TRANSITIONS = frozenset((a, b) for _, a, b in ROUTE_ROWS)


def deployment_move_allowed(src: DeploymentStatus, dst: DeploymentStatus) -> bool:
    return (src, dst) in DEPLOYMENT_TRANSITIONS


def route_move_allowed(src: RouteStatus, dst: RouteStatus) -> bool:
    return (src, dst) in ROUTE_TRANSITIONS


def route_sources(dst: RouteStatus) -> frozenset[RouteStatus]:
    """Statuses from which a route may move to `dst`: the guard of the conditional UPDATE."""
    return frozenset(a for a, b in ROUTE_TRANSITIONS if b == dst)


def deployment_sources(dst: DeploymentStatus) -> frozenset[DeploymentStatus]:
    """Statuses from which a deployment may move to `dst`: the guard of the conditional UPDATE."""
    return frozenset(a for a, b in DEPLOYMENT_TRANSITIONS if b == dst)


@dataclass(frozen=True)
class OutcomeTransitions:
    """A deployment or route handler's declared moves, one per outcome; None maintains (the outcome
    is history only)."""

    success: StrEnum | None = None
    failure: StrEnum | None = None
    stale: StrEnum | None = None

    def to(self, outcome: Outcome) -> StrEnum | None:
        if outcome is Outcome.SUCCESS:
            return self.success
        if outcome is Outcome.FAILURE:
            return self.failure
        return self.stale
