"""Log shipments: a piece of a kernel's output, its place in the stream given in the query."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from corral.protocol.messages import RECORDED
from corral.protocol.types import REPLY, Name, Offset, Serial


class LogShipment(BaseModel):
    """Query of `POST /agent/logs`; the body is the raw bytes at `offset` of the stream."""

    model_config = REPLY  # not strict: a query string's numbers arrive as text

    agent_id: Name
    epoch: Serial
    kernel_id: Name
    generation: Serial
    stream: Literal["prepare", "stdout", "stderr"]
    offset: Offset
    eof: bool = Field(default=False, description="the kernel's output is complete with this piece")


class LogsShipped(BaseModel):
    model_config = REPLY

    stored: bool = Field(description="false: the kernel is not this agent's (any more); stop shipping it")
    recorded: bool = Field(description=RECORDED)
