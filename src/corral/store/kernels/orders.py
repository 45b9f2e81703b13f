"""Kernels as agents and sweeps read them: an agent's orders, a kernel, who lives on an agent."""

from __future__ import annotations

from dataclasses import fields

from sqlalchemy import and_, bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import KernelRecord, OrderedKernel
from corral.domain.status import KERNEL_ON_AGENT, TERMINAL_SESSION
from corral.store import convert
from corral.store.tables import LIVE_KERNEL, agents, kernels, sessions

_ORDERS = (
    select(agents.c.epoch.label("agent_epoch"), *(kernels.c[f.name] for f in fields(OrderedKernel)))
    .select_from(
        agents.outerjoin(
            kernels,
            and_(
                kernels.c.agent_id == agents.c.id,
                LIVE_KERNEL,
                kernels.c.status.in_([str(s) for s in KERNEL_ON_AGENT]),
            ),
        )
    )
    .where(agents.c.id == bindparam("k_agent"))
    .order_by(kernels.c.session_id, kernels.c.rank)
)
_ORDER_STATUS = [f.name for f in fields(OrderedKernel)].index("status")


async def orders_for(conn: AsyncConnection, agent_id: str, epoch: int) -> list[OrderedKernel] | None:
    """The agent's kernels that it should hold a process (or preparation) for; None when `epoch`
    is not the agent's current one (fenced).  One query: every order poll asks."""
    rows = (await conn.execute(_ORDERS, {"k_agent": agent_id})).all()
    if not rows or rows[0][0] != epoch:
        return None
    mine = []
    for _, *values in rows:
        if values[0] is not None:  # the agent's row, joined to no kernel
            values[_ORDER_STATUS] = convert.kernel_status(values[_ORDER_STATUS])
            mine.append(OrderedKernel(*values))
    return mine


async def get(conn: AsyncConnection, kernel_id: str) -> KernelRecord | None:
    row = (await conn.execute(select(kernels).where(kernels.c.id == kernel_id))).first()
    return convert.kernel(row) if row else None


async def sessions_on(
    conn: AsyncConnection, agent_ids: list[str] | None = None, kernel_ids: list[str] | None = None
) -> list[tuple[str, str, str, int]]:
    """(session id, session status, agent id, rank) of live sessions' kernels on these agents, or of
    these kernels: who a sweep's history rows are about."""
    query = select(sessions.c.id, sessions.c.status, kernels.c.agent_id, kernels.c.rank).join(
        sessions, sessions.c.id == kernels.c.session_id
    )
    if agent_ids is not None:
        query = query.where(
            kernels.c.agent_id.in_(agent_ids),
            sessions.c.status.not_in([str(s) for s in TERMINAL_SESSION]),
            LIVE_KERNEL,
        )
    if kernel_ids is not None:
        query = query.where(kernels.c.id.in_(kernel_ids))
    rows = await conn.execute(query.order_by(sessions.c.id, kernels.c.rank))
    return [(sid, status, agent or "", rank) for sid, status, agent, rank in rows]
