"""Reading a session's output: visibility, byte-bounded pages, and when it is complete."""

from __future__ import annotations

from dataclasses import dataclass

from corral.domain.records import KernelRecord, Principal, SessionRecord
from corral.domain.status import TERMINAL_SESSION
from corral.services import sessions as session_service
from corral.store import agents, logs
from corral.store.db import reading
from corral.store.logs import LogChunk
from corral.store.unit import Engine

PAGE_BYTES = 4 << 20


@dataclass(frozen=True)
class LogPage:
    """A page of output, the cursor for the next one, and whether nothing more will come."""

    chunks: list[LogChunk]
    next: int
    complete: bool
    dropped: int


def _output_closed(session: SessionRecord, alive: set[str]) -> bool:
    """No more output can arrive: the session ended and each kernel's output is closed."""
    ended = session.status in TERMINAL_SESSION
    return ended and all(kernel_closed(session, k, alive) for k in session.kernels)


def kernel_closed(session: SessionRecord, k: KernelRecord, alive: set[str]) -> bool:
    """No more of this kernel's output can arrive: the session ended and the kernel's output was
    shipped to the end, or it never ran nor failed to build its image (whose build output is its
    log), or its agent is gone (a later incarnation marks what it will never ship)."""
    if session.status not in TERMINAL_SESSION:
        return False
    return k.logs_done or not (k.started or k.image_failed) or (k.agent_id not in alive)


async def read(
    engine: Engine, who: Principal, session_id: str, after: int, max_bytes: int = PAGE_BYTES
) -> LogPage:
    # The session first: if its output is complete now, every chunk was stored before.
    session = await session_service.get(engine, who, session_id)
    async with reading(engine) as conn:
        alive = await agents.alive_ids(conn) if session.status in TERMINAL_SESSION else set()
        chunks = await logs.read(conn, session.id, after, max_bytes)
    closed = _output_closed(session, alive)
    return LogPage(
        chunks=chunks,
        next=chunks[-1].id if chunks else after,
        complete=closed and not chunks,
        dropped=sum(k.log_dropped for k in session.kernels),
    )
