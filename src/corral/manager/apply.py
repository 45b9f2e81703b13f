"""A lifecycle handler's result judged and applied: the coordinator reads what the judgement needs,
judges it (domain/verdicts.py, pure) and writes the verdicts in the handler's transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import structlog

from corral.domain.history import HistoryRow
from corral.domain.placement import Placement
from corral.domain.records import Move, SessionRecord
from corral.domain.scheduling import SchedulingResult
from corral.domain.verdicts import Rules, Snapshot, Verdicts, judge, may_requeue
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult
from corral.store import journal, kernels, sessions
from corral.store.unit import Tx

log = structlog.get_logger("corral.coordinator")


def rules_of(handler: LifecycleHandler) -> Rules:
    """What the handler declares that its outcomes are judged by."""
    return Rules(
        handler.name,
        handler.status_transitions(),
        handler.failure_cause,
        handler.then,
        unrequested=handler.termination_requested is False,
    )


async def judged(
    ctx: HandlerContext, handler: LifecycleHandler, result: LifecycleResult, read: Sequence[SessionRecord]
) -> list[Move]:
    """Judge the result over the sessions `read` (its targets, then the overdue ones outside
    them) and apply the verdicts; returns the moves that won."""
    rules = rules_of(handler)
    requeueing = may_requeue(rules, result, read)
    running = await sessions.with_running_kernels(ctx.conn, requeueing) if requeueing else set()
    snapshot = Snapshot(
        rules,
        result,
        read,
        ctx.limits,
        ctx.now,
        moved=result.moved or {},
        finals=result.finals or {},
        running=frozenset(running),
    )
    return await apply(ctx.conn, handler.name, judge(snapshot), result.placements, ctx.now)


async def apply(
    conn: Tx,
    handler: str,
    verdicts: Verdicts,
    placements: Mapping[str, Placement] | None,
    now: datetime,
) -> list[Move]:
    """Write the verdicts: try counts first (a move starts its session's count again), then the
    moves with their rows, the placements of the moves that won, the stops, and the outcomes
    without a move.  Returns the moves that won; one that lost met a session moved since it was
    read, and its rows are not written."""
    await sessions.bump_tries(conn, list(verdicts.tries))
    won = await sessions.apply_moves(conn, list(verdicts.moves), now, list(verdicts.move_rows))
    if len(won) < len(verdicts.moves):
        log.info("lost race", handler=handler, lost=len(verdicts.moves) - len(won))
    if placements:
        won_ids = {m.session_id for m in won}
        placed = {sid: p for sid, p in placements.items() if sid in won_ids}
        await kernels.write_placements(conn, placed, now)
    for stop in verdicts.stops:
        await sessions.request_termination(conn, stop.session_id, stop.reason, stop.message, now)
    await journal.add_skips(conn, handler, _repeats(verdicts.skipped), now)
    await journal.add_collapsed(conn, handler, SchedulingResult.EXPIRED, _repeats(verdicts.expired), now)
    await journal.add_history(conn, list(verdicts.rows), now)
    return won


def _repeats(rows: Sequence[HistoryRow]) -> list[tuple[str, str, str]]:
    """Rows as journal.add_collapsed takes them: (session, status, message)."""
    return [(h.session_id, h.from_status, h.message) for h in rows]
