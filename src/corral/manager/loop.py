"""One scheduling loop per resource group, held by one manager at a time (a lease row)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta

import structlog

from corral.clock import utcnow
from corral.manager.coordinator import Coordinator
from corral.manager.handlers import cycle_handlers
from corral.manager.sweep import sweep
from corral.settings import SchedulerSettings
from corral.store import agents, leases
from corral.store.db import reading
from corral.store.unit import Engine
from corral.wakeup import Wakeup, repeat

log = structlog.get_logger("corral.loop")

BATCH_MOVES = 10
"""A cycle that moved this many sessions means load: the next one waits `batch_pause`."""


class SchedulerLoop:
    """Sweeps and runs the coordinator for one group whenever woken, or every interval."""

    def __init__(
        self, engine: Engine, resource_group: str, cfg: SchedulerSettings, wakeup: Wakeup, holder: str
    ) -> None:
        self._engine = engine
        self._rg = resource_group
        self._cfg = cfg
        self._wakeup = wakeup
        # Held for max(5, 5 cycles), renewed at half that: a dead holder's group waits at most that.
        ttl = timedelta(seconds=max(5.0, cfg.loop_interval * 5))
        self.holding = leases.Holding(engine, f"scheduler:{resource_group}", holder, ttl)
        self._last_sweep: datetime | None = None
        self.coordinator = Coordinator(
            engine,
            resource_group,
            cycle_handlers(),
            cfg.limits(),
            utcnow,
            on_change=wakeup.orders_changed,
            on_ended=wakeup.retries,
            room_version=lambda: wakeup.room_version,
            holding=self.holding,
        )

    async def run_once(self) -> int:
        if not await self.holding.claim():
            return 0
        try:
            return await self._cycle(utcnow())
        except leases.LeaseLost:
            log.warning("scheduling lease lost: this manager stops the group's loop", resource_group=self._rg)
            return 0

    async def _cycle(self, now: datetime) -> int:
        changed = 0
        timed = (
            self._last_sweep is None or (now - self._last_sweep).total_seconds() >= self._cfg.sweep_interval
        )
        if timed:
            # Liveness, fences, deadlines and status time limits are judged in seconds: a cycle
            # woken by a report (many a second when busy) need not pay for them again.  A later
            # sweep only ever fences later, never earlier.
            changed = await sweep(self._engine, self._rg, self._cfg, now, self.holding)
            self._last_sweep = now
        # A signal placement has not seen is room (the coordinator records what it saw only when
        # placement ran: a failed cycle leaves it unseen).
        signalled = self._wakeup.room_version != self.coordinator.placed_at
        room = signalled or bool(changed) or self.coordinator.room_left
        moved = await self.coordinator.run_cycle(timed, room)
        if changed:
            await self._wakeup.orders_changed()  # fenced kernels leave their agents' orders
        if moved >= BATCH_MOVES and self._cfg.batch_pause:
            await asyncio.sleep(self._cfg.batch_pause)
        # Sessions handed to their agents wait for reports, which wake the next cycle: a cycle at
        # once would only read them again (and hold up those reports).
        return self.coordinator.busy + changed

    async def run(self) -> None:
        await repeat(self.run_once, self._idle, "scheduling cycle failed", resource_group=self._rg)

    async def _idle(self) -> None:
        """Until woken, or the loop interval; but when the last cycle left placement out while
        sessions wait, only until the next timed cycle is due (which always places): whatever
        changed without signalling room (a kernel starting, which makes its session a preemption
        candidate; a group's settings) is acted on within CORRAL_SWEEP_INTERVAL."""
        wait = self._cfg.loop_interval
        if self.coordinator.left_out and self._last_sweep is not None:
            due = self._last_sweep + timedelta(seconds=self._cfg.sweep_interval) - utcnow()
            wait = min(wait, max(due.total_seconds(), 0.0))
        await self._wakeup.wait_scheduler(wait)


class Scheduler:
    """Starts a loop for every resource group (and for groups created later)."""

    def __init__(self, engine: Engine, cfg: SchedulerSettings, wakeup: Wakeup) -> None:
        self._engine = engine
        self._cfg = cfg
        self._wakeup = wakeup
        self._holder = uuid.uuid4().hex[:16]
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def run(self) -> None:
        try:
            while True:
                async with reading(self._engine) as conn:
                    names = await agents.resource_group_names(conn)
                for name in names:
                    if name not in self._tasks:
                        loop = SchedulerLoop(self._engine, name, self._cfg, self._wakeup, self._holder)
                        self._tasks[name] = asyncio.create_task(loop.run(), name=f"scheduler:{name}")
                await asyncio.sleep(5.0)
        finally:
            await self.shutdown()

    async def shutdown(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
