"""What the API answers about deployments, routes and their history (see models.py, which
re-exports these: `corral.client.models.Deployment`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from corral.client.models import Model


class Route(Model):
    id: str
    session_id: str
    revision: int
    status: str
    status_changed_at: datetime
    address: str | None
    """host:port the replica listens on ($CORRAL_PORT)."""
    in_traffic: bool
    draining: bool
    health: str
    """The last probe's result."""
    health_ok_in_a_row: int
    health_failed_in_a_row: int
    health_reported_at: datetime | None
    created_at: datetime


class Deployment(Model):
    id: str
    name: str
    project: str
    owner: str
    status: str
    status_changed_at: datetime
    replicas: int
    """Desired."""
    ready: int
    """Routes in traffic."""
    revision: int
    public: bool
    session: dict[str, Any]
    health: dict[str, Any]
    max_surge: str
    max_unavailable: str
    drain_timeout: float
    progress_deadline: float
    rollout: str | None
    """None, "in progress" or "stalled"."""
    deleting: bool
    message: str
    routes: list[Route] = Field(default_factory=list)
    created_at: datetime
    updated_at: datetime

    @property
    def reachable(self) -> bool:
        """Whether /serve/{name}/ has a replica to send a request to."""
        return self.ready > 0


class DeploymentHistoryEntry(Model):
    route_id: str | None
    handler: str
    result: str
    from_status: str
    to_status: str | None
    message: str
    count: int
    created_at: datetime
    last_at: datetime
