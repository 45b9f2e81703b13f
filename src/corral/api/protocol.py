"""The agent protocol: agents register, pull orders (long poll) and push reports and logs."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from corral.domain.status import KernelStatus


class RegisterIn(BaseModel):
    agent_id: str = Field(min_length=1, max_length=128)
    hostname: str
    address: str
    resource_group: str = "default"
    capacity: dict[str, int | float | str]
    info: dict[str, Any] = Field(default_factory=dict)
    instance: str = Field(
        "", max_length=64, description="random per agent process: tells a restart from a twin"
    )


class RegisterOut(BaseModel):
    epoch: int
    agent_lease: float
    fence_timeout: float
    heartbeat_interval: float
    long_poll: float


class OrdersIn(BaseModel):
    agent_id: str
    epoch: int
    seen: str = ""
    wait: float = Field(0.0, ge=0, le=60)


class KernelOrder(BaseModel):
    kernel_id: str
    session_id: str
    rank: int
    generation: int
    status: KernelStatus
    kill: bool
    spec: dict[str, Any]


class OrdersOut(BaseModel):
    fingerprint: str
    orders: list[KernelOrder]


class KernelReportIn(BaseModel):
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
    detail: dict[str, Any] = Field(default_factory=dict)


class LogChunkIn(BaseModel):
    kernel_id: str
    stream: str = Field(pattern="^(stdout|stderr)$")
    offset: int = Field(ge=0)
    data: str


class ReportsIn(BaseModel):
    agent_id: str
    epoch: int
    reports: list[KernelReportIn] = Field(default_factory=list)
    logs: list[LogChunkIn] = Field(default_factory=list)


class ReportsOut(BaseModel):
    applied: int
    refused: list[str]
