"""A deployment's request: the replicas' session spec, their health check, how changes roll out
(DESIGN §7).  The revision is a digest of what a replica runs and how it is checked: a change of
either is a new revision (a rollout), a change of `replicas` is not."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from corral.domain.placement import PlacementStrategy
from corral.domain.resources import ResourceSlots
from corral.domain.spec import ErrorStrategy, SessionSpec, SessionType

MAX_REPLICAS = 100
"""The most replicas one deployment may ask for (the API refuses more)."""
NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
"""A DNS label (RFC 1123): the deployment's name, unique cluster-wide, in `/serve/{name}/`."""
MAX_TIMEOUT_CAP = 5.0
"""A probe's default timeout: min(this, interval)."""
STALE_INTERVALS = 3
"""A route whose last health report is older than this many intervals is DEGRADED (STALE)."""


@dataclass(frozen=True)
class HealthCheck:
    """`GET http://127.0.0.1:$CORRAL_PORT{path}`, run by the replica's agent every `interval`."""

    path: str = "/health"
    interval: float = 10.0
    timeout: float | None = None
    """Seconds a probe may take (None: min(5 s, interval))."""
    healthy_threshold: int = 1
    """Successes in a row before a route is HEALTHY (and in traffic)."""
    unhealthy_threshold: int = 3
    """Failures in a row before a route is UNHEALTHY (out of traffic, then evicted)."""
    initial_delay: float = 0.0
    """Seconds after the replica starts before the first probe."""

    @property
    def probe_timeout(self) -> float:
        return self.timeout if self.timeout is not None else min(MAX_TIMEOUT_CAP, self.interval)

    @property
    def stale_after(self) -> float:
        """Seconds without a report after which the route's health is unknown (STALE)."""
        return STALE_INTERVALS * self.interval

    @property
    def start_limit(self) -> float:
        """Seconds from the replica's start within which a first probe must succeed, or the route
        is FAILED_TO_START."""
        return self.initial_delay + self.unhealthy_threshold * self.interval

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "interval": self.interval,
            "timeout": self.probe_timeout,
            "healthy_threshold": self.healthy_threshold,
            "unhealthy_threshold": self.unhealthy_threshold,
            "initial_delay": self.initial_delay,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> HealthCheck:
        return cls(
            path=str(raw["path"]),
            interval=float(raw["interval"]),
            timeout=float(raw["timeout"]),
            healthy_threshold=int(raw["healthy_threshold"]),
            unhealthy_threshold=int(raw["unhealthy_threshold"]),
            initial_delay=float(raw["initial_delay"]),
        )


@dataclass(frozen=True)
class Budget:
    """`max_surge` or `max_unavailable`: a count, or a percent of `replicas` (Kubernetes' rule:
    surge rounds up, unavailable rounds down)."""

    count: int = 0
    percent: bool = False

    def of(self, replicas: int, round_up: bool) -> int:
        if not self.percent:
            return self.count
        exact = self.count * replicas / 100
        return math.ceil(exact) if round_up else math.floor(exact)

    def __str__(self) -> str:
        return f"{self.count}%" if self.percent else str(self.count)

    @classmethod
    def parse(cls, value: object) -> Budget:
        """`2` or `"25%"`; ValueError for anything else."""
        if isinstance(value, bool):
            raise ValueError("give a count (e.g. 1) or a percent (e.g. '25%')")
        if isinstance(value, int):
            if not 0 <= value <= MAX_REPLICAS:
                raise ValueError(f"a count is 0..{MAX_REPLICAS}")
            return cls(value)
        if isinstance(value, str) and re.fullmatch(r"[0-9]{1,3}%", value.strip()):
            percent = int(value.strip()[:-1])
            if percent > 100:
                raise ValueError("a percent is 0..100")
            return cls(percent, True)
        raise ValueError("give a count (e.g. 1) or a percent (e.g. '25%')")


DEFAULT_BUDGET = Budget(25, True)


@dataclass(frozen=True)
class Rollout:
    """How a change of revision is made without downtime."""

    max_surge: Budget = DEFAULT_BUDGET
    max_unavailable: Budget = DEFAULT_BUDGET
    drain_timeout: float = 30.0
    """Seconds a route leaving service keeps its in-flight requests before it is stopped."""
    progress_deadline: float = 600.0
    """Seconds a new revision may take to become healthy before its rollout is stopped."""

    def limits(self, replicas: int) -> tuple[int, int]:
        """(surge, unavailable) for `replicas`; both 0 after rounding gives unavailable 1
        (Kubernetes' rule: a rollout must be able to move)."""
        surge = self.max_surge.of(replicas, round_up=True)
        unavailable = self.max_unavailable.of(replicas, round_up=False)
        return (surge, 1) if surge == 0 and unavailable == 0 else (surge, unavailable)


@dataclass(frozen=True)
class DeploymentSpec:
    """A deployment as asked for: `replicas` copies of `session` behind health-checked routes."""

    name: str
    session: SessionSpec
    """Each replica's session (type inference; priority is the replicas' priority)."""
    replicas: int = 1
    health: HealthCheck = field(default_factory=HealthCheck)
    rollout: Rollout = field(default_factory=Rollout)
    public: bool = False
    """Whether `/serve/{name}/` answers without a Corral key."""

    @property
    def revision_key(self) -> str:
        return revision_key(self.session, self.health)


def replica_json(spec: SessionSpec) -> dict[str, Any]:
    """A replica's session spec as stored with its revision (`replica_spec` reads it back)."""
    return spec.fingerprint()


def replica_spec(raw: Mapping[str, Any]) -> SessionSpec:
    """The session spec a revision stored (`replica_json`), as each new replica is made from."""
    return SessionSpec(
        command=tuple(raw["command"]),
        resources=ResourceSlots.parse(raw["resources"]),
        env=dict(raw["env"]),
        name=raw.get("name"),
        type=SessionType.INFERENCE,
        cluster_size=int(raw["cluster_size"]),
        priority=int(raw["priority"]),
        resource_group=str(raw["resource_group"]),
        project=str(raw["project"]),
        placement=PlacementStrategy(raw["placement"]),
        image=raw.get("image"),
        timeout=raw.get("timeout"),
        error_strategy=ErrorStrategy(raw["error_strategy"]),
        workdir=raw.get("workdir"),
    )


def revision_key(session: SessionSpec, health: HealthCheck) -> str:
    """What tells one revision from another: the replicas' spec and their health check."""
    both = {"session": replica_json(session), "health": health.to_json()}
    return hashlib.sha256(json.dumps(both, sort_keys=True).encode()).hexdigest()
