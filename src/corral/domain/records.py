"""What the store hands out: plain frozen records, never ORM rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from corral.domain.cause import Cause, KernelOutcome
from corral.domain.error_record import worker_name
from corral.domain.events import Position
from corral.domain.resources import ResourceSlots
from corral.domain.spec import SessionSpec
from corral.domain.status import FAILED_KERNEL, AgentStatus, KernelStatus, SessionResult, SessionStatus


@dataclass(frozen=True)
class OrderedKernel:
    """What an agent's order poll reads of one of its kernels (store/kernels.py orders_for): every
    poll reads them all, so not the whole row (four JSON columns, two dates) of KernelRecord."""

    id: str
    session_id: str
    rank: int
    generation: int
    status: KernelStatus
    kill_requested: bool
    """The manager asked it to stop."""
    kill_forced: bool
    """...at once (SIGKILL), not after a grace."""
    kill_grace: float | None
    """The stop's grace, when the manager chose one."""


@dataclass(frozen=True)
class KernelRecord:
    """One kernel of a session."""

    id: str
    session_id: str
    rank: int
    role: str
    agent_id: str | None
    status: KernelStatus
    status_changed_at: datetime
    generation: int
    resources: ResourceSlots
    master_port: int | None
    kill_requested: bool
    kill_forced: bool
    kill_grace: float | None
    devices: list[int] | None
    logs_done: bool
    log_dropped: int
    started: bool
    exit_code: int | None
    signal: int | None
    oom_killed: bool
    killed_by_corral: bool
    agent_lost: bool
    image_failed: bool
    exited_at_ns: int | None
    conditions: list[str]
    termination_message: str | None
    error_record: dict[str, Any] | None
    detail: dict[str, Any]

    @property
    def failed(self) -> bool:
        """It ended in failure, or with a non-zero exit (one rule with the store's `failed` filter)."""
        return self.status in FAILED_KERNEL or (self.exit_code or 0) != 0

    def outcome(self) -> KernelOutcome:
        return KernelOutcome(
            rank=self.rank,
            status=self.status,
            exit_code=self.exit_code,
            signal=self.signal,
            oom_killed=self.oom_killed,
            killed_by_corral=self.killed_by_corral,
            started=self.started,
            exited_at_ns=self.exited_at_ns,
            agent_lost=self.agent_lost,
            image_failed=self.image_failed,
            kernel_id=self.id,
            agent_id=self.agent_id,
            worker=worker_name(self.rank),
            error_file=self.error_record,
            log_tail=tail if isinstance(tail := self.detail.get("log_tail"), str) else "",
            # The termination message holds the log's tail when the kernel wrote no termination log;
            # an image's failure is the agent's own words (pip's last lines).
            termination_log=(self.termination_message or "")
            if self.image_failed or self.detail.get("termination_source") in ("file", "start_error")
            else "",
        )


@dataclass(frozen=True)
class SessionRecord:
    """A session with its kernels: the user's spec plus the state the coordinator keeps."""

    id: str
    name: str
    spec: SessionSpec
    status: SessionStatus
    status_changed_at: datetime
    result: SessionResult
    cause: Cause | None
    exit_code: int | None
    root_rank: int | None
    owner: str
    parent_session_id: str | None
    root_session_id: str
    retry_count: int
    chain_submitted_at: datetime
    retry_after: datetime | None
    phase_tries: int
    reschedule_count: int
    resume_count: int
    attempt: int
    manual_retry: bool
    total_retries: int
    free_requeues: int
    rule_counts: dict[str, int]
    first_started_at: datetime | None
    retry_cause: Cause | None
    planned_attempts: int | None
    avoid_agent: str | None
    retry_state: str | None
    retry_reason: str | None
    next_attempt_id: str | None
    reservation: dict[str, Any] | None
    termination_reason: str | None
    termination_message: str | None
    termination_requested_at: datetime | None
    created_at: datetime
    started_at: datetime | None
    terminated_at: datetime | None
    kernels: tuple[KernelRecord, ...] = ()
    preempted_by: str | None = None
    """The session whose preemption asked this one to stop (its victims name it here)."""

    @property
    def priority(self) -> int:
        return self.spec.priority

    @property
    def cluster_size(self) -> int:
        return self.spec.cluster_size

    @property
    def resources(self) -> ResourceSlots:
        return self.spec.resources

    @property
    def max_attempts(self) -> int:
        """ "attempt N of M": M = max_retries + 1 + free requeues so far (DESIGN §5), or what the
        named rule that made this attempt still allowed then; never below N."""
        if self.planned_attempts is not None:
            return max(self.planned_attempts, self.attempt)
        return max(self.spec.max_retries + 1 + self.free_requeues, self.attempt)


@dataclass(frozen=True)
class AgentRecord:
    """A registered agent."""

    id: str
    hostname: str
    address: str
    resource_group: str
    status: AgentStatus
    epoch: int
    capacity: ResourceSlots
    info: dict[str, Any]
    last_heartbeat: datetime
    registered_at: datetime
    lost_at: datetime | None
    used: ResourceSlots = field(default_factory=ResourceSlots)


@dataclass(frozen=True)
class AgentCapacity:
    """What placement needs of an agent, read once per scheduling cycle."""

    id: str
    """The agent."""
    status: AgentStatus
    """Only ALIVE agents are placed on."""
    capacity: ResourceSlots
    """What it declared."""
    used: ResourceSlots
    """Its live allocations, summed."""
    schedulable: bool = True
    """Kernels can start there (its `info`, as the agent last said: agent/health.py)."""

    @property
    def placeable(self) -> bool:
        """Placement may put kernels there: ALIVE (within its lease) and schedulable."""
        return self.status is AgentStatus.ALIVE and self.schedulable


@dataclass(frozen=True)
class RunningRecord:
    """A RUNNING session nobody has asked to stop, as the backfill rule and preemption see it."""

    id: str
    """The session."""
    priority: int
    """Its priority (victims are chosen lowest first)."""
    started_at: datetime | None
    """When it started running."""
    timeout: int | None
    """Its time limit in seconds, if it has one (it ends by started_at + timeout)."""
    kernels: tuple[tuple[str | None, ResourceSlots], ...]
    """(agent, slots) of each of its kernels, in rank order."""


@dataclass(frozen=True)
class HistoryRecord:
    """One outcome the coordinator recorded for a session."""

    id: int
    session_id: str
    handler: str
    result: str
    from_status: str
    to_status: str | None
    message: str
    count: int
    created_at: datetime
    last_at: datetime


@dataclass(frozen=True)
class NewSession:
    """A validated session to insert: its spec, its identity and its place in a retry chain."""

    id: str
    name: str
    owner: str
    spec: SessionSpec
    parent_session_id: str | None = None
    root_session_id: str | None = None
    retry_count: int = 0
    chain_submitted_at: datetime | None = None
    retry_after: datetime | None = None
    attempt: int = 1
    """Position in the chain, 1-based."""
    manual_retry: bool = False
    """Made by `corral session retry` (a fresh budget)."""
    total_retries: int = 0
    """Budget-consuming retries of the chain so far (the global cap counts these)."""
    free_requeues: int = 0
    """Attempts made without spending budget (e.g. after a preemption)."""
    rule_counts: dict[str, int] | None = None
    """Each named rule's own retry count so far."""
    first_started_at: datetime | None = None
    """When the chain's first attempt started."""
    retry_cause: str | None = None
    """The cause that made this attempt."""
    avoid_agent: str | None = None
    """Soft anti-affinity: the agent of the previous root cause."""
    planned_attempts: int | None = None
    """"attempt N of M" as decided (None: from the inline policy)."""
    spec_hash: str | None = None
    """The request's digest, when the spec stored differs from the request (defaults merged in)."""


@dataclass(frozen=True)
class KernelReport:
    """A kernel transition as an agent reports it."""

    kernel_id: str
    status: KernelStatus
    generation: int = 0
    exit_code: int | None = None
    signal: int | None = None
    oom_killed: bool = False
    killed_by_corral: bool = False
    image_failed: bool = False
    agent_lost: bool = False
    exited_at_ns: int | None = None
    master_port: int | None = None
    termination_message: str | None = None
    error_record: dict[str, Any] | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    output_done: bool = False


@dataclass(frozen=True)
class Move:
    """One guarded session status change the coordinator wants applied."""

    session_id: str
    src: SessionStatus
    dst: SessionStatus
    kernel_dst: KernelStatus | None = None
    values: tuple[tuple[str, Any], ...] = ()
    via: tuple[SessionStatus, ...] = ()
    """Statuses passed between src and dst in the same update, in order: each hop a legal
    transition with its own event row (none of them one a status change has a side effect of)."""
    kernel_via: tuple[KernelStatus, ...] = ()
    """Likewise for its kernels on their way to kernel_dst."""
    unrequested: bool = False
    """Guarded also by no termination having been requested (the rule making it asks for none): a
    request committed since the session was read makes it lose, as a status change would."""


@dataclass(frozen=True)
class AuditRecord:
    """Who did what to what, and why (retries and admin changes)."""

    id: int
    actor: str
    action: str
    target: str
    reason: str
    created_at: datetime


@dataclass(frozen=True)
class EventRecord:
    """One row of the outbox."""

    id: int
    txid: int
    entity_kind: str
    entity_id: str
    project: str | None
    session_id: str | None
    kind: str
    from_status: str | None
    to_status: str | None
    payload: dict[str, Any]
    created_at: datetime

    @property
    def position(self) -> Position:
        return Position(self.txid, self.id)


@dataclass(frozen=True)
class ProjectRecord:
    """A project and its retry configuration."""

    name: str
    config: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class UserRecord:
    """A user and the projects they belong to."""

    id: str
    name: str
    role: str
    """admin or user."""
    projects: tuple[str, ...]
    """Project names, sorted."""
    created_at: datetime
    config: dict[str, Any] = field(default_factory=dict)
    """The user's own settings: `priority_rules` (over their projects')."""


@dataclass(frozen=True)
class ApiKeyRecord:
    """An API key as it is listed: never the key, only its first characters."""

    id: str
    prefix: str
    created_at: datetime


@dataclass(frozen=True)
class Principal:
    """Who is calling: an authenticated user, with the projects whose sessions it may see."""

    user_id: str
    name: str
    role: str
    projects: frozenset[str]

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"
