"""Deployments and routes as the store returns them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from corral.domain.deployment_status import DeploymentStatus, RouteStatus
from corral.domain.deployments import Budget, HealthCheck, Rollout
from corral.domain.route_health import Health
from corral.domain.spec import SessionSpec


@dataclass(frozen=True)
class RevisionRecord:
    deployment_id: str
    number: int
    key: str
    session: SessionSpec
    health: HealthCheck
    created_at: datetime


@dataclass(frozen=True)
class DeploymentRecord:
    id: str
    name: str
    project: str
    owner: str
    status: DeploymentStatus
    status_changed_at: datetime
    replicas: int
    revision: int
    public: bool
    rollout: Rollout
    rollout_started_at: datetime | None
    rollout_stalled: bool
    ended_in_a_row: int
    next_replica_at: datetime | None
    delete_requested_at: datetime | None
    message: str
    created_at: datetime
    updated_at: datetime

    @property
    def surge_and_unavailable(self) -> tuple[int, int]:
        return self.rollout.limits(self.replicas)


@dataclass(frozen=True)
class RouteRecord:
    id: str
    deployment_id: str
    revision: int
    session_id: str
    status: RouteStatus
    status_changed_at: datetime
    host: str | None
    port: int | None
    in_traffic: bool
    draining_since: datetime | None
    held_until: datetime | None
    """Some manager's proxy still has requests open on this draining route, until then."""
    started_at: datetime | None
    health: Health
    created_at: datetime

    @property
    def address(self) -> str | None:
        return None if self.host is None or self.port is None else f"{self.host}:{self.port}"


def rollout_of(
    max_surge: str, max_unavailable: str, drain_timeout: float, progress_deadline: float
) -> Rollout:
    """A stored rollout (budgets as `Budget.__str__` writes them)."""
    return Rollout(
        Budget.parse(int(max_surge) if max_surge.isdigit() else max_surge),
        Budget.parse(int(max_unavailable) if max_unavailable.isdigit() else max_unavailable),
        drain_timeout,
        progress_deadline,
    )


@dataclass(frozen=True)
class OutcomeRow:
    """One handler outcome for a deployment's history (its own, or one of its routes')."""

    deployment_id: str
    route_id: str | None
    handler: str
    result: str
    """SUCCESS, FAILURE or STALE (domain/deployment_status: Outcome), or a request's word."""
    from_status: str
    to_status: str | None
    """None: it stayed (the outcome is history only)."""
    message: str


@dataclass(frozen=True)
class DeploymentHistoryRecord:
    """An outcome as stored: repeats of one that moved nothing are counted, not written again."""

    route_id: str | None
    handler: str
    result: str
    from_status: str
    to_status: str | None
    message: str
    count: int
    created_at: datetime
    last_at: datetime
