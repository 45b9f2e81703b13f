"""API shapes (pydantic): not the domain types, and never ORM rows."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from corral.store.records import AgentRecord, HistoryRecord, KernelRecord, SessionRecord

Amount = int | float | str


def _default_resources() -> dict[str, Amount]:
    return {"cpu": 1}


class SessionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(min_length=1, description="argv of each kernel's main process")
    name: str | None = None
    type: Literal["batch", "interactive", "inference"] = "batch"
    resources: dict[str, Amount] = Field(
        default_factory=_default_resources,
        description="per kernel: cpu cores, mem bytes or '64M', gpu devices, declared custom slots",
    )
    cluster_size: int = Field(1, ge=1, le=256)
    priority: int = Field(10, ge=0, le=100)
    resource_group: str = "default"
    project: str = "default"
    placement: Literal["concentrated", "dispersed"] = "concentrated"
    env: dict[str, str] = Field(default_factory=dict)
    image: str | None = None
    timeout: int | None = Field(None, gt=0, description="seconds from start; then deadline_exceeded")
    error_strategy: Literal["single", "earliest", "earliest_primary"] = "earliest"
    retry_policy: dict[str, Any] | None = None
    retry_policies: list[str] = Field(default_factory=list)
    creation_id: str | None = Field(None, min_length=1, max_length=200)


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
    detail: dict[str, Any]

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
            conditions=k.conditions + (["agent_lost"] if k.agent_lost else []),
            termination_message=k.termination_message,
            detail=k.detail,
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
    retry_count: int
    max_retries: int
    retry_policy: dict[str, Any] | None
    retry_state: str
    termination_reason: str | None
    root_cause: dict[str, Any] | None
    kernels: list[KernelOut]

    @classmethod
    def of(cls, s: SessionRecord) -> SessionOut:
        root = (
            next((k for k in s.kernels if k.rank == s.root_rank), None) if s.root_rank is not None else None
        )
        max_retries = int((s.retry_policy or {}).get("max_retries", 0))
        return cls(
            id=s.id,
            name=s.name,
            type=s.type,
            status=s.status,
            result=s.result,
            cause=s.cause,
            exit_code=s.exit_code,
            priority=s.priority,
            resource_group=s.resource_group,
            project=s.project,
            owner=s.owner,
            cluster_size=s.cluster_size,
            resources=s.resources.to_public(),
            command=s.command,
            created_at=s.created_at,
            started_at=s.started_at,
            terminated_at=s.terminated_at,
            parent_session_id=s.parent_session_id,
            root_session_id=s.root_session_id,
            retry_count=s.retry_count,
            max_retries=max_retries,
            retry_policy=s.retry_policy,
            retry_state="none",
            termination_reason=s.termination_reason,
            root_cause=(
                {
                    "kernel_id": root.id,
                    "rank": root.rank,
                    "agent": root.agent_id,
                    "exit_code": root.exit_code,
                    "signal": root.signal,
                    "message": root.termination_message,
                }
                if root
                else None
            ),
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
    data: str


class LogsOut(BaseModel):
    chunks: list[LogChunkOut]
    next: int
    complete: bool = Field(description="the session has ended and every log chunk is stored")


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
