"""API shapes (pydantic): not the domain types, and never ORM rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    field_validator,
    model_validator,
)

from corral.domain.arrays import ELEMENT_KEY_MARK, MAX_ELEMENTS, MAX_INDEX, parse_indices
from corral.domain.cause import NEVER_RETRIABLE, Cause
from corral.domain.error_record import ErrorRecord, error_record
from corral.domain.failure import kernel_conditions
from corral.domain.final import failure_records
from corral.domain.placement import PlacementStrategy
from corral.domain.priority import PRIORITY_MAX, PRIORITY_MIN
from corral.domain.records import AgentRecord, HistoryRecord, KernelRecord, SessionRecord
from corral.domain.resources import ResourceError, ResourceSlots
from corral.domain.retry import RETRY_KEY_MARK, AttemptBrief, shown_retry_state
from corral.domain.root_cause import default_strategy, is_side_effect, ordered
from corral.domain.spec import (
    MAX_RETRY_DELAY_CEILING,
    UNNAMED_PROJECT,
    AntiAffinity,
    Backoff,
    ErrorStrategy,
    Jitter,
    RetryPolicy,
    SessionSpec,
    SessionType,
    parse_duration,
)
from corral.protocol.types import STRICT, Amount, Name, SlotName, Text, clean_text
from corral.services.errors import InvalidInput
from corral.services.logs import LogPage

# Documented limits (README "Limits"): a request past them is refused with 422 naming the field.
MAX_COMMAND_ARGS = 4096
MAX_COMMAND_BYTES = 128 * 1024
MAX_ENV_VARS = 512
MAX_ENV_BYTES = 128 * 1024
MAX_TIMEOUT = 10 * 365 * 86400
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"

EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME, max_length=256)]
CreationId = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(clean_text)]
Duration = Annotated[float, BeforeValidator(parse_duration)]


def _absolute(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError("must be an absolute path (it is the agent's, not yours)")
    return path


Workdir = Annotated[
    str,
    StringConstraints(min_length=1, max_length=4096),
    AfterValidator(clean_text),
    AfterValidator(_absolute),
]


def _default_resources() -> dict[str, Amount]:
    return {"cpu": 1}


class RetryPolicyIn(BaseModel):
    """DESIGN §5 inline policy; durations in seconds or as "10s", "5m"."""

    model_config = STRICT

    max_retries: int = Field(0, ge=0, le=1000)
    retry_delay: Duration = Field(60.0, ge=0, le=MAX_RETRY_DELAY_CEILING)
    backoff: Annotated[Backoff, Strict(False)] = Backoff.FIXED
    backoff_multiplier: float = Field(2.0, ge=1.0, le=100.0, allow_inf_nan=False)
    max_retry_delay: Duration = Field(3600.0, ge=0, le=MAX_RETRY_DELAY_CEILING)
    jitter: Annotated[Jitter, Strict(False)] = Jitter.DETERMINISTIC
    jitter_ratio: float = Field(0.25, ge=0.0, le=1.0, allow_inf_nan=False)
    eligible_causes: list[Annotated[Cause, Strict(False)]] | None = Field(None, max_length=len(Cause))
    emit_retry_events: bool = True
    anti_affinity: Annotated[AntiAffinity, Strict(False)] = AntiAffinity.NONE
    max_retry_duration: Duration | None = Field(None, ge=0, le=MAX_TIMEOUT)

    @field_validator("eligible_causes")
    @classmethod
    def _retriable(cls, causes: list[Cause] | None) -> list[Cause] | None:
        never = sorted(str(c) for c in causes or () if c in NEVER_RETRIABLE)
        if never:
            raise ValueError(f"{', '.join(never)} can never be retried")
        return causes

    def to_domain(self) -> RetryPolicy:
        data = self.model_dump()
        causes = data.pop("eligible_causes")
        policy = RetryPolicy(**data)
        return replace(policy, eligible_causes=frozenset(causes)) if causes is not None else policy


class SessionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, use_enum_values=False)

    command: list[Text] = Field(
        min_length=1, max_length=MAX_COMMAND_ARGS, description="argv of each kernel's main process"
    )
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")] | None = Field(
        None, description="1-128 letters, digits, '.', '_' or '-'"
    )
    type: Annotated[SessionType, Strict(False)] = Field(
        SessionType.BATCH, description="batch (the only type a request may submit for now)"
    )
    resources: dict[SlotName, Amount] = Field(
        default_factory=_default_resources,
        max_length=32,
        description="per kernel: cpu cores (default 1, > 0), mem bytes or '64M', gpu devices, custom slots",
    )
    cluster_size: int = Field(1, ge=1, le=256)
    priority: int = Field(10, ge=0, le=100)
    resource_group: Name = "default"
    project: Name | None = Field(
        None,
        description="default: the caller's only project, else their default_project (set by an admin)",
    )
    placement: Annotated[PlacementStrategy, Strict(False)] = PlacementStrategy.CONCENTRATED
    env: dict[EnvName, Text] = Field(
        default_factory=dict,
        max_length=MAX_ENV_VARS,
        description="names [A-Za-z_][A-Za-z0-9_]*, not CORRAL_*",
    )
    image: Name | None = None
    workdir: Workdir | None = Field(
        None,
        description="absolute path each kernel starts in, as `sbatch --chdir` (default: its private"
        " directory, also $CORRAL_WORK_DIR); `corral run` sends the caller's working directory",
    )
    timeout: int | None = Field(
        None, gt=0, le=MAX_TIMEOUT, description="seconds from start; then deadline_exceeded"
    )
    error_strategy: Annotated[ErrorStrategy, Strict(False)] | None = Field(
        None,
        description="how a failed gang's root cause is chosen: single, earliest or earliest_primary "
        "(default: earliest_primary for cluster_size > 1, single for one kernel)",
    )
    retry_policy: RetryPolicyIn | None = None
    retry_policies: list[Name] = Field(default_factory=list, max_length=32)
    creation_id: (
        Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(clean_text)] | None
    ) = None
    array: Annotated[str, StringConstraints(max_length=200)] | None = Field(
        None,
        description="a job array: one session per index, e.g. '0-49', '1-1000:10', '1,3,5' (at most "
        f"{MAX_ELEMENTS} elements, indices up to {MAX_INDEX}); each sees $CORRAL_ARRAY_INDEX",
    )

    @field_validator("type")
    @classmethod
    def _batch_only(cls, value: SessionType) -> SessionType:
        # Inference sessions are a deployment's replicas and are made by it, never by a request;
        # interactive ones need an attach path that does not exist yet. Until then both are refused
        # rather than run once as if they were batch sessions.
        if value is not SessionType.BATCH:
            raise ValueError(f"only batch sessions can be submitted ({value} sessions are not supported yet)")
        return value

    @field_validator("creation_id")
    @classmethod
    def _creation_id(cls, value: str | None) -> str | None:
        if value is not None and RETRY_KEY_MARK in value:
            raise ValueError(f"{RETRY_KEY_MARK!r} is reserved for the keys of retries")
        if value is not None and ELEMENT_KEY_MARK in value:
            raise ValueError(f"{ELEMENT_KEY_MARK!r} is reserved for the keys of array elements")
        return value

    @field_validator("array")
    @classmethod
    def _array(cls, value: str | None) -> str | None:
        if value is not None:
            parse_indices(value)  # ArrayError is a ValueError: a 422 naming `array`
        return value

    def indices(self) -> tuple[int, ...] | None:
        """The array's indices (None: a single session)."""
        return parse_indices(self.array) if self.array is not None else None

    @field_validator("command")
    @classmethod
    def _command(cls, command: list[str]) -> list[str]:
        if not command[0]:
            raise ValueError("the program (first word) must not be empty")
        if sum(len(c.encode()) for c in command) > MAX_COMMAND_BYTES:
            raise ValueError(f"longer than {MAX_COMMAND_BYTES} bytes in total")
        return command

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        reserved = sorted(k for k in env if k.upper().startswith("CORRAL_"))
        if reserved:
            raise ValueError(f"{reserved[0]}: CORRAL_* names are set by Corral")
        if sum(len(k.encode()) + len(v.encode()) for k, v in env.items()) > MAX_ENV_BYTES:
            raise ValueError(f"longer than {MAX_ENV_BYTES} bytes in total")
        return env

    def to_spec(self) -> SessionSpec:
        """The domain value (resource amounts parsed here: errors name the slot)."""
        try:
            resources = ResourceSlots.parse({"cpu": 1, **self.resources}).nonzero()  # 1 CPU unless said
        except ResourceError as exc:
            raise InvalidInput(f"resources.{exc.field}", str(exc)) from exc
        if resources["cpu"] <= 0:
            # Capacity is counted in CPUs: a kernel asking for none could be placed without limit.
            raise InvalidInput("resources.cpu", "every kernel needs some CPU (e.g. 0.1 or '100m')")
        return SessionSpec(
            command=tuple(self.command),
            resources=resources,
            env=dict(self.env),
            name=self.name,
            type=self.type,
            cluster_size=self.cluster_size,
            priority=self.priority,
            resource_group=self.resource_group,
            project=self.project or UNNAMED_PROJECT,
            placement=self.placement,
            image=self.image,
            timeout=self.timeout,
            error_strategy=self.error_strategy or default_strategy(self.cluster_size),
            retry_policy=self.retry_policy.to_domain() if self.retry_policy else None,
            retry_policies=tuple(self.retry_policies),
            creation_id=self.creation_id,
            workdir=self.workdir,
        )


class PriorityRulesIn(BaseModel):
    """Fields left out keep their inherited value (user over project over the defaults)."""

    model_config = STRICT

    default: int | None = Field(
        None, ge=PRIORITY_MIN, le=PRIORITY_MAX, description="for sessions that ask none"
    )
    may_change: bool | None = Field(None, description="whether the caller may ask for another priority")
    min: int | None = Field(None, ge=PRIORITY_MIN, le=PRIORITY_MAX, description="lowest one may ask for")
    max: int | None = Field(None, ge=PRIORITY_MIN, le=PRIORITY_MAX, description="highest one may ask for")

    @model_validator(mode="after")
    def _range(self) -> PriorityRulesIn:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min must not be above max")
        return self

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class KernelOut(BaseModel):
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
    exited_at: datetime | None = Field(description="when its main process ended, as its agent saw it")
    detail: dict[str, Any]
    output_complete: bool = Field(description="the agent has shipped all of this kernel's output")
    output_dropped: int = Field(description="bytes of its output dropped by the log cap")
    gpu_devices: list[int] = Field(description="GPU indexes on its agent (its CUDA_VISIBLE_DEVICES)")
    master_port: int | None = Field(description="rank 0: the gang's rendezvous port (its MASTER_PORT)")

    @classmethod
    def of(cls, k: KernelRecord) -> KernelOut:
        return cls(
            id=k.id,
            rank=k.rank,
            role=k.role,
            agent=k.agent_id,
            status=k.status,
            exit_code=k.exit_code,
            signal=k.signal,
            oom_killed=k.oom_killed,
            killed_by_corral=k.killed_by_corral,
            conditions=sorted({*k.conditions, *kernel_conditions(k.outcome())}),
            termination_message=k.termination_message,
            exited_at=datetime.fromtimestamp(k.exited_at_ns / 1e9, UTC) if k.exited_at_ns else None,
            detail=k.detail,
            output_complete=k.logs_done,
            output_dropped=k.log_dropped,
            gpu_devices=list(k.devices or []),
            master_port=k.master_port,
        )


def _at(ns: int | None) -> datetime | None:
    return datetime.fromtimestamp(ns / 1e9, UTC) if ns is not None else None


_RESOLUTIONS = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us"))


def _resolution(ns: int) -> str:
    return next((name for size, name in _RESOLUTIONS if ns >= size), "ns")


class ErrorRecordOut(BaseModel):
    worker: str
    rank: int
    kernel_id: str
    agent: str | None
    source: str = Field(description="corral (corral_worker), torch (elastic @record) or synthesized")
    kind: str = Field(description="exception, signal, exit, oom or lost")
    type: str
    message: str
    traceback: str = Field(description="the traceback, or the log tail of a synthesized record")
    timestamp: datetime | None
    resolution: str = Field(description="precision of timestamp: s for torch's records, ns otherwise")
    exited_at: datetime | None = Field(description="the kernel's exit as its agent saw it (tie-breaker)")
    recoverable: bool | None
    exit_code: int | None
    signal: int | None
    root_cause: bool = Field(description="this record is the session's root cause")
    primary: bool = Field(description="not a side effect (peer gone, connection reset, stopped by Corral)")
    note: str | None = Field(description="why the worker's error file was not used, when it was not")

    @classmethod
    def of(cls, r: ErrorRecord, root: bool = False) -> ErrorRecordOut:
        return cls(
            worker=r.worker,
            rank=r.rank,
            kernel_id=r.kernel_id,
            agent=r.agent,
            source=r.source,
            kind=r.kind,
            type=r.type,
            message=r.message,
            traceback=r.traceback,
            timestamp=_at(r.timestamp_ns),
            resolution=_resolution(r.resolution_ns),
            exited_at=_at(r.exited_at_ns),
            recoverable=r.recoverable,
            exit_code=r.exit_code,
            signal=r.signal,
            root_cause=root,
            primary=not is_side_effect(r),
            note=r.note,
        )


def root_cause_of(s: SessionRecord) -> dict[str, Any] | None:
    """The session's root-cause worker, as chosen when it ended (its kernel is `root_rank`)."""
    root = next((k for k in s.kernels if k.rank == s.root_rank), None) if s.root_rank is not None else None
    if root is None:
        return None
    r = error_record(root.outcome())
    return {
        "worker": r.worker,
        "rank": r.rank,
        "kernel_id": r.kernel_id,
        "agent": r.agent,
        "type": r.type,
        "message": r.message,
        "timestamp": _at(r.timestamp_ns),
        "resolution": _resolution(r.resolution_ns),
        "recoverable": r.recoverable,
        "strategy": str(s.spec.error_strategy),
        "source": str(r.source),
        "exit_code": root.exit_code,
        "signal": root.signal,
    }


def errors_of(s: SessionRecord) -> list[ErrorRecordOut]:
    """Every failed worker's record, the root cause first."""
    records = failure_records([k.outcome() for k in s.kernels])
    root = next((r for r in records if r.rank == s.root_rank), None)
    rest = ordered(records, None)
    return [
        ErrorRecordOut.of(r, r is root) for r in ([root] if root else []) + [r for r in rest if r is not root]
    ]


class SessionOut(BaseModel):
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
    attempt: int = Field(description="position in the retry chain, 1-based")
    max_attempts: int = Field(description="max_retries + 1 + free requeues so far")
    retry_count: int
    max_retries: int
    retry_policy: dict[str, Any] | None
    retry_policies: list[str]
    retry_cause: str | None = Field(description="the cause that made this attempt")
    retry_state: str = Field(description="none|scheduled|running|exhausted|succeeded|failed")
    retry_reason: str | None = Field(description="why the engine decided as it did on this attempt")
    next_attempt_id: str | None
    retry_after: datetime | None
    retry_chain: list[str] = Field(description="ids of every attempt of the chain, first to last")
    resume_count: int = Field(description="times it was resumed after a suspension (suspend-mode preemption)")
    array_id: str | None = Field(None, description="the job array it is an element of")
    array_index: int | None = Field(None, description="its index there ($CORRAL_ARRAY_INDEX)")
    manual_retry: bool
    creation_id: str | None
    termination_reason: str | None
    waiting_reason: str | None = Field(None, description="why a PENDING session waits (single GET only)")
    error_strategy: str = Field(description="how the root cause is chosen")
    root_cause: dict[str, Any] | None = Field(
        description="the worker that failed first: worker, rank, kernel_id, agent, type, message, "
        "timestamp, resolution, recoverable, strategy"
    )
    kernels: list[KernelOut]

    @classmethod
    def of(
        cls,
        s: SessionRecord,
        waiting_reason: str | None = None,
        chain: Sequence[Mapping[str, Any]] | None = None,
    ) -> SessionOut:
        briefs = [
            AttemptBrief(c["attempt"], c["status"], c["result"], c["retry_state"]) for c in (chain or [])
        ]
        me = AttemptBrief(s.attempt, s.status, s.result, s.retry_state)
        spec = s.spec
        return cls(
            id=s.id,
            name=s.name,
            type=spec.type,
            status=s.status,
            result=s.result,
            cause=s.cause,
            exit_code=s.exit_code,
            priority=spec.priority,
            resource_group=spec.resource_group,
            project=spec.project,
            owner=s.owner,
            cluster_size=spec.cluster_size,
            resources=spec.resources.to_public(),
            command=list(spec.command),
            created_at=s.created_at,
            started_at=s.started_at,
            terminated_at=s.terminated_at,
            parent_session_id=s.parent_session_id,
            root_session_id=s.root_session_id,
            attempt=s.attempt,
            max_attempts=s.max_attempts,
            retry_count=s.retry_count,
            max_retries=spec.max_retries,
            retry_policy=spec.retry_policy.to_json() if spec.retry_policy else None,
            retry_policies=list(spec.retry_policies),
            retry_cause=s.retry_cause,
            retry_state=shown_retry_state(me, briefs),
            retry_reason=s.retry_reason,
            next_attempt_id=s.next_attempt_id,
            retry_after=s.retry_after,
            retry_chain=[c["id"] for c in chain] if chain else [s.id],
            resume_count=s.resume_count,
            array_id=spec.array_id,
            array_index=spec.array_index,
            manual_retry=s.manual_retry,
            creation_id=spec.creation_id,
            error_strategy=str(spec.error_strategy),
            termination_reason=s.termination_reason,
            waiting_reason=waiting_reason,
            root_cause=root_cause_of(s),
            kernels=[KernelOut.of(k) for k in s.kernels],
        )


class HistoryOut(BaseModel):
    handler: str
    result: str
    from_status: str
    to_status: str | None
    message: str
    count: int
    created_at: datetime
    last_at: datetime

    @classmethod
    def of(cls, h: HistoryRecord) -> HistoryOut:
        return cls(**{k: getattr(h, k) for k in cls.model_fields})


class LogChunkOut(BaseModel):
    id: int
    rank: int
    stream: str
    offset: int = Field(description="byte offset of this chunk in its stream")
    data: str = Field(description="the bytes as UTF-8 (invalid sequences shown as U+FFFD)")


class LogsOut(BaseModel):
    chunks: list[LogChunkOut]
    next: int = Field(description="pass as `after` for the next page")
    complete: bool = Field(description="the session has ended and all of its output has been read")
    dropped: int = Field(description="bytes dropped by the per-session log cap (the oldest ones)")

    @classmethod
    def of(cls, page: LogPage) -> LogsOut:
        return cls(
            chunks=[
                LogChunkOut(
                    id=c.id,
                    rank=c.rank,
                    stream=c.stream,
                    offset=c.offset,
                    data=c.data.decode("utf-8", "replace"),
                )
                for c in page.chunks
            ],
            next=page.next,
            complete=page.complete,
            dropped=page.dropped,
        )


class AgentOut(BaseModel):
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

    @classmethod
    def of(cls, a: AgentRecord) -> AgentOut:
        return cls(
            id=a.id,
            hostname=a.hostname,
            address=a.address,
            resource_group=a.resource_group,
            status=a.status,
            epoch=a.epoch,
            capacity=a.capacity.to_public(),
            used=a.used.nonzero().to_public(),
            last_heartbeat=a.last_heartbeat,
            info=a.info,
        )
