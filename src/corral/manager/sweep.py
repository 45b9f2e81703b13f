"""Outside inputs the loop records each cycle: lost agents, fenced kernels, deadlines.

Each writes history rows like a handler, so `session history` says what happened and when.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

import structlog

from corral.domain.cause import TerminationReason
from corral.domain.history import HistoryRow
from corral.domain.scheduling import SchedulingResult
from corral.domain.status import KernelStatus
from corral.settings import SchedulerSettings
from corral.store import agents, journal, kernels, leases, sessions
from corral.store.db import reading
from corral.store.unit import Engine, Tx

log = structlog.get_logger("corral.sweep")

AGENT_LOST = "AgentLost"
DECLARED_GONE = "KernelsDeclaredGone"


async def _note(
    conn: Tx, about: list[tuple[str, str, str, int]], handler: str, say: str, now: datetime
) -> None:
    """One history row per session: `say` formatted with the agent and the ranks concerned."""
    ranks: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for sid, status, agent, rank in about:
        ranks[(sid, status, agent)].append(rank)
    rows = [
        HistoryRow(
            sid, handler, str(SchedulingResult.SUCCESS), status, None, say.format(agent=agent, ranks=r)
        )
        for (sid, status, agent), r in ranks.items()
    ]
    await journal.add_history(conn, rows, now)


async def sweep(
    engine: Engine,
    resource_group: str,
    cfg: SchedulerSettings,
    now: datetime,
    holding: leases.Holding | None = None,
) -> int:
    """Returns how many things it recorded (so the loop knows to run the handlers)."""
    changed = 0
    lease = timedelta(seconds=cfg.agent_lease)
    # Fencing invariant: declared gone only after the agent has certainly killed them.  It kills
    # at fence_timeout after the send time of its last answered request; we received that request
    # no earlier, and wait fence_timeout + margin from it.
    silent = timedelta(seconds=cfg.fence_timeout + cfg.fence_margin)
    async with reading(engine) as conn:
        # What becomes due after this read is the next sweep's: later, never earlier.
        if not await sessions.sweep_due(conn, resource_group, lease, silent, now):
            return 0
    async with leases.writes(engine, holding)() as conn:
        lost = await agents.mark_lost(conn, lease, now)
        if lost:
            # Nothing is killed yet: a LOST agent that comes back before the fence keeps its kernels.
            log.warning("agents lost", agents=lost)
            await _note(
                conn,
                await kernels.sessions_on(conn, agent_ids=lost),
                AGENT_LOST,
                f"agent {{agent}} lost: no contact for {cfg.agent_lease}s; kernels (ranks {{ranks}}) are"
                f" kept until the fence ({cfg.fence_timeout}s + {cfg.fence_margin}s margin)",
                now,
            )
            changed += len(lost)
        fenced = await agents.fence_expired(conn, silent, now)
        if fenced:
            gone = await agents.kernels_held_by(conn, fenced)
            log.warning("kernels of fenced agents declared gone", agents=fenced, kernels=len(gone))
            about = await kernels.sessions_on(conn, kernel_ids=gone)
            beats = await agents.heartbeats(conn, fenced)
            for agent_id in fenced:
                # Stamped with the agent's last heartbeat: the node that died failed no later, so the
                # root cause goes to it, not to the peers that lost it a moment after.
                last = beats.get(agent_id)
                await kernels.end_kernels(
                    conn,
                    await agents.kernels_held_by(conn, [agent_id]),
                    KernelStatus.ERROR,
                    now,
                    agent_lost=True,
                    exited_at_ns=int(last.timestamp() * 1_000_000_000) if last else None,
                    termination_message="agent lost past the fence timeout",
                )
            await _note(
                conn,
                about,
                DECLARED_GONE,
                f"kernels (ranks {{ranks}}) on agent {{agent}} declared gone: no contact for more than"
                f" {cfg.fence_timeout}s + {cfg.fence_margin}s margin, so the agent has killed them",
                now,
            )
            changed += len(gone)
        for s in await sessions.due_deadlines(conn, resource_group, now):
            if s.spec.timeout and s.started_at and now - s.started_at > timedelta(seconds=s.spec.timeout):
                await sessions.request_termination(
                    conn, s.id, TerminationReason.DEADLINE_EXCEEDED, f"timeout {s.spec.timeout}s elapsed", now
                )
                changed += 1
    return changed
