"""Kernel logs shipped by agents, as bytes, so they outlive the agent; capped per session."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, case, delete, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.text import split_utf8
from corral.store.tables import kernel_logs, kernels

ROW_BYTES = 1 << 20
DROPPED_MAX = 2**62
"""Stored rows are at most this big, so a page of logs is bounded in bytes."""


@dataclass(frozen=True)
class LogChunk:
    """A piece of one kernel's stdout or stderr."""

    id: int
    kernel_id: str
    rank: int
    stream: str
    offset: int
    data: bytes


@dataclass(frozen=True)
class LogTarget:
    """The kernel a shipment is about, as the store knows it."""

    session_id: str
    generation: int


async def target(conn: AsyncConnection, agent_id: str, kernel_id: str) -> LogTarget | None:
    """The kernel if this agent holds it (any status: logs may arrive after its end)."""
    row = (
        await conn.execute(
            select(kernels.c.session_id, kernels.c.generation).where(
                kernels.c.id == kernel_id, kernels.c.agent_id == agent_id
            )
        )
    ).first()
    return LogTarget(row.session_id, row.generation) if row else None


async def append(
    conn: AsyncConnection,
    session_id: str,
    kernel_id: str,
    stream: str,
    offset: int,
    data: bytes,
    now: datetime,
    generation: int = 0,
) -> None:
    """Store bytes at `offset` of a stream of one placement (`generation`: a resumed kernel writes
    new files, from offset 0 again); a resend of what is already stored is ignored, and a gap
    before `offset` (the agent skipped output the cap would drop) is counted as dropped."""
    stored = await conn.execute(
        select(func.max(kernel_logs.c.offset + kernel_logs.c.size)).where(
            kernel_logs.c.kernel_id == kernel_id,
            kernel_logs.c.generation == generation,
            kernel_logs.c.stream == stream,
        )
    )
    end = stored.scalar() or 0
    if offset + len(data) <= end:
        return
    if offset < end:
        data, offset = data[end - offset :], end
    await record_dropped(conn, kernel_id, offset - end)
    rows = []
    for piece in split_utf8(data, ROW_BYTES):
        rows.append(
            {
                "session_id": session_id,
                "kernel_id": kernel_id,
                "stream": stream,
                "generation": generation,
                "offset": offset,
                "data": piece,
                "size": len(piece),
                "created_at": now,
            }
        )
        offset += len(piece)
    if rows:
        await conn.execute(insert(kernel_logs), rows)


async def record_dropped(conn: AsyncConnection, kernel_id: str, dropped: int) -> None:
    if dropped:
        # Saturating: whatever an agent sends, the counter stays a valid 64-bit integer.
        so_far = kernels.c.log_dropped
        more = case((so_far > DROPPED_MAX - dropped, DROPPED_MAX), else_=so_far + dropped)
        await conn.execute(update(kernels).where(kernels.c.id == kernel_id).values(log_dropped=more))


async def enforce_cap(conn: AsyncConnection, session_id: str, cap: int) -> None:
    """Keep the newest `cap` bytes of a session's output; the oldest rows go, and are counted."""
    total = (
        await conn.execute(select(func.sum(kernel_logs.c.size)).where(kernel_logs.c.session_id == session_id))
    ).scalar() or 0
    if total <= cap:
        return
    rows = await conn.execute(
        select(kernel_logs.c.id, kernel_logs.c.kernel_id, kernel_logs.c.size)
        .where(kernel_logs.c.session_id == session_id)
        .order_by(kernel_logs.c.id)
    )
    drop: list[int] = []
    dropped: dict[str, int] = {}
    for row_id, kernel_id, size in rows:
        if total <= cap:
            break
        drop.append(row_id)
        dropped[kernel_id] = dropped.get(kernel_id, 0) + size
        total -= size
    await conn.execute(delete(kernel_logs).where(kernel_logs.c.id.in_(drop)))
    for kernel_id, size in dropped.items():
        await record_dropped(conn, kernel_id, size)


async def mark_done(conn: AsyncConnection, kernel_id: str) -> None:
    await conn.execute(update(kernels).where(kernels.c.id == kernel_id).values(logs_done=True))


async def read(
    conn: AsyncConnection, session_id: str, after: int = 0, max_bytes: int = 4 * ROW_BYTES
) -> list[LogChunk]:
    """Chunks after the cursor, at most `max_bytes` (always at least one chunk if any)."""
    sizes = await conn.execute(
        select(kernel_logs.c.id, kernel_logs.c.size)
        .where(kernel_logs.c.session_id == session_id, kernel_logs.c.id > after)
        .order_by(kernel_logs.c.id)
        .limit(10_000)
    )
    last, total = None, 0
    for row_id, size in sizes:
        if last is not None and total + size > max_bytes:
            break
        last, total = row_id, total + size
    if last is None:
        return []
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
        .where(kernel_logs.c.session_id == session_id, kernel_logs.c.id > after, kernel_logs.c.id <= last)
        .order_by(kernel_logs.c.id)
    )
    return [LogChunk(*r) for r in rows]


@dataclass(frozen=True)
class KernelChunk:
    """A stored piece of one kernel's output, in its placement (`generation`)."""

    generation: int
    stream: str
    offset: int
    data: bytes


async def read_kernel(
    conn: AsyncConnection, kernel_id: str, generation: int, read: Mapping[str, int], max_bytes: int
) -> list[KernelChunk]:
    """The rows of one kernel's output a reader at `read` (bytes of each stream read in placement
    `generation`) has not read: the rest of those streams, a row holding the cursor whole (the
    caller cuts it), and every row of a later placement; in row order, which is commit order
    (ship_logs), at most `max_bytes` (always one row if any)."""
    c = kernel_logs.c
    streams = list(read)
    unread = [and_(c.generation > generation, c.stream.in_(streams))]
    for stream, at in read.items():
        # A row holds at most ROW_BYTES, so one reaching past `at` starts after at - ROW_BYTES:
        # the scan of the (kernel, generation, stream, offset) index stays on the unread rows.
        ahead = and_(c.offset > at - ROW_BYTES, c.offset + c.size > at)
        unread.append(and_(c.generation == generation, c.stream == stream, ahead))
    where = and_(c.kernel_id == kernel_id, or_(*unread))
    sizes = await conn.execute(select(c.id, c.size).where(where).order_by(c.id).limit(10_000))
    last, total = None, 0
    for row_id, size in sizes:
        if last is not None and total + size > max_bytes:
            break
        last, total = row_id, total + size
    if last is None:
        return []
    rows = await conn.execute(
        select(c.generation, c.stream, c.offset, c.data).where(where, c.id <= last).order_by(c.id)
    )
    return [KernelChunk(*r) for r in rows]
