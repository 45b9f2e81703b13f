"""Kernels ending: kill orders, terminal moves the manager decides, and the allocations freed."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BindParameter, bindparam, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.status import TERMINAL_KERNEL, KernelStatus
from corral.domain.transitions import kernel_sources
from corral.store.tables import UNSHIPPED, allocations, kernels

# Statements on the path of every report, built once (building one cost more than running it).
NOW = bindparam("k_now", type_=kernels.c.status_changed_at.type)
IDS: BindParameter[list[str]] = bindparam("k_ids", expanding=True)
_RELEASE = (
    update(allocations)
    .where(allocations.c.kernel_id.in_(IDS), allocations.c.released_at.is_(None))
    .values(released_at=NOW)
)


async def release(conn: AsyncConnection, kernel_ids: list[str], now: datetime) -> None:
    if kernel_ids:
        await conn.execute(_RELEASE, {"k_ids": kernel_ids, "k_now": now})


async def order_kill(conn: AsyncConnection, kernel_ids: list[str], grace: float | None = None) -> None:
    if kernel_ids:
        await conn.execute(
            update(kernels).where(kernels.c.id.in_(kernel_ids)).values(kill_requested=True, kill_grace=grace)
        )


async def close_output_of(conn: AsyncConnection, agent_id: str) -> None:
    """The agent left or a new incarnation registered: it will ship nothing more of the kernels that
    had ended, so their output is as complete as it will be.  Only rows not marked yet are written
    (and read, by the partial index of kernels on agents), not every kernel the agent ever ran."""
    await conn.execute(
        update(kernels)
        .where(
            kernels.c.agent_id == agent_id,
            kernels.c.status.in_([str(s) for s in TERMINAL_KERNEL]),
            UNSHIPPED,
        )
        .values(logs_done=True)
    )


async def order_force_kill(conn: AsyncConnection, kernel_ids: list[str]) -> None:
    """Escalation: the agent kills these at once (SIGKILL), without a grace period."""
    if kernel_ids:
        await conn.execute(
            update(kernels).where(kernels.c.id.in_(kernel_ids)).values(kill_requested=True, kill_forced=True)
        )


async def end_kernels(
    conn: AsyncConnection, kernel_ids: list[str], status: KernelStatus, now: datetime, **values: Any
) -> list[str]:
    """Move kernels to a terminal status (never handed out, or declared gone) and free capacity."""
    if not kernel_ids:
        return []
    result = await conn.execute(
        update(kernels)
        .where(kernels.c.id.in_(kernel_ids), kernels.c.status.in_([str(s) for s in kernel_sources(status)]))
        .values(status=str(status), status_changed_at=now, **values)
        .returning(kernels.c.id)
    )
    ended = list(result.scalars())
    await release(conn, ended, now)
    return ended


async def move_to_terminating(conn: AsyncConnection, kernel_ids: list[str], now: datetime) -> None:
    if kernel_ids:
        await conn.execute(
            update(kernels)
            .where(
                kernels.c.id.in_(kernel_ids),
                kernels.c.status.in_([str(s) for s in kernel_sources(KernelStatus.TERMINATING)]),
            )
            .values(status=str(KernelStatus.TERMINATING), status_changed_at=now)
        )
