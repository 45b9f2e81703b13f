"""Failed attempts of a group that the retry engine has yet to decide on, with what they freed.

Armada requeues a failed job before new jobs at the same priority. Here an attempt's kernels free
their capacity as they end, and its retry is made later (the session ends in the next cycle, then
the retry engine decides): placement in between gave the freed capacity to a session queued after
the chain. From its first failed kernel until the decision, the attempt keeps its place in line
for what its ended kernels freed; its retry, made at once, then finds it. A failure older than
HOLD_SECONDS (a stuck engine) holds nothing: nothing hangs.

Read before the queue: a decision made after this read has its retry among the queue's sessions
read next, and the attempt's hold is then dropped (one chain holds its place once). Read after
it, a decision made between the two reads would leave the freed capacity to neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, exists, func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.resources import ResourceSlots
from corral.domain.spec import SessionType
from corral.store.tables import UNDECIDED, kernels, sessions

HOLD_SECONDS = 60.0

_FAILED = kernels.c.ended & (kernels.c.status.in_(["ERROR", "CANCELLED"]) | (kernels.c.exit_code != 0))
_ENDED = (
    select(func.count())
    .select_from(kernels)
    .where(kernels.c.session_id == sessions.c.id, kernels.c.ended)
    .scalar_subquery()
)
# The index's own condition, written as it is (ix_sessions_undecided): a planner proves the
# partial index usable from the literal text, not from bound parameters.
_UNDECIDED = select(
    sessions.c.id,
    sessions.c.root_session_id,
    sessions.c.priority,
    sessions.c.chain_submitted_at,
    sessions.c.resources,
    _ENDED,
).where(
    sessions.c.resource_group == bindparam("group"),
    text(UNDECIDED),
    sessions.c.termination_reason.is_(None),  # a cancel, deadline or preemption is not a failure
    sessions.c.type == str(SessionType.BATCH),
    # A kernel failed within HOLD_SECONDS (a long-running session's failure is as recent as that).
    exists().where(
        kernels.c.session_id == sessions.c.id, _FAILED, kernels.c.status_changed_at >= bindparam("since")
    ),
)


@dataclass(frozen=True)
class Undecided:
    """A failed attempt whose retry may come: its place in line and what its ended kernels freed."""

    key: tuple[int, datetime, str]
    """Its chain's place in the queue (sessions.queue_key)."""
    root: str
    """Its chain (root_session_id): a retry of it in the queue takes its place."""
    freed: list[ResourceSlots]
    """One entry a kernel that has ended."""


async def read(conn: AsyncConnection, resource_group: str, now: datetime) -> list[Undecided]:
    """In queue order."""
    since = now - timedelta(seconds=HOLD_SECONDS)
    rows = await conn.execute(_UNDECIDED, {"group": resource_group, "since": since})
    found = [
        Undecided((-priority, chain, sid), root, [ResourceSlots.from_json(resources)] * int(ended))
        for sid, root, priority, chain, resources, ended in rows
        if ended
    ]
    return sorted(found, key=lambda u: u.key)
