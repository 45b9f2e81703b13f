"""The agent protocol: agents register, pull orders (long poll) and push reports and logs.

Both sides use these models (the manager to read requests, the agent to read replies); unknown
fields are refused both ways, and every string and integer is bounded so no message can wedge
the other side.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, StringConstraints

from corral.domain.status import KernelStatus
from corral.protocol.types import (
    STRICT,
    Amount,
    Int32,
    Int64,
    JsonObject,
    LongText,
    Name,
    Offset,
    Serial,
    SlotName,
    Text64,
    Text128,
    Text256,
    clean_text,
)

Status = Annotated[KernelStatus, Strict(False)]
Reason = Annotated[str, StringConstraints(max_length=1024), AfterValidator(clean_text)]


def kernel_key(kernel_id: str, generation: int) -> str:
    """One placement of a kernel, as the agent names it: its files, its supervisor's events, and
    the kernels it tells the manager it has started."""
    return f"{kernel_id}.{generation}"


class RegisterIn(BaseModel):
    model_config = STRICT

    agent_id: Name
    hostname: Text256
    address: Text256
    resource_group: Name = "default"
    capacity: dict[SlotName, Amount] = Field(max_length=64)
    info: JsonObject = Field(default_factory=dict)
    instance: Text64 = Field("", description="random per agent process: tells a restart from a twin")
    schedulable: bool = Field(True, description="kernels can start there (false: placement skips it)")
    unschedulable_reason: Reason | None = None


class RegisterOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    epoch: int
    agent_lease: float
    fence_timeout: float
    heartbeat_interval: float
    long_poll: float
    log_cap: int


class OrdersIn(BaseModel):
    model_config = STRICT

    agent_id: Name
    epoch: Serial
    seen: Text128 = ""
    wait: float = Field(0.0, ge=0, le=60)
    started: list[Text256] = Field(
        default_factory=list,
        max_length=100_000,
        description="kernels (`<kernel id>.<generation>`) this agent has started: their orders carry no spec",
    )


class HealthIn(BaseModel):
    """The agent can (or no longer can) start kernels: sent when that changes."""

    model_config = STRICT

    agent_id: Name
    epoch: Serial
    schedulable: bool
    unschedulable_reason: Reason | None = None


class HealthOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schedulable: bool = Field(description="as recorded: what placement now reads")


class LeaveIn(BaseModel):
    model_config = STRICT

    agent_id: Name
    epoch: Serial


class KernelOrder(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kernel_id: str
    session_id: str
    rank: int
    generation: int
    status: Status
    kill: bool
    force: bool = False
    grace: float | None = Field(None, description="seconds from SIGTERM to SIGKILL (else the agent's own)")
    spec: dict[str, Any]


RECORDED = "whether this request was recorded as the agent's last contact (its fence counts from those)"


class OrdersOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fingerprint: str
    orders: list[KernelOrder]
    recorded: bool = Field(description=RECORDED)


class KernelReportIn(BaseModel):
    model_config = STRICT

    kernel_id: Name
    status: Status
    generation: Serial = 0
    exit_code: Int32 | None = None
    signal: Int32 | None = None
    oom_killed: bool = False
    killed_by_corral: bool = False
    image_failed: bool = False
    agent_lost: bool = False
    exited_at_ns: Int64 | None = None
    master_port: Annotated[int, Field(ge=1, le=65535)] | None = None
    termination_message: LongText | None = None
    error_record: JsonObject | None = None
    detail: JsonObject = Field(default_factory=dict)
    output_done: bool = Field(False, description="all of the kernel's output has been shipped already")


class LogShipment(BaseModel):
    """Query of `POST /agent/logs`; the body is the raw bytes at `offset` of the stream."""

    model_config = ConfigDict(extra="forbid")  # query strings: numbers arrive as text

    agent_id: Name
    epoch: Serial
    kernel_id: Name
    generation: Serial
    stream: Literal["stdout", "stderr"]
    offset: Offset
    eof: bool = Field(False, description="the kernel's output is complete with this piece")


class LogsShipped(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stored: bool = Field(description="false: the kernel is not this agent's (any more); stop shipping it")
    recorded: bool = Field(description=RECORDED)


class ReportsIn(BaseModel):
    model_config = STRICT

    agent_id: Name
    epoch: Serial
    reports: list[KernelReportIn] = Field(default_factory=list, max_length=100_000)


class ReportsOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    applied: int
    refused: list[str]
    recorded: bool = Field(description=RECORDED)
