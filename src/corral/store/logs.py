"""Kernel logs shipped by agents, so they outlive the agent."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store.tables import kernel_logs, kernels


@dataclass(frozen=True)
class LogChunk:
    """A piece of one kernel's stdout or stderr."""

    id: int
    kernel_id: str
    rank: int
    stream: str
    offset: int
    data: str


async def append(
    conn: AsyncConnection, agent_id: str, chunks: Sequence[tuple[str, str, int, str]], now: datetime
) -> None:
    """Chunks of (kernel_id, stream, offset, data); a chunk already stored (a resend) is ignored."""
    if not chunks:
        return
    ids = {c[0] for c in chunks}
    owned = await conn.execute(
        select(kernels.c.id, kernels.c.session_id).where(
            kernels.c.id.in_(ids), kernels.c.agent_id == agent_id
        )
    )
    session_of = {kid: sid for kid, sid in owned.tuples()}
    stored = await conn.execute(
        select(kernel_logs.c.kernel_id, kernel_logs.c.stream, kernel_logs.c.offset).where(
            kernel_logs.c.kernel_id.in_(ids)
        )
    )
    have = set(stored.tuples())
    rows = [
        {"session_id": session_of[k], "kernel_id": k, "stream": s, "offset": o, "data": d, "created_at": now}
        for k, s, o, d in chunks
        if k in session_of and (k, s, o) not in have and d
    ]
    if rows:
        await conn.execute(insert(kernel_logs), rows)


async def read(conn: AsyncConnection, session_id: str, after: int = 0, limit: int = 1000) -> list[LogChunk]:
    rows = await conn.execute(
        select(
            kernel_logs.c.id,
            kernel_logs.c.kernel_id,
            kernels.c.rank,
            kernel_logs.c.stream,
            kernel_logs.c.offset,
            kernel_logs.c.data,
        )
        .join(kernels, kernels.c.id == kernel_logs.c.kernel_id)
        .where(kernel_logs.c.session_id == session_id, kernel_logs.c.id > after)
        .order_by(kernel_logs.c.id)
        .limit(limit)
    )
    return [LogChunk(*r) for r in rows.tuples()]
