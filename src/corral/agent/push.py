"""Pushing the agent's kernel reports to the manager: in order, in batches, each report once.

A report is queued when its kernel moves; the push loop sends what is queued, and what the manager
answered is dropped from the queue.  A kernel's final report, once answered, makes the agent
forget the kernel (and remember, for a while, never to run that placement again).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from corral.agent.client import Fenced, ManagerUnreachable, Rejected
from corral.agent.loop import Loop
from corral.protocol.reports import KernelReportIn, ReportsIn
from corral.waits import wait_set

if TYPE_CHECKING:
    from corral.agent.agent import Agent

log = structlog.get_logger("corral.agent.push")

# How long a report push waits for kernels being started to say so (see _await_starts).
START_COALESCE = 0.05
# Under load (the last push reported several kernels) pushes are at least this far apart (seconds),
# so that each carries a batch: pushes as fast as they are answered would carry a report or two
# each, and every request costs the agent, the manager and the database.  One kernel's reports,
# as on an idle cluster, go at once.
REPORT_SPACING = 0.02
REMEMBERED = 100_000
"""Finished placements remembered (an order computed before a final report landed is not run)."""


@dataclass(frozen=True, eq=False)
class Queued:
    """A report waiting to be sent; `final`: the kernel's last (it is forgotten once answered).
    Compared by identity: the same report queued twice is sent twice."""

    report: KernelReportIn
    final: bool = False


class Pusher(Loop):
    name = "agent:push"

    def __init__(self, agent: Agent) -> None:
        super().__init__()
        self._agent = agent
        self.outbox: list[Queued] = []
        self.finished: set[tuple[str, int]] = set()
        self._finished_order: deque[tuple[str, int]] = deque()
        self._wake = asyncio.Event()
        self._next_push = 0.0  # monotonic time before which a push waits (REPORT_SPACING)

    def queue(self, report: KernelReportIn, final: bool = False) -> None:
        self.outbox.append(Queued(report, final))
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def clear(self) -> None:
        """Fenced: nothing queued is the manager's business any more."""
        self.outbox.clear()

    async def _loop(self) -> None:
        while True:
            await wait_set(self._wake, 0.25)
            self._wake.clear()
            # The spacing first: a kernel that starts meanwhile still has its RUNNING waited for.
            if (spacing := self._next_push - time.monotonic()) > 0:
                await asyncio.sleep(spacing)
            await self._await_starts()
            epoch = self._agent.epoch  # what push_once sends (it reads it before any wait)
            try:
                await self.push_once()
            except Fenced as exc:
                await self._agent.fenced(str(exc), epoch)
            except ManagerUnreachable:
                await asyncio.sleep(0.5)
            except Rejected as exc:
                # Resending the same batch cannot help: strip it to what ends kernels, and go on.
                log.error("reports refused by the manager; resending them without details", error=str(exc))
                self.outbox = [Queued(q.report.without_details(), q.final) for q in self.outbox]
                await asyncio.sleep(0.5)

    async def _await_starts(self) -> None:
        """A kernel being started reports RUNNING a millisecond or two after CREATING: when that is
        all there is to say, wait for it (briefly) so that both go in one request, not two round
        trips.  Anything else in the outbox (a kernel's end, above all) goes without this wait
        (after the pushes' spacing under load: REPORT_SPACING)."""
        deadline = time.monotonic() + START_COALESCE
        while self._only_starts():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if not await wait_set(self._wake, remaining):
                return
            self._wake.clear()

    def _only_starts(self) -> bool:
        """The outbox holds only steps of kernels still starting (and at least one)."""
        starting = {k.kernel_id for k in self._agent.kernels.values() if k.starting}
        return bool(starting) and all(q.report.kernel_id in starting for q in self.outbox)

    async def push_once(self) -> None:
        # A kernel's end is reported without waiting for its output, which follows on its own (the
        # ship loop).
        queued = list(self.outbox)
        if not queued:
            return
        agent = self._agent
        sent = time.monotonic()
        several = len({q.report.kernel_id for q in queued}) > 1
        self._next_push = sent + REPORT_SPACING if several else 0.0
        body = ReportsIn(agent_id=agent.cfg.id, epoch=agent.epoch, reports=[q.report for q in queued])
        reply = await agent.client.reports(body)
        if reply.recorded:
            agent.fence.contact(sent)
        done = {id(q) for q in queued}
        self.outbox = [q for q in self.outbox if id(q) not in done]
        for q in queued:
            if q.final:
                self._forget(q.report.kernel_id, q.report.generation)

    def _forget(self, kernel_id: str, generation: int) -> None:
        runner = self._agent.kernels.get(kernel_id)
        if runner is not None and runner.generation == generation:
            del self._agent.kernels[kernel_id]
        self.finished.add((kernel_id, generation))
        self._finished_order.append((kernel_id, generation))
        while len(self._finished_order) > REMEMBERED:
            self.finished.discard(self._finished_order.popleft())
