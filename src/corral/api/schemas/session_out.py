"""What a client reads of a session: its kernels, errors, root cause, history."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from corral.domain.error_record import ErrorRecord, error_record
from corral.domain.failure import kernel_conditions
from corral.domain.final import failure_records
from corral.domain.records import HistoryRecord, KernelRecord, SessionRecord
from corral.domain.retry import AttemptBrief, shown_retry_state
from corral.domain.root_cause import is_side_effect, ordered
from corral.domain.waiting import Waiting


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


class WaitingOut(BaseModel):
    position: int = Field(description="its place in its resource group's queue (1: the head)")
    reason: str
    infeasible: bool = Field(
        description="it can never start as asked: no agent (or all together) is big enough"
    )
    needs: dict[str, float | int] = Field(description="what one kernel asks for")
    largest_free: dict[str, float | int] | None = Field(
        description="the most free on one live agent of its group"
    )

    @classmethod
    def of(cls, w: Waiting) -> WaitingOut:
        largest = w.largest_free.to_public() if w.largest_free is not None else None
        return cls(
            position=w.position,
            reason=w.reason,
            infeasible=w.infeasible,
            needs=w.needs.to_public(),
            largest_free=largest,
        )


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
    preempted_by: str | None = Field(
        None, description="the session whose preemption stopped (or suspended) this one"
    )
    victims: list[str] = Field(
        default_factory=list, description="sessions this one preempted that you may see (single GET only)"
    )
    waiting: WaitingOut | None = Field(
        None, description="a PENDING session's queue position, needs and feasibility (single GET only)"
    )
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
        waiting: Waiting | None = None,
        victims: Sequence[str] = (),
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
            waiting=WaitingOut.of(waiting) if waiting is not None else None,
            preempted_by=s.preempted_by,
            victims=list(victims),
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
