"""The agent protocol: agents register, pull orders (long poll) and push reports and logs.

Both sides use these models (the manager to read requests, the agent to build them and to read
replies); unknown fields are refused both ways, every string and integer is bounded so no message
can wedge the other side, and every message is frozen: a value, built once and read by attribute.
This module holds the agent's standing with the manager (registration, health, leaving); orders,
reports and log shipments have their own modules beside it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field, Strict, StringConstraints

from corral.domain.status import KernelStatus
from corral.protocol.types import (
    REPLY,
    REQUEST,
    Amount,
    JsonObject,
    Name,
    Serial,
    SlotName,
    Text64,
    Text256,
    clean_text,
)

Status = Annotated[KernelStatus, Strict(False)]
Reason = Annotated[str, StringConstraints(max_length=1024), AfterValidator(clean_text)]

RECORDED = "whether this request was recorded as the agent's last contact (its fence counts from those)"


def kernel_key(kernel_id: str, generation: int) -> str:
    """One placement of a kernel, as the agent names it: its files, its supervisor's events, and
    the kernels it tells the manager it has started."""
    return f"{kernel_id}.{generation}"


class RegisterIn(BaseModel):
    model_config = REQUEST

    agent_id: Name
    hostname: Text256
    address: Text256
    resource_group: Name = "default"
    capacity: dict[SlotName, Amount] = Field(max_length=64)
    info: JsonObject = Field(default_factory=dict)
    instance: Text64 = Field(default="", description="random per agent process: tells a restart from a twin")
    schedulable: bool = Field(default=True, description="kernels can start there (false: placement skips it)")
    unschedulable_reason: Reason | None = None


class RegisterOut(BaseModel):
    model_config = REPLY

    epoch: int
    agent_lease: float
    fence_timeout: float
    heartbeat_interval: float
    long_poll: float
    log_cap: int


class ImageOffer(BaseModel):
    """One image an agent offers: its kind (agent/images.py) and whether it is ready (a
    requirements list: built)."""

    model_config = REQUEST

    kind: Literal["python", "venv", "path", "requirements"]
    ready: bool


class HealthIn(BaseModel):
    """The agent can (or no longer can) start kernels, or an image of its became ready: sent when
    that changes."""

    model_config = REQUEST

    agent_id: Name
    epoch: Serial
    schedulable: bool
    unschedulable_reason: Reason | None = None
    images: dict[Name, ImageOffer] | None = Field(
        default=None, max_length=1000, description="its images as they are now (None: none offered)"
    )


class HealthOut(BaseModel):
    model_config = REPLY

    schedulable: bool = Field(description="as recorded: what placement now reads")


class LeaveIn(BaseModel):
    model_config = REQUEST

    agent_id: Name
    epoch: Serial
