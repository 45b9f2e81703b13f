"""The deployment and route handler kinds (seed: sokovan-status-transitions, second half).

A handler declares its target statuses and its moves per outcome (`status_transitions()`), acts on
its targets (starting replicas, asking sessions to stop, putting routes in traffic) and reports one
outcome per target it has something to say about; it never changes a status.  The coordinator
(manager/deployment_coordinator.py) alone applies the declared move and writes the history."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from corral.domain.deployment_records import DeploymentRecord, RevisionRecord, RouteRecord
from corral.domain.deployment_status import DeploymentStatus, Outcome, OutcomeTransitions, RouteStatus
from corral.domain.records import SessionRecord
from corral.store.unit import Tx


@dataclass(frozen=True)
class Reported:
    """A handler's outcome for one target, and its words for the history."""

    outcome: Outcome
    message: str
    also: Mapping[str, Any] = field(default_factory=dict)
    """Columns written with the move (a deployment's `message`)."""


@dataclass(frozen=True)
class Context:
    """What a handler may use: the cycle's transaction and clock, and what was read for it."""

    conn: Tx
    now: datetime
    deployments: Mapping[str, DeploymentRecord]
    """The targets' deployments (for route handlers) or the targets themselves, by id."""
    routes: Mapping[str, Sequence[RouteRecord]]
    """Every route of those deployments, by deployment id."""
    revisions: Mapping[tuple[str, int], RevisionRecord]
    sessions: Mapping[str, SessionRecord]
    """The replica sessions of those routes, by session id (without kernels)."""
    in_flight: Mapping[str, int]
    """Requests this manager's proxy has open, by route id."""


class DeploymentHandler(ABC):
    name: ClassVar[str]
    target_statuses: ClassVar[frozenset[DeploymentStatus]]

    @classmethod
    @abstractmethod
    def status_transitions(cls) -> OutcomeTransitions: ...

    @abstractmethod
    async def execute(self, ctx: Context, targets: Sequence[DeploymentRecord]) -> dict[str, Reported]: ...


class RouteHandler(ABC):
    name: ClassVar[str]
    target_statuses: ClassVar[frozenset[RouteStatus]]

    @classmethod
    @abstractmethod
    def status_transitions(cls) -> OutcomeTransitions: ...

    @abstractmethod
    async def execute(self, ctx: Context, targets: Sequence[RouteRecord]) -> dict[str, Reported]: ...
