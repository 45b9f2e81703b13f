"""One handler's run: its targets read, the handler executed, its outcome judged and applied, in
one transaction (a promotion: one guarded statement per move)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from corral.domain.judge import PhaseLimits
from corral.domain.records import Move, SessionRecord
from corral.domain.status import SessionStatus
from corral.manager import apply, promotions, targets
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, SessionPromotionHandler
from corral.store import leases, sessions
from corral.store.unit import Engine

Handler = LifecycleHandler | SessionPromotionHandler


class HandlerRuns:
    """Runs handlers for one resource group, counting the termination requests they write."""

    def __init__(self, engine: Engine, resource_group: str, begin: leases.Begin | None = None) -> None:
        self._engine = engine
        self._begin = begin or leases.writes(engine, None)
        self._rg = resource_group
        self.requested = 0
        """Termination requests handlers wrote (preemption) since the count was last reset."""

    async def run(
        self,
        handler: Handler,
        now: datetime,
        limits: PhaseLimits,
        preemption: Mapping[str, Any],
        timed: bool = True,
        present: Collection[SessionStatus] | None = None,
    ) -> tuple[list[Move], bool, int]:
        """The moves that won, whether anything changed (moves, or orders without moves), and how
        many targets it read.  Its targets are read only in the statuses `present` (the cycle's
        live statuses, and PENDING): a queue read seeks each status by index, a round trip each."""
        wanted = handler.target_session_statuses
        statuses = wanted if present is None else (wanted & frozenset(present)) or wanted
        changed_before = None
        if handler.expiry_only:
            [status] = handler.target_session_statuses
            limit = limits.timeouts.get(status)
            if limit is None:
                return [], False, 0
            changed_before = now - limit
        window, page = handler.queue_window, handler.queue_page or handler.queue_window
        if isinstance(handler, SessionPromotionHandler) and handler.decided_by_kernel_statuses:
            return await self._promote_by_status(handler, now)
        async with self._begin() as conn:

            async def read(size: int | None, after: sessions.QueueKey | None = None) -> list[SessionRecord]:
                return await sessions.for_handler(
                    conn,
                    self._rg,
                    statuses,
                    **targets.filters(handler),
                    queue_window=size,
                    ready_at=now if window is not None else None,
                    with_kernels=handler.with_kernels,
                    changed_before=changed_before,
                    after=after,
                )

            before = None
            if isinstance(handler, LifecycleHandler):
                before = await handler.read_before_targets(conn, self._rg, now)
            found = await read(page)
            pages, asked = [found], [page or 0]

            async def more(wanted: int = 0) -> list[SessionRecord]:
                """The window's next `wanted` sessions (a page if none said), or nothing once the
                window (or the queue) is read."""
                read_so_far = sum(map(len, pages))
                if window is None or page is None or len(pages[-1]) < asked[-1] or read_so_far >= window:
                    return []
                asked.append(min(wanted if wanted > 0 else page, window - read_so_far))
                pages.append(await read(asked[-1], sessions.queue_key(pages[-1][-1])))
                return pages[-1]

            overdue = await targets.overdue(conn, self._rg, handler, limits, found, now, timed)
            if not found and not overdue:
                return [], False, 0
            ctx = HandlerContext(
                conn, now, self._rg, limits, more if page != window else None, preemption, before
            )
            if isinstance(handler, SessionPromotionHandler):
                moves, history = promotions.promote(handler, [s for s in found if handler.matches(s)])
                won = await sessions.apply_moves(conn, moves, now, history)
                return won, bool(won), len(found)
            result = await handler.execute(ctx, found)
            self.requested += result.requested
            found = [s for p in pages for s in p]
            seen = {s.id for s in found}
            overdue = [s for s in overdue if s.id not in seen]  # reached by a later page
            won = await apply.judged(ctx, handler, result, [*found, *overdue])
        return won, bool(won or result.successes), len(found)

    async def _promote_by_status(
        self, handler: SessionPromotionHandler, now: datetime
    ) -> tuple[list[Move], bool, int]:
        """`run` for a promotion its targets' read decides alone: the same moves and history from
        the targets' ids and statuses, so its sessions are read without their columns and kernels."""
        async with self._begin() as conn:
            found = await targets.target_ids(conn, self._rg, handler)
            if not found:
                return [], False, 0
            moves, history = promotions.promote_found(handler, found)
            won = await sessions.apply_moves(conn, moves, now, history)
        return won, bool(won), len(found)
