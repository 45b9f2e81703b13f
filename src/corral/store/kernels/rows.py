"""What a report writes to its kernel's row, field by field, and the write itself."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import ColumnElement, bindparam, func, or_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import KernelReport
from corral.domain.status import TERMINAL_KERNEL, KernelStatus
from corral.store.tables import kernels

# What an agent may say of its kernel: how its preparation and its process went.  The rest
# (PENDING, SCHEDULED, TERMINATING, SUSPENDED) is the manager's to decide, never a report's.
AGENT_REPORTS = frozenset(
    {
        KernelStatus.PREPARING,
        KernelStatus.PULLING,
        KernelStatus.PREPARED,
        KernelStatus.CREATING,
        KernelStatus.RUNNING,
        *TERMINAL_KERNEL,
    }
)

# A terminal report's write, field by field (the guard was checked, and the rows locked, by
# reports._ending_kernels): the kernel's id, then the columns it sets.
END_FIELDS = (
    "id",
    "status",
    "exit_code",
    "signal",
    "oom_killed",
    "killed_by_corral",
    "image_failed",
    "agent_lost",
    "exited_at_ns",
    "termination_message",
    "error_record",
    "conditions",
    "detail",
    "logs_done",
    "master_port",
    "started",
)
# A rank 0's port, reported with its start.
PORT_FIELDS = ("id", "master_port")


def ending(report: KernelReport) -> tuple[Any, ...]:
    """One terminal report's values, in END_FIELDS' order."""
    return (
        report.kernel_id,
        str(report.status),
        report.exit_code,
        report.signal,
        report.oom_killed,
        report.killed_by_corral,
        report.image_failed,
        report.agent_lost,
        report.exited_at_ns,
        report.termination_message,
        report.error_record,
        ["oom_killed"] if report.oom_killed else [],
        report.detail,
        report.output_done,
        report.master_port,
        report.exit_code is not None or report.signal is not None,
    )


def suspended_detail(report: KernelReport) -> dict[str, Any]:
    """What a kernel of a session being suspended keeps of how its process ended (its detail)."""
    ended = {"exit_code": report.exit_code, "signal": report.signal, "oom_killed": report.oom_killed}
    return {**(report.detail or {}), "suspended": ended}


def new_value(field: str, new: ColumnElement[Any]) -> ColumnElement[Any]:
    """What a field's column becomes given its reported value `new`."""
    if field in ("logs_done", "started"):
        return or_(kernels.c[field], new)  # never back once done / once started
    if field == "master_port":
        return func.coalesce(new, kernels.c.master_port)  # an ending without a port keeps the one set
    return new


@cache
def named(fields: tuple[str, ...]) -> tuple[tuple[str, Any], ...]:
    """Each field's parameter name and type: prefixed, as an UPDATE reserves its columns' names."""
    return tuple(("k_" + f, kernels.c[f].type) for f in fields)


async def write_kernels(
    conn: AsyncConnection, fields: tuple[str, ...], rows: Sequence[tuple[Any, ...]], now: datetime | None
) -> None:
    """Each row's values (kernel id first) written to its kernel as `new_value` says, in one
    executemany; with `now`, its status changed then."""
    shared = {"k_now": now} if now is not None else {}
    names = [name for name, _ in named(fields)]
    params = [{**dict(zip(names, row, strict=True)), **shared} for row in rows]
    await conn.execute(_writes(fields, now is not None), params)


@cache
def _writes(fields: tuple[str, ...], timed: bool) -> Any:
    """write_kernels' statement, run once per row."""
    values: dict[str, Any] = {}
    for field, (name, type_) in zip(fields, named(fields), strict=True):
        values[field] = new_value(field, bindparam(name, type_=type_))
    key = values.pop("id")
    if timed:
        values["status_changed_at"] = bindparam("k_now", type_=kernels.c.status_changed_at.type)
    return update(kernels).where(kernels.c.id == key).values(**values)
