"""Deployments, routes and their history as a client sends and reads them (DESIGN §7)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, StringConstraints, field_validator

from corral.api.schemas.common import MAX_TIMEOUT, Duration
from corral.api.schemas.session_in import SessionCreate
from corral.domain.deployment_records import DeploymentHistoryRecord, RouteRecord
from corral.domain.deployments import MAX_REPLICAS, NAME, Budget, DeploymentSpec, HealthCheck, Rollout
from corral.domain.spec import SessionSpec, SessionType
from corral.protocol.types import STRICT
from corral.services.deployments import View
from corral.services.errors import InvalidInput

NOT_FOR_REPLICAS = ("type", "array", "retry_policy", "retry_policies", "creation_id")
"""Session fields a deployment's `session` refuses: replicas are inference sessions it makes and
replaces itself (no retry chain, no array, no idempotency key of the caller's)."""

DeploymentName = Annotated[
    str,
    StringConstraints(pattern=NAME.pattern),
]


class ReplicaIn(SessionCreate):
    """The fields of POST /sessions, but those in NOT_FOR_REPLICAS."""

    @field_validator(*NOT_FOR_REPLICAS, mode="before")
    @classmethod
    def _refused(cls, value: Any) -> Any:
        raise ValueError("not for a deployment's replicas (inference sessions the deployment makes)")

    @field_validator("type")
    @classmethod
    def _batch_only(cls, value: SessionType) -> SessionType:  # the default only: `_refused` refuses a value
        return value

    def to_replica(self) -> SessionSpec:
        return replace(self.to_spec(), type=SessionType.INFERENCE)


class HealthIn(BaseModel):
    model_config = STRICT

    path: Annotated[str, StringConstraints(pattern=r"^/[\x21-\x7e]{0,1023}$")] = Field(
        "/health", description="GET on the replica's $CORRAL_PORT; starts with '/'"
    )
    interval: Duration = Field(10.0, gt=0, le=3600, description="seconds (or '10s') between probes")
    timeout: Duration | None = Field(None, gt=0, le=600, description="default min(5 s, interval)")
    healthy_threshold: int = Field(1, ge=1, le=100)
    unhealthy_threshold: int = Field(3, ge=1, le=100)
    initial_delay: Duration = Field(0.0, ge=0, le=MAX_TIMEOUT)

    def to_domain(self) -> HealthCheck:
        return HealthCheck(
            self.path,
            self.interval,
            self.timeout,
            self.healthy_threshold,
            self.unhealthy_threshold,
            self.initial_delay,
        )


class _RolloutFields(BaseModel):
    model_config = STRICT

    max_surge: int | str | None = Field(None, description="count or percent (default 25%), rounded up")
    max_unavailable: int | str | None = Field(
        None, description="count or percent (default 25%), rounded down"
    )
    drain_timeout: Duration | None = Field(None, ge=0, le=3600, description="default 30 s")
    progress_deadline: Duration | None = Field(None, gt=0, le=MAX_TIMEOUT, description="default 600 s")

    @field_validator("max_surge", "max_unavailable")
    @classmethod
    def _budget_form(cls, value: int | str | None) -> int | str | None:
        if value is not None:
            Budget.parse(value)
        return value

    def rollout(self, base: Rollout = Rollout()) -> Rollout | None:
        given = self.model_fields_set & {"max_surge", "max_unavailable", "drain_timeout", "progress_deadline"}
        if not given:
            return None
        got = Rollout(
            Budget.parse(self.max_surge) if self.max_surge is not None else base.max_surge,
            Budget.parse(self.max_unavailable) if self.max_unavailable is not None else base.max_unavailable,
            self.drain_timeout if self.drain_timeout is not None else base.drain_timeout,
            self.progress_deadline if self.progress_deadline is not None else base.progress_deadline,
        )
        if got.max_surge.count == 0 and got.max_unavailable.count == 0:
            field = "max_surge" if "max_surge" in given else "max_unavailable"
            raise InvalidInput(field, f"{field}: max_surge and max_unavailable cannot both be 0")
        return got


class DeploymentCreate(_RolloutFields):
    name: DeploymentName = Field(description="a DNS label: 1-63 of a-z, 0-9, '-', unique cluster-wide")
    replicas: int = Field(1, ge=0, le=MAX_REPLICAS)
    session: ReplicaIn = Field(
        description="each replica's session: the fields of POST /sessions but " + ", ".join(NOT_FOR_REPLICAS)
    )
    health: HealthIn = Field(default_factory=lambda: HealthIn.model_validate({}))
    public: bool = Field(False, description="/serve/{name}/ answers without a Corral key")

    def to_domain(self) -> DeploymentSpec:
        return DeploymentSpec(
            self.name,
            self.session.to_replica(),
            self.replicas,
            self.health.to_domain(),
            self.rollout() or Rollout(),
            self.public,
        )

    @property
    def asked_priority(self) -> int | None:
        return self.session.priority if "priority" in self.session.model_fields_set else None


class DeploymentPatch(_RolloutFields):
    """Only the fields given change; a new `session` or `health` is a new revision (a rollout)."""

    replicas: int | None = Field(None, ge=0, le=MAX_REPLICAS)
    session: ReplicaIn | None = None
    health: HealthIn | None = None
    public: bool | None = None


class RouteOut(BaseModel):
    id: str
    session_id: str
    revision: int
    status: str
    status_changed_at: datetime
    address: str | None = Field(description="host:port the replica listens on ($CORRAL_PORT)")
    in_traffic: bool
    draining: bool
    health: str = Field(description="the last probe's result")
    health_ok_in_a_row: int
    health_failed_in_a_row: int
    health_reported_at: datetime | None
    created_at: datetime

    @classmethod
    def of(cls, r: RouteRecord) -> RouteOut:
        return cls(
            id=r.id,
            session_id=r.session_id,
            revision=r.revision,
            status=r.status,
            status_changed_at=r.status_changed_at,
            address=r.address,
            in_traffic=r.in_traffic,
            draining=r.draining_since is not None,
            health=r.health.detail,
            health_ok_in_a_row=r.health.ok_in_a_row,
            health_failed_in_a_row=r.health.failed_in_a_row,
            health_reported_at=r.health.reported_at,
            created_at=r.created_at,
        )


class DeploymentOut(BaseModel):
    id: str
    name: str
    project: str
    owner: str
    status: str
    status_changed_at: datetime
    replicas: int = Field(description="desired")
    ready: int = Field(description="routes in traffic")
    revision: int
    public: bool
    session: dict[str, Any] = Field(description="the current revision's replica spec")
    health: dict[str, Any]
    max_surge: str
    max_unavailable: str
    drain_timeout: float
    progress_deadline: float
    rollout: str | None = Field(description="None, 'in progress' or 'stalled'")
    deleting: bool
    message: str
    routes: list[RouteOut]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, v: View) -> DeploymentOut:
        d, cur = v.deployment, v.current
        old = any(r.revision != d.revision and r.status != "TERMINATED" for r in v.routes)
        rollout = None if not old else ("stalled" if d.rollout_stalled else "in progress")
        return cls(
            id=d.id,
            name=d.name,
            project=d.project,
            owner=d.owner,
            status=d.status,
            status_changed_at=d.status_changed_at,
            replicas=d.replicas,
            ready=v.ready_routes,
            revision=d.revision,
            public=d.public,
            session=cur.session.fingerprint(),
            health=cur.health.to_json(),
            max_surge=str(d.rollout.max_surge),
            max_unavailable=str(d.rollout.max_unavailable),
            drain_timeout=d.rollout.drain_timeout,
            progress_deadline=d.rollout.progress_deadline,
            rollout=rollout,
            deleting=d.delete_requested_at is not None,
            message=d.message,
            routes=[RouteOut.of(r) for r in v.routes],
            created_at=d.created_at,
            updated_at=d.updated_at,
        )


class DeploymentHistoryOut(BaseModel):
    route_id: str | None
    handler: str
    result: str
    from_status: str
    to_status: str | None
    message: str
    count: int
    created_at: datetime
    last_at: datetime

    @classmethod
    def of(cls, h: DeploymentHistoryRecord) -> DeploymentHistoryOut:
        return cls(**h.__dict__)
