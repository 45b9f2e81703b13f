"""The coordinator: runs each handler in its own transaction and alone judges the outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import structlog

from corral.domain.cause import TerminationReason
from corral.domain.final import FinalVerdict
from corral.domain.judge import PhaseLimits, for_group, gives_up, is_expired, reschedules_exhausted
from corral.domain.records import Move, SessionRecord
from corral.domain.scheduling import KernelMatchType, SchedulingResult, TransitionStatus
from corral.domain.status import TERMINAL_SESSION, KernelStatus, SessionResult, SessionStatus
from corral.manager.handlers.base import (
    HandlerContext,
    LifecycleHandler,
    LifecycleResult,
    SessionPromotionHandler,
    Step,
)
from corral.store import journal, kernels, preemption, sessions
from corral.store.db import reading, statements, transaction
from corral.store.unit import Engine, Tx

log = structlog.get_logger("corral.coordinator")

Handler = LifecycleHandler | SessionPromotionHandler
History = list[journal.HistoryRow]


def _verdict_values(v: FinalVerdict) -> tuple[tuple[str, Any], ...]:
    return (
        ("result", str(v.result)),
        ("cause", str(v.cause) if v.cause else None),
        ("exit_code", v.exit_code),
        ("root_rank", v.root_rank),
    )


def _may_have_targets(handler: Handler, present: set[tuple[SessionStatus, bool]]) -> bool:
    wanted = handler.termination_requested
    requested = (True, False) if wanted is None else (wanted,)
    return any((s, r) in present for s in handler.target_session_statuses for r in requested)


def _present_kernels(handler: Handler) -> frozenset[KernelStatus] | None:
    """A promotion on ANY kernel status: only sessions having such a kernel (filtered in SQL)."""
    if isinstance(handler, SessionPromotionHandler) and handler.match_type is KernelMatchType.ANY:
        return handler.check_kernel_statuses
    return None


def _absent_kernels(handler: Handler) -> frozenset[KernelStatus] | None:
    """A promotion on NOT_ANY: only sessions with no such kernel (filtered in SQL)."""
    if isinstance(handler, SessionPromotionHandler) and handler.match_type is KernelMatchType.NOT_ANY:
        return handler.check_kernel_statuses
    return None


def _filters(handler: Handler) -> dict[str, Any]:
    """What a handler's targets are filtered by, besides their status (one for every read of them)."""
    return {
        "kernel_statuses": handler.target_kernel_statuses or _present_kernels(handler),
        "absent_kernel_statuses": _absent_kernels(handler),
        "terminating_requested": handler.termination_requested,
        "lost_agent_only": handler.lost_agent_only,
        "failed_kernel_only": handler.failed_kernel_only,
        "healthy_only": handler.healthy_only,
    }


# Statuses a lifecycle handler moves a session to when it may free capacity or change the queue.
_ROOM = frozenset({SessionStatus.PENDING, SessionStatus.SUSPENDED}) | TERMINAL_SESSION


def _made_room(handler: Handler, won: Sequence[Move], acted: bool) -> bool:
    """Whether placement may now do more.  Promotions never free capacity (kernels' allocations
    are freed by their reports, which wake placement themselves)."""
    if isinstance(handler, SessionPromotionHandler):
        return False
    return (acted and handler.frees_room) or any(m.dst in _ROOM for m in won)


_RUNS = "some of its kernels may already run: stopped, not re-queued"


def _recorded(handler: SessionPromotionHandler) -> tuple[str, str]:
    """The handler name and message of a promotion's final move's history row."""
    step = handler.last_step
    return (step.handler, step.message) if step else (handler.name, "")


def _ahead(handler: SessionPromotionHandler, src: SessionStatus) -> tuple[Step, ...]:
    """The `through` steps a promotion's move from `src` passes: those after `src` (all of them
    from a status not on that path)."""
    path = [step.status for step in handler.through]
    return handler.through[path.index(src) + 1 :] if src in path else handler.through


def _via(handler: SessionPromotionHandler, src: SessionStatus) -> tuple[SessionStatus, ...]:
    return tuple(step.status for step in _ahead(handler, src))


def _passed(session_id: str, kind: SchedulingResult, src: SessionStatus, steps: Sequence[Step]) -> History:
    """The history rows of a move passing `steps` from `src`: one per step, under the handler
    whose rule it is."""
    froms = (src, *(step.status for step in steps))
    return [
        (session_id, step.handler, kind, a, step.status, step.message)
        for a, step in zip(froms, steps, strict=False)
    ]


def _rows(handler: SessionPromotionHandler, m: Move, name: str, message: str) -> History:
    """A promotion's history rows for one move: one per status passed, then the final one
    (`name`, `message`)."""
    passed = _passed(m.session_id, SchedulingResult.SUCCESS, m.src, _ahead(handler, m.src))
    return [*passed, (m.session_id, name, SchedulingResult.SUCCESS, (m.src, *m.via)[-1], m.dst, message)]


@dataclass
class _Cycle:
    """What one cycle knows as its handlers run."""

    present: set[tuple[SessionStatus, bool]]
    """(status, termination requested) of the group's live sessions, as moves change them."""
    room: bool
    """Whether placement may do more than when it last ran."""
    placed: bool = False
    """Placement ran this cycle."""
    made: bool = False
    """A handler made room since placement last ran."""
    moved: int = 0
    """Sessions moved so far."""
    handed: int = 0
    """Of those, sessions handed to their agents, waiting for them (`awaits_agents`)."""
    flowing: bool = True
    """Room signalled is worth a placement run between handlers: none such has placed nothing this
    cycle, and placement has not failed (a queue whose head does not fit waits for its own place)."""
    more: bool = False
    """Placement left room it did not use this cycle (see _step): the next cycle places more."""


class Coordinator:
    """Applies handlers' declared transitions for one resource group."""

    def __init__(
        self,
        engine: Engine,
        resource_group: str,
        handlers: Sequence[Handler],
        limits: PhaseLimits,
        clock: Callable[[], datetime],
        on_change: Callable[[], Awaitable[None]] | None = None,
        on_ended: Callable[[], None] | None = None,
        room_version: Callable[[], int] = lambda: 0,
    ) -> None:
        self._engine = engine
        self._rg = resource_group
        self._handlers = list(handlers)
        self._base_limits = self._limits = limits
        self._preemption: dict[str, Any] = {}
        self._requested = 0
        self._clock = clock
        self._on_change = on_change
        self._on_ended = on_ended
        self._room_version = room_version
        self.placed_at = -1
        """The room version (`room_version`) when placement last ran: room signalled since is new."""
        self.room_left = True
        """Room was made after placement ran in the last cycle: the next one places again."""
        self.left_out = False
        """The last cycle left placement out (no room) while sessions wait."""
        self.busy = 0
        """What the last cycle did that calls for the next one at once: its moves and requests,
        but not the sessions it handed to their agents (a report wakes a cycle for them), and
        whether placement left room (`_Cycle.more`)."""
        self._found_none: set[str] = set()
        """Handlers whose last read found no target (see _nothing_to_do)."""

    async def run_cycle(self, timed: bool = True, room: bool = True) -> int:
        """Every handler once; returns how many sessions changed status.  Without `timed`, the
        handlers that only bound a status's time are left for a cycle that has it (they judge in
        seconds; a cycle woken by an agent's report has no need of them).  Without `room` (nothing
        since placement last ran freed capacity or changed the queue), placement runs only if room
        is made before it; `room_left` says whether room was left after it.

        Room signalled since placement last ran (`room_version`: under load, agents' reports of
        kernels ending, many a second) is placed first: a freed CPU waited for the promotions, 63
        ms on average.  It is placed again after any handler once more was signalled: with
        placement only at the cycle's start and its own place, the CPUs of a busy PostgreSQL
        installation (cycles of 100-150 ms) stood empty a third of the time (bench/throughput.py).
        Once such a run places nothing (the queue's head does not fit) or placement fails, the
        cycle stops doing so: a full cluster costs one placement run a cycle more than before at
        most, a failing placement none.  Placement runs at its own place if the handlers before it
        made room, or room was signalled since it last ran.  The room a placement leaves itself (a
        full window, victims asked to stop) is for a later run: one run reads one window and
        chooses at most one preemptor."""
        async with reading(self._engine) as conn:
            present, group = await sessions.live_statuses(conn, self._rg)
        self._use_group(group)
        self._requested = 0
        cycle = _Cycle(present, room)
        self.left_out = False
        placement = next((h for h in self._handlers if h.waits_for_room), None)

        async def place_signalled(between: bool) -> None:
            if placement is not None and self._signalled() and (cycle.flowing or not between):
                cycle.room = True
                moved = cycle.moved
                await self._place(placement, cycle, timed)
                if between and cycle.moved == moved:
                    cycle.flowing = False

        await place_signalled(between=False)
        for handler in self._handlers:
            if handler is not placement:
                await self._step(handler, cycle, timed)
                await place_signalled(between=True)
            elif not cycle.placed:
                await self._place(handler, cycle, timed)  # if room, or in a timed cycle
            elif cycle.made or self._signalled():
                cycle.room = True
                await self._place(handler, cycle, timed)
        self.room_left = cycle.room
        self.busy = cycle.moved - cycle.handed + self._requested + int(cycle.more)
        # Requests written this cycle (a preemptor's victims) count as work: the loop runs the next
        # cycle at once instead of waiting its interval to stop them.
        return cycle.moved + self._requested

    def _signalled(self) -> bool:
        """Room was signalled since placement last ran."""
        return self._room_version() != self.placed_at

    async def _place(self, handler: Handler, cycle: _Cycle, timed: bool) -> None:
        """Placement's turn: one that fails is logged and the cycle goes on without it (what it
        wrote is rolled back, its room signal stays unseen).  It runs before the promotions and
        stops, and a session in the queue that breaks it must not stop every running one from
        ending."""
        try:
            await self._step(handler, cycle, timed)
        except Exception:
            log.exception("placement failed; the cycle goes on", resource_group=self._rg)
            cycle.room = cycle.made = False  # tried again at the cycle's end if a later handler makes room
            cycle.flowing = False

    async def _step(self, handler: Handler, cycle: _Cycle, timed: bool) -> None:
        """One handler's turn in a cycle."""
        if not _may_have_targets(handler, cycle.present) or (handler.expiry_only and not timed):
            return  # a handler with nothing to look at costs no transaction
        if handler.waits_for_room:
            # Left out: placed all it could last time, and nothing has changed since.
            self.left_out = not cycle.room and not timed
            if self.left_out:
                return
        requested = self._requested
        version = self._room_version()
        won: list[Move] = []
        acted, read = False, 0
        if not await self._nothing_to_do(handler, timed):
            # PENDING is never left out: submissions and retries enter it while the cycle runs.
            present = {status for status, _ in cycle.present} | {SessionStatus.PENDING}
            won, acted, read = await self._run(handler, timed, present)
        if read:
            self._found_none.discard(handler.name)
        else:
            self._found_none.add(handler.name)
        if handler.waits_for_room:
            self.placed_at = version
            cycle.placed = True
            # Room is left when its window was full and it placed some (more may fit behind
            # them), or when it asked victims to stop (the next preemptor is chosen next cycle).
            full = handler.queue_window is not None and read >= handler.queue_window
            cycle.room = cycle.more = (full and bool(won)) or self._requested > requested
            cycle.made = False
        elif _made_room(handler, won, acted):
            cycle.room = cycle.made = True
        # Where each moved session is now (a promotion's `through` steps are passed, not stayed in).
        now_at = {m.session_id: m.dst for m in won}
        # Measured on an idle cluster: the handlers reading them after placement held up the
        # agent's report of the kernel starting by 4-6 ms.
        handed = {sid for sid, dst in now_at.items() if dst is handler.awaits_agents}
        cycle.handed += len(handed)
        entered = {dst for sid, dst in now_at.items() if sid not in handed}
        cycle.present |= {(dst, asked) for dst in entered for asked in (True, False)}
        if acted and handler.hands_orders and self._on_change is not None:
            # Agents pull orders: wake their long polls now, not at the end of the cycle.
            await self._on_change()
        cycle.moved += len(now_at)
        if self._on_ended is not None and any(m.dst in TERMINAL_SESSION for m in won):
            self._on_ended()  # the retry engine decides ended attempts at once, not on its poll
        # Between handlers the loop serves requests (agents' long polls above all): on SQLite
        # a handler's write transaction runs on this thread without giving the loop a turn.
        await asyncio.sleep(0)

    def _use_group(self, group: dict[str, Any]) -> None:
        """The group's queue and preemption settings, as read now: a change takes effect from the
        next cycle (or handler) run."""
        self._limits = for_group(self._base_limits, group.get("queue"))
        self._preemption = dict(group.get("preemption") or {})

    async def run_handler(self, handler: Handler) -> int:
        """One handler in its own transaction; returns how many sessions changed status."""
        async with reading(self._engine) as conn:
            self._use_group(await preemption.group_config(conn, self._rg) or {})
        won, _, _ = await self._run(handler)
        return len({m.session_id for m in won})

    async def _run(
        self, handler: Handler, timed: bool = True, present: Collection[SessionStatus] | None = None
    ) -> tuple[list[Move], bool, int]:
        """The moves that won, whether anything changed (moves, or orders without moves), and how
        many targets it read.  Its targets are read only in the statuses `present` (the cycle's
        live statuses, and PENDING): a queue read seeks each status by index, a round trip each."""
        wanted = handler.target_session_statuses
        statuses = wanted if present is None else (wanted & frozenset(present)) or wanted
        now = self._clock()
        changed_before = None
        if handler.expiry_only:
            [status] = handler.target_session_statuses
            limit = self._limits.timeouts.get(status)
            if limit is None:
                return [], False, 0
            changed_before = now - limit
        window, page = handler.queue_window, handler.queue_page or handler.queue_window
        if isinstance(handler, SessionPromotionHandler) and handler.decided_by_kernel_statuses:
            return await self._promote_by_status(handler, now)
        # A promotion reads and then moves, each move one statement guarded by its session's status
        # (sessions.apply_moves; never back to the queue): on PostgreSQL a transaction around them
        # adds its BEGIN and COMMIT round trips and nothing else (the read locks nothing).
        scope = statements if isinstance(handler, SessionPromotionHandler) else transaction
        async with scope(self._engine) as conn:

            async def read(size: int | None, after: sessions.QueueKey | None = None) -> list[SessionRecord]:
                return await sessions.for_handler(
                    conn,
                    self._rg,
                    statuses,
                    **_filters(handler),
                    queue_window=size,
                    ready_at=now if window is not None else None,
                    with_kernels=handler.with_kernels,
                    changed_before=changed_before,
                    after=after,
                )

            targets = await read(page)
            pages, asked = [targets], [page or 0]

            async def more(wanted: int = 0) -> list[SessionRecord]:
                """The window's next `wanted` sessions (a page if none said), or nothing once the
                window (or the queue) is read."""
                read_so_far = sum(map(len, pages))
                if window is None or page is None or len(pages[-1]) < asked[-1] or read_so_far >= window:
                    return []
                asked.append(min(wanted if wanted > 0 else page, window - read_so_far))
                pages.append(await read(asked[-1], sessions.queue_key(pages[-1][-1])))
                return pages[-1]

            overdue = await self._overdue(conn, handler, targets, now, timed)
            if not targets and not overdue:
                return [], False, 0
            ctx = HandlerContext(
                conn, now, self._rg, self._limits, more if page != window else None, self._preemption
            )
            if isinstance(handler, SessionPromotionHandler):
                moves, history = self._promote(handler, [s for s in targets if handler.matches(s)])
                won = await sessions.apply_moves(conn, moves, now, history)
                history = []
                acted = bool(won)
            else:
                result = await handler.execute(ctx, targets)
                self._requested += result.requested
                targets = [s for p in pages for s in p]
                seen = {s.id for s in targets}
                overdue = [s for s in overdue if s.id not in seen]  # reached by a later page
                won, history = await self._judge(ctx, handler, result, targets, overdue)
                acted = bool(won or result.successes)
            await journal.add_history(conn, history, now)
        return won, acted, len(targets)

    async def _overdue(
        self,
        conn: Tx,
        handler: Handler,
        targets: Sequence[SessionRecord],
        now: datetime,
        timed: bool = True,
    ) -> list[SessionRecord]:
        """Past their time limit but outside the handler's queue window, or not read because they
        wait on a live agent: judged all the same."""
        if isinstance(handler, SessionPromotionHandler):
            return []
        if handler.queue_window:
            statuses = handler.target_session_statuses
        else:  # time limits are judged in seconds: a cycle woken by a report need not look again
            statuses = handler.lost_agent_only if timed else frozenset()
        seen = {s.id for s in targets}
        found: list[SessionRecord] = []
        for status in statuses:
            limit = self._limits.timeouts.get(status)
            if limit is None:
                continue
            found += await sessions.for_handler(
                conn,
                self._rg,
                {status},
                terminating_requested=handler.termination_requested,
                with_kernels=False,
                changed_before=now - limit,
            )
        return [s for s in found if s.id not in seen]

    async def _promote_by_status(
        self, handler: SessionPromotionHandler, now: datetime
    ) -> tuple[list[Move], bool, int]:
        """_run for a promotion its targets' read decides alone: the same moves and history from
        the targets' ids and statuses (a third of a session's reads each cycle were these).  Outside
        a transaction on PostgreSQL, as promotions are (_run)."""
        async with statements(self._engine) as conn:
            found = await self._target_ids(conn, handler)
            if not found:
                return [], False, 0
            dst = handler.success_session_status()
            unrequested = handler.termination_requested is False
            moves = [Move(sid, src, dst, None, (), _via(handler, src), (), unrequested) for sid, src in found]
            name, message = _recorded(handler)
            history = [row for m in moves for row in _rows(handler, m, name, message)]
            won = await sessions.apply_moves(conn, moves, now, history)
        return won, bool(won), len(found)

    async def _target_ids(
        self, conn: Tx, handler: Handler, limit: int = 5000
    ) -> list[tuple[str, SessionStatus]]:
        """The handler's targets as (id, status), for a handler outside a queue window."""
        statuses = handler.target_session_statuses
        return await sessions.target_ids(conn, self._rg, statuses, **_filters(handler), limit=limit)

    async def _nothing_to_do(self, handler: Handler, timed: bool) -> bool:
        """A handler that found nothing last time is probed before its transaction: on PostgreSQL
        an empty transaction is three round trips (BEGIN, the read, COMMIT), one is enough to see
        there is nothing (three handlers of a busy cycle found nothing each time, 5 ms each).  Only
        handlers whose targets are all that read finds: none with a queue window or a time
        limit of its own, whose overdue sessions are read apart (_overdue)."""
        if self._engine.dialect.name != "postgresql":
            return False  # SQLite's read takes the write lock like the transaction would: no saving
        if isinstance(handler, SessionPromotionHandler):
            return False  # outside a transaction already (_run): its read is the probe
        if handler.name not in self._found_none or handler.queue_window is not None:
            return False
        if handler.expiry_only or (timed and handler.lost_agent_only):
            return False
        async with reading(self._engine) as conn:
            return not await self._target_ids(conn, handler, limit=1)

    def _promote(
        self, handler: SessionPromotionHandler, targets: Sequence[SessionRecord]
    ) -> tuple[list[Move], History]:
        """The move of each target (`matches` already said it is one) and its history rows."""
        moves: list[Move] = []
        history: History = []
        name, message = _recorded(handler)
        for s in targets:
            verdict = handler.verdict(s)
            dst = verdict.status if verdict else handler.success_session_status()
            values = _verdict_values(verdict) if verdict else ()
            unrequested = handler.termination_requested is False
            moves.append(Move(s.id, s.status, dst, None, values, _via(handler, s.status), (), unrequested))
            cause = f"cause {verdict.cause}" if verdict and verdict.cause else message
            history += _rows(handler, moves[-1], name, cause)
        return moves, history

    async def _judge(
        self,
        ctx: HandlerContext,
        handler: LifecycleHandler,
        result: LifecycleResult,
        targets: Sequence[SessionRecord],
        overdue: Sequence[SessionRecord] = (),
    ) -> tuple[list[Move], History]:
        by_id = {s.id: s for s in (*targets, *overdue)}
        for sid, status in (result.moved or {}).items():
            by_id[sid] = replace(by_id[sid], status=status)
        transitions = handler.status_transitions()
        moves: list[Move] = []
        history: History = []

        def outcome(
            s: SessionRecord, kind: SchedulingResult, to: TransitionStatus | None, message: str
        ) -> None:
            if to is None or to.session is None:
                if kind is SchedulingResult.EXPIRED:
                    expired_only.append((s.id, s.status, message))  # repeats each cycle: collapsed
                else:
                    history.append((s.id, handler.name, kind, s.status, None, message))
                return
            dst = to.session
            values: tuple[tuple[str, Any], ...] = ()
            if kind is not SchedulingResult.SUCCESS and dst is SessionStatus.PENDING:
                if s.id in running:
                    # Some of its kernels started at once (prepare and start): re-queueing would free
                    # their capacity before they are confirmed dead. Stopped instead, as ExpireCreating.
                    stop.append(s.id)
                    history.append((s.id, handler.name, kind, s.status, None, message + "; " + _RUNS))
                    return
                if reschedules_exhausted(s.reschedule_count, self._limits):
                    # Re-scheduled too often: stop it instead (ends ERROR scheduler_timeout).
                    stop.append(s.id)
                    history.append(
                        (s.id, handler.name, kind, s.status, None, message + "; reschedules exhausted")
                    )
                    return
            if dst in TERMINAL_SESSION and kind is not SchedulingResult.SUCCESS and handler.failure_cause:
                values = (("result", str(SessionResult.FAILURE)), ("cause", str(handler.failure_cause)))
            if (
                dst is SessionStatus.TERMINATING
                and kind is not SchedulingResult.SUCCESS
                and handler.failure_cause
            ):
                # Stopped by the coordinator itself: recorded as a termination request would be.
                values = (
                    ("termination_reason", str(handler.failure_cause)),
                    ("termination_message", message),
                    ("termination_requested_at", ctx.now),
                )
            if kind is SchedulingResult.SUCCESS and result.finals and s.id in result.finals:
                values = _verdict_values(result.finals[s.id])
            history.append((s.id, handler.name, kind, s.status, dst, message))
            if kind is not SchedulingResult.SUCCESS or not handler.then:
                moves.append(Move(s.id, s.status, dst, to.kernel, values))
                return
            # Its successes go on at once (`then`): one update passing each step, a row each.
            history.extend(_passed(s.id, kind, dst, handler.then))
            hops = (dst, *(step.status for step in handler.then))
            kernel_path = [k for k in (to.kernel, *(step.kernel for step in handler.then)) if k is not None]
            kernel = kernel_path.pop() if kernel_path else None
            unrequested = handler.termination_requested is False  # as the steps' rules ask too
            moves.append(
                Move(s.id, s.status, hops[-1], kernel, values, hops[:-1], tuple(kernel_path), unrequested)
            )

        stop: list[str] = []
        expired_only: list[tuple[str, str, str]] = []
        attempted = set(result.successes) | {f.session_id for f in result.failures}
        requeued = {
            t.session for t in (transitions.need_retry, transitions.give_up, transitions.expired) if t
        }
        may_requeue = [f.session_id for f in result.failures] + [
            s.id for s in (*targets, *overdue) if s.id not in attempted
        ]
        running = (
            await sessions.with_running_kernels(ctx.conn, may_requeue)
            if SessionStatus.PENDING in requeued and may_requeue
            else set()
        )
        for sid in result.successes:
            outcome(by_id[sid], SchedulingResult.SUCCESS, transitions.success, result.messages.get(sid, ""))
        if result.failures:
            tries = await sessions.bump_tries(ctx.conn, [f.session_id for f in result.failures])
            for f in result.failures:
                s = by_id[f.session_id]
                if gives_up(tries[f.session_id], self._limits):
                    outcome(
                        s, SchedulingResult.GIVE_UP, transitions.give_up, f"{f.message} (try {tries[s.id]})"
                    )
                else:
                    outcome(
                        s,
                        SchedulingResult.NEED_RETRY,
                        transitions.need_retry,
                        f"{f.message} (try {tries[s.id]})",
                    )
        for s in (*targets, *overdue):
            # A retry waiting for its time is not late for it: its status counts from then.
            since = max(s.status_changed_at, s.retry_after) if s.retry_after else s.status_changed_at
            if s.id not in attempted and is_expired(s.status, since, ctx.now, self._limits):
                limit = self._limits.timeouts.get(s.status)
                outcome(
                    s, SchedulingResult.EXPIRED, transitions.expired, f"in {s.status} longer than {limit}"
                )
        # A move's history rows are written with it, and only if it wins; the rest (outcomes
        # without a move) are the caller's to write.
        won = await sessions.apply_moves(ctx.conn, moves, ctx.now, [h for h in history if h[4] is not None])
        history = [h for h in history if h[4] is None]
        if len(won) < len(moves):
            log.info("lost race", handler=handler.name, lost=len(moves) - len(won))
        won_ids = {m.session_id for m in won}
        if result.placements:
            placed = {sid: p for sid, p in result.placements.items() if sid in won_ids}
            await kernels.write_placements(ctx.conn, placed, ctx.now)
        for sid in stop:
            why = _RUNS if sid in running else "re-scheduled too often"
            await sessions.request_termination(
                ctx.conn, sid, TerminationReason.SCHEDULER_TIMEOUT, why, ctx.now
            )
        skipped = [(k.session_id, by_id[k.session_id].status, k.reason) for k in result.skipped]
        await journal.add_skips(ctx.conn, handler.name, skipped, ctx.now)
        await journal.add_collapsed(ctx.conn, handler.name, SchedulingResult.EXPIRED, expired_only, ctx.now)
        return won, history
