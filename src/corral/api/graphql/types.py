"""The GraphQL shapes of what a session holds, of agents and of the caller: each made from the REST
shape of the same thing (api/schemas), so that both APIs show the same values."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar, cast

import strawberry
from pydantic import BaseModel
from strawberry.scalars import JSON

from corral.api.schemas import AgentOut, ErrorRecordOut, HistoryOut, KernelOut
from corral.domain.status import AgentStatus, KernelStatus, SessionStatus

strawberry.enum(SessionStatus, description="A session's status (DESIGN §3).")
strawberry.enum(KernelStatus, description="A kernel's status: the session's vocabulary.")
strawberry.enum(AgentStatus, description="ALIVE while its lease holds, LOST after.")

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def resolver(description: str) -> Callable[[F], F]:
    """`strawberry.field` as a decorator of a resolver, typed (strawberry declares it Any)."""
    return cast("Callable[[F], F]", strawberry.field(description=description))


def copied(cls: type[T], out: BaseModel | dict[str, Any], **given: Any) -> T:
    """`cls` with every field that `given` does not set taken from the REST shape `out`."""
    source = out if isinstance(out, dict) else out.__dict__
    # Fields with a resolver of their own (init=False) are read when asked for, not copied.
    names = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    return cls(**{n: source[n] for n in names if n not in given}, **given)


@strawberry.type(description="One kernel (process group) of a session, as GET /sessions/{id}/kernels.")
class Kernel:
    id: strawberry.ID
    rank: int
    role: str
    agent: str | None
    status: KernelStatus
    exit_code: int | None
    signal: int | None
    oom_killed: bool
    killed_by_corral: bool
    conditions: list[str]
    termination_message: str | None
    exited_at: datetime | None = strawberry.field(
        description="when its main process ended, as its agent saw it"
    )
    detail: JSON
    output_complete: bool = strawberry.field(description="the agent has shipped all of this kernel's output")
    output_dropped: int = strawberry.field(description="bytes of its output dropped by the log cap")
    gpu_devices: list[int] = strawberry.field(description="GPU indexes on its agent (CUDA_VISIBLE_DEVICES)")
    master_port: int | None = strawberry.field(description="rank 0: the gang's rendezvous port")

    @classmethod
    def of(cls, k: KernelOut) -> Kernel:
        return copied(cls, k, status=KernelStatus(k.status))


@strawberry.type(description="The worker whose failure ended the session (its root cause).")
class RootCause:
    worker: str
    rank: int
    kernel_id: strawberry.ID
    agent: str | None
    type: str
    message: str
    timestamp: datetime | None
    resolution: str = strawberry.field(description="precision of timestamp: s for torch's records")
    recoverable: bool | None
    strategy: str = strawberry.field(description="how it was chosen: single, earliest, earliest_primary")
    source: str
    exit_code: int | None
    signal: int | None

    @classmethod
    def of(cls, found: dict[str, Any] | None) -> RootCause | None:
        return copied(cls, found) if found is not None else None


@strawberry.type(description="A failed worker's error record, as GET /sessions/{id}/errors.")
class ErrorRecord:
    worker: str
    rank: int
    kernel_id: strawberry.ID
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
    root_cause: bool = strawberry.field(description="this record is the session's root cause")
    primary: bool = strawberry.field(description="not a side effect (peer gone, stopped by Corral)")
    note: str | None

    @classmethod
    def of(cls, r: ErrorRecordOut) -> ErrorRecord:
        return copied(cls, r)


@strawberry.type(description="One outcome the coordinator recorded for a session.")
class HistoryEntry:
    handler: str
    result: str
    from_status: str
    to_status: str | None
    message: str
    count: int = strawberry.field(description="times this outcome repeated (collapsed skips)")
    created_at: datetime
    last_at: datetime

    @classmethod
    def of(cls, h: HistoryOut) -> HistoryEntry:
        return copied(cls, h)


@strawberry.type(description="An agent (one per node), as GET /api/v1/agents: admins only.")
class Agent:
    id: strawberry.ID
    hostname: str
    address: str
    resource_group: str
    status: AgentStatus
    epoch: int
    capacity: JSON
    used: JSON
    last_heartbeat: datetime
    info: JSON

    @classmethod
    def of(cls, a: AgentOut) -> Agent:
        return copied(cls, a, status=AgentStatus(a.status))


@strawberry.type(description="Who the caller is, as GET /api/v1/me.")
class Me:
    name: str
    role: str
    projects: list[str]
    priority: JSON = strawberry.field(
        description="per project: the priority rules that apply (default, may_change, min, max)"
    )
