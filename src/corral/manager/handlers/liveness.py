"""What handlers that hand orders to agents share: finding lost agents, judging the hand-over."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.records import SessionRecord
from corral.domain.scheduling import Failure
from corral.domain.status import KERNEL_NOT_STARTED, SessionStatus
from corral.manager.handlers.base import LifecycleResult
from corral.store import agents
from corral.store.unit import Tx


async def lost_agents_of(conn: Tx, targets: Sequence[SessionRecord]) -> set[str]:
    """Agents of these sessions' kernels that are not ALIVE (or no longer registered)."""
    wanted = {k.agent_id for s in targets for k in s.kernels if k.agent_id}
    if not wanted:
        return set()
    return wanted - await agents.alive_ids(conn)


async def hand_over(
    conn: Tx,
    targets: Sequence[SessionRecord],
    ready: SessionStatus,
    message: str,
    started_alone: str | None = None,
) -> LifecycleResult:
    """Orders are kernel rows that agents pull, so handing them over is the transaction's commit
    and a slow agent never blocks the cycle.  A session whose agent is lost fails instead; sessions
    already handed over are left alone (only their time in status can expire them)."""
    result = LifecycleResult()
    lost = await lost_agents_of(conn, targets)
    for s in targets:
        gone = sorted({k.agent_id for k in s.kernels if k.agent_id in lost})
        if gone:
            result.failures.append(Failure(s.id, "agent not reachable: " + ", ".join(gone)))
        elif s.status is ready:
            alone = started_alone if all(k.status not in KERNEL_NOT_STARTED for k in s.kernels) else None
            result.success(s.id, alone or message)
    return result
