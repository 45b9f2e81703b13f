"""Reports: the agent tells the manager of its kernels' transitions, in order, in batches.

The agent builds a `KernelReportIn` for each transition; the manager turns each into the domain's
`KernelReport` once, at its edge (`to_record`), and nothing past that edge sees the wire model.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from corral.domain.records import KernelReport
from corral.protocol.messages import RECORDED, Status
from corral.protocol.types import REPLY, REQUEST, Int32, Int64, JsonObject, LongText, Name, Serial

Port = Annotated[int, Field(ge=1, le=65535)]
DETAILS = frozenset({"termination_message", "error_record", "detail"})
"""A report's fields that explain a transition, as opposed to those that make it."""


class KernelReportIn(BaseModel):
    """One transition of one kernel (one placement of it: `generation`)."""

    model_config = REQUEST

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
    master_port: Port | None = None
    termination_message: LongText | None = None
    error_record: JsonObject | None = None
    detail: JsonObject = Field(default_factory=dict)
    output_done: bool = Field(
        default=False, description="all of the kernel's output has been shipped already"
    )

    def without_details(self) -> KernelReportIn:
        """What ends the kernel, without the texts that explain it: what the agent sends again
        when the manager refused a batch (resending the same one cannot help)."""
        return self.model_copy(
            update={
                name: type(self).model_fields[name].get_default(call_default_factory=True) for name in DETAILS
            }
        )


def to_record(report: KernelReportIn) -> KernelReport:
    """The domain's record of a report: the manager's one conversion of it."""
    return KernelReport(
        kernel_id=report.kernel_id,
        status=report.status,
        generation=report.generation,
        exit_code=report.exit_code,
        signal=report.signal,
        oom_killed=report.oom_killed,
        killed_by_corral=report.killed_by_corral,
        image_failed=report.image_failed,
        agent_lost=report.agent_lost,
        exited_at_ns=report.exited_at_ns,
        master_port=report.master_port,
        termination_message=report.termination_message,
        error_record=report.error_record,
        detail=report.detail,
        output_done=report.output_done,
    )


class ReportsIn(BaseModel):
    model_config = REQUEST

    agent_id: Name
    epoch: Serial
    reports: list[KernelReportIn] = Field(default_factory=list, max_length=100_000)


class ReportsOut(BaseModel):
    model_config = REPLY

    applied: int
    refused: list[str]
    recorded: bool = Field(description=RECORDED)
