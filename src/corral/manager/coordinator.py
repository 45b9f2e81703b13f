"""The coordinator: runs each handler in its own transaction and alone judges the outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from corral.domain.judge import PhaseLimits, for_group
from corral.domain.records import Move
from corral.domain.status import TERMINAL_SESSION, SessionStatus
from corral.manager import targets
from corral.manager.handler_run import HandlerRuns
from corral.manager.handlers.base import LifecycleHandler, SessionPromotionHandler
from corral.store import leases, preemption, sessions
from corral.store.db import reading, reads_apart
from corral.store.unit import Engine

log = structlog.get_logger("corral.coordinator")

Handler = LifecycleHandler | SessionPromotionHandler

# Statuses a lifecycle handler moves a session to when it may free capacity or change the queue.
_ROOM = frozenset({SessionStatus.PENDING, SessionStatus.SUSPENDED}) | TERMINAL_SESSION


def _made_room(handler: Handler, won: Sequence[Move], acted: bool) -> bool:
    """Whether placement may now do more.  Promotions never free capacity (kernels' allocations
    are freed by their reports, which wake placement themselves)."""
    if isinstance(handler, SessionPromotionHandler):
        return False
    return (acted and handler.frees_room) or any(m.dst in _ROOM for m in won)


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
        holding: leases.Holding | None = None,
    ) -> None:
        self._engine = engine
        self._rg = resource_group
        self._handlers = list(handlers)
        self._base_limits = self._limits = limits
        self._preemption: dict[str, Any] = {}
        self._runs = HandlerRuns(engine, resource_group, leases.writes(engine, holding))
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

        Room signalled since placement last ran (`room_version`: agents' reports of kernels
        ending) is placed first, so freed capacity does not wait for the promotions.  It is placed
        again after any handler once more was signalled, so capacity freed during a long cycle is
        used within it.  Once such a run places nothing (the queue's head does not fit) or
        placement fails, the cycle stops doing so: a full cluster costs at most one placement run
        a cycle more, a failing placement none.  Placement runs at its own place if the handlers
        before it made room, or room was signalled since it last ran.  The room a placement leaves itself (a
        full window, victims asked to stop) is for a later run: one run reads one window and
        chooses at most one preemptor."""
        async with reading(self._engine) as conn:
            present, group = await sessions.live_statuses(conn, self._rg)
        self._use_group(group)
        self._runs.requested = 0
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
        self.busy = cycle.moved - cycle.handed + self._runs.requested + int(cycle.more)
        # Requests written this cycle (a preemptor's victims) count as work: the loop runs the next
        # cycle at once instead of waiting its interval to stop them.
        return cycle.moved + self._runs.requested

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
        if not targets.may_have_targets(handler, cycle.present) or (handler.expiry_only and not timed):
            return  # a handler with nothing to look at costs no transaction
        if handler.waits_for_room:
            # Left out: placed all it could last time, and nothing has changed since.
            self.left_out = not cycle.room and not timed
            if self.left_out:
                return
        requested = self._runs.requested
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
            cycle.room = cycle.more = (full and bool(won)) or self._runs.requested > requested
            cycle.made = False
        elif _made_room(handler, won, acted):
            cycle.room = cycle.made = True
        # Where each moved session is now (a promotion's `through` steps are passed, not stayed in).
        now_at = {m.session_id: m.dst for m in won}
        # A session handed to its agents waits for their report (which wakes a cycle of its own):
        # the later handlers need not read it, and their reads would hold that report up.
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
        """The handler run at the cycle's clock with the group's settings (HandlerRuns.run)."""
        return await self._runs.run(handler, self._clock(), self._limits, self._preemption, timed, present)

    async def _nothing_to_do(self, handler: Handler, timed: bool) -> bool:
        """A handler that found nothing last time is probed before its transaction, where a read
        apart is cheaper than the transaction (store.db.reads_apart).  Only handlers whose targets
        are all that read finds: none with a queue window or a time limit of its own, whose overdue
        sessions are read apart (targets.overdue)."""
        if not reads_apart(self._engine):
            return False  # the read would cost what the transaction does: no saving
        if isinstance(handler, SessionPromotionHandler):
            return False  # its run begins with the same read; only BEGIN and COMMIT would be saved
        if handler.name not in self._found_none or handler.queue_window is not None:
            return False
        if handler.expiry_only or (timed and handler.lost_agent_only):
            return False
        async with reading(self._engine) as conn:
            return not await targets.target_ids(conn, self._rg, handler, limit=1)
