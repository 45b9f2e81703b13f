"""What the API answers, as typed, frozen objects.

Each mirrors one response schema of the HTTP API (tests/unit/client/test_models.py holds them to
the app's OpenAPI document field by field). Unknown fields are kept, not refused: a newer server
may add a field, and an older client must still read its answers. `dump()` gives back the JSON the
server sent, which is what `corral -o json` prints.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

TERMINAL = frozenset({"TERMINATED", "CANCELLED", "ERROR"})
"""Statuses a session never leaves."""


class Model(BaseModel):
    # Built on first use, not at import: the CLI answers `--help` without paying for all of them.
    model_config = ConfigDict(frozen=True, extra="allow", defer_build=True, populate_by_name=True)

    def dump(self) -> dict[str, Any]:
        """The object as the API's JSON (datetimes as ISO strings)."""
        return self.model_dump(mode="json", by_alias=True)


class Kernel(Model):
    id: str
    rank: int
    role: str
    agent: str | None
    status: str
    exit_code: int | None
    signal: int | None
    oom_killed: bool
    killed_by_corral: bool
    conditions: list[str]
    termination_message: str | None
    exited_at: datetime | None
    detail: dict[str, Any]
    output_complete: bool
    output_dropped: int
    gpu_devices: list[int]
    master_port: int | None


class RootCause(Model):
    """The worker that failed first, as chosen when its session ended."""

    worker: str
    rank: int
    kernel_id: str
    agent: str | None
    type: str
    message: str
    timestamp: datetime | None
    resolution: str
    recoverable: bool | None
    strategy: str
    source: str
    exit_code: int | None
    signal: int | None

    def line(self) -> str:
        """'worker rank-2 on agent local-1: ValueError: bad batch' (its message's first line)."""
        what = f"{self.type}: {self.message}" if self.type else self.message
        first = what.strip().splitlines()[0] if what.strip() else "(no message)"
        return f"worker {self.worker} on agent {self.agent or '-'}: {first[:500]}"


class Waiting(Model):
    """Why a PENDING session waits: `position` in its group's queue, `infeasible` when it can
    never start as asked, what one kernel `needs` beside the `largest_free` slot on one agent."""

    position: int
    reason: str
    infeasible: bool
    needs: dict[str, float | int]
    largest_free: dict[str, float | int] | None


class Session(Model):
    id: str
    name: str
    type: str
    status: str
    result: str
    cause: str | None
    exit_code: int | None
    priority: int
    resource_group: str
    project: str
    owner: str
    cluster_size: int
    resources: dict[str, float | int]
    command: list[str]
    created_at: datetime
    started_at: datetime | None
    terminated_at: datetime | None
    parent_session_id: str | None
    root_session_id: str
    attempt: int
    max_attempts: int
    retry_count: int
    max_retries: int
    retry_policy: dict[str, Any] | None
    retry_policies: list[str]
    retry_cause: str | None
    retry_state: str
    retry_reason: str | None
    next_attempt_id: str | None
    retry_after: datetime | None
    retry_chain: list[str]
    resume_count: int
    array_id: str | None = None
    array_index: int | None = None
    manual_retry: bool
    creation_id: str | None
    termination_reason: str | None
    waiting_reason: str | None = None
    waiting: Waiting | None = None
    preempted_by: str | None = None
    victims: list[str] = []
    error_strategy: str
    root_cause: RootCause | None
    kernels: list[Kernel]

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL

    @property
    def succeeded(self) -> bool:
        return self.status == "TERMINATED" and self.result == "success"


class ErrorRecord(Model):
    worker: str
    rank: int
    kernel_id: str
    agent: str | None
    source: str
    kind: str
    type: str
    message: str
    traceback: str
    timestamp: datetime | None
    resolution: str
    exited_at: datetime | None
    recoverable: bool | None
    exit_code: int | None
    signal: int | None
    root_cause: bool
    primary: bool
    note: str | None


class HistoryEntry(Model):
    handler: str
    result: str
    from_status: str
    to_status: str | None
    message: str
    count: int
    created_at: datetime
    last_at: datetime


class LogChunk(Model):
    id: int
    rank: int
    stream: str
    offset: int
    data: str


class LogPage(Model):
    chunks: list[LogChunk]
    next: int
    complete: bool
    dropped: int


class LogOutput(Model):
    """A piece of one kernel's output, from `sessions.stream_logs`."""

    position: str
    """Where a reader is once it has read this piece: `after=` resumes from it."""
    rank: int
    generation: int
    """The kernel's placement: a resumed kernel writes its streams from offset 0 again."""
    stream: str
    offset: int
    text: str


class Array(Model):
    array_id: str
    indices: str
    size: int
    session_ids: list[str]
    counts: dict[str, int]
    succeeded: int
    settled: bool
    retried: int | None = None


class BulkItem(Model):
    created: bool
    session: Session


class Bulk(Model):
    sessions: list[BulkItem]


class Agent(Model):
    id: str
    hostname: str
    address: str
    resource_group: str
    status: str
    epoch: int
    capacity: dict[str, float | int]
    used: dict[str, float | int]
    last_heartbeat: datetime
    info: dict[str, Any]


class Webhook(Model):
    id: str
    url: str
    events: list[str]
    project: str | None
    description: str
    enabled: bool
    disabled_reason: str | None
    position: str
    previous_secret_until: datetime | None
    created_by: str
    created_at: datetime
    updated_at: datetime


class CreatedWebhook(Webhook):
    secret: str
    """`whsec_...`: shown in this answer only."""


class Delivery(Model):
    event_id: int
    position: str
    event_type: str
    webhook_id: str
    status: str
    attempts: int
    first_attempt_at: datetime | None
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None
    response_code: int | None
    response_body: str | None
    error: str | None
    latency_ms: float | None
    delivered_at: datetime | None


class Policy(Model):
    api_version: str = Field("corral/v1", alias="apiVersion")
    kind: str = "RetryPolicy"
    metadata: dict[str, Any]
    spec: dict[str, Any]


class Group(Model):
    name: str
    preemptible_priority: int
    preemption_order: str
    preemption_mode: str
    grace_period: float
    min_runtime: float
    pending_timeout: float | None
    max_reschedules: int | None
    agents: list[str]


class Project(Model):
    name: str
    retry_defaults: dict[str, Any]
    retry_policies: list[str]
    priority_rules: dict[str, Any]
    created_at: datetime


class User(Model):
    name: str
    role: str
    projects: list[str]
    priority_rules: dict[str, Any]
    run_as: dict[str, int] | None
    default_project: str | None
    created_at: datetime


class Key(Model):
    id: str
    prefix: str
    created_at: datetime


class NewKey(Model):
    id: str
    key: str = Field(repr=False)


class CreatedUser(User):
    key: NewKey


class Me(Model):
    name: str
    role: str
    projects: list[str]
    priority: dict[str, dict[str, Any]]


class Event(Model):
    id: int
    position: str
    """Where it is in commit order: `after=` (or a stream's `Last-Event-ID`) reads on from it."""
    type: str
    entity_kind: str
    entity_id: str
    project: str | None
    session_id: str | None
    from_status: str | None
    to_status: str | None
    payload: dict[str, Any]
    created_at: datetime


class AuditEntry(Model):
    id: int
    actor: str
    action: str
    target: str
    reason: str
    created_at: datetime


# Beside, on the same base (this file's length); imported last, as they need `Model`.
from corral.client.deployment_models import Deployment as Deployment  # noqa: E402
from corral.client.deployment_models import DeploymentHistoryEntry as DeploymentHistoryEntry  # noqa: E402
from corral.client.deployment_models import Route as Route  # noqa: E402
