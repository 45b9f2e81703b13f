"""What an agent tells the manager of the deployment replicas it runs: the port each listens on
and the health its probes found (DESIGN §7: agents probe, the manager never does)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from corral.protocol.reports import Port
from corral.protocol.types import REPLY, REQUEST, Name, Serial, Text256


class ReplicaState(BaseModel):
    model_config = REQUEST

    session_id: Name
    port: Port
    running: bool = Field(description="its process has started (the start limit counts from then)")
    ok_in_a_row: int = Field(ge=0, le=2**31 - 1)
    failed_in_a_row: int = Field(ge=0, le=2**31 - 1)
    detail: Text256 = Field("", description="the last probe's result: a status code, or why it failed")
    probed: bool = Field(description="at least one probe has run (else the counts mean nothing yet)")


class ReplicasIn(BaseModel):
    model_config = REQUEST

    agent_id: Name
    epoch: Serial
    replicas: list[ReplicaState] = Field(max_length=10_000)


class ReplicasOut(BaseModel):
    model_config = REPLY

    recorded: int = Field(description="replicas whose route took the report")
