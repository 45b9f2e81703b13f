"""Self-fencing: an agent that cannot reach the manager for `fence_timeout` kills its own kernels.

The fence counts from the last request the manager recorded (each reply says whether it did),
from its send time: the manager recorded it no earlier, so the agent's count always ends before
the manager's, and a retried attempt never runs beside a zombie of this one.  The supervisor is
pinged with the deadline, so that a stopped agent (SIGSTOP, a hung loop) still fences.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import structlog

from corral.agent.commands import Ping
from corral.agent.loop import Loop

if TYPE_CHECKING:
    from corral.agent.agent import Agent

log = structlog.get_logger("corral.agent.fence")

FENCE_TICK = 0.1


class Fence(Loop):
    name = "agent:fence"

    def __init__(self, agent: Agent) -> None:
        super().__init__()
        self._agent = agent
        self.timeout = 30.0
        """Seconds without a recorded contact after which this agent kills its kernels (the
        registration's)."""
        self.last_contact = time.monotonic()

    def registered(self, timeout: float, sent: float) -> None:
        """A registration sent at `sent` was answered: it records the contact, so count from its send."""
        self.timeout = timeout
        self.last_contact = sent
        # At once, before any order: the supervisor's deadline from before a partition has
        # passed, and it would fence the first kernel started after re-registering.
        self.ping()

    def contact(self, sent: float) -> None:
        """The manager recorded a request we sent at `sent`: it recorded it no earlier than that, so
        counting the fence from the send time (not the reply) keeps us ahead of the manager's count."""
        now = time.monotonic()
        lapsed = self.last_contact + self.timeout <= now
        self.last_contact = max(self.last_contact, sent)
        if lapsed and self.last_contact + self.timeout > now:
            # Back in contact after the supervisor's deadline passed (SIGSTOP, a partition healed
            # before the manager fenced us): it kills every kernel until told a later one, so it is
            # told now, before the start orders this reply may carry, not at the next fence tick.
            self.ping()

    def ping(self) -> None:
        link = self._agent.supervision.link
        if link is not None and link.alive:
            # CLOCK_MONOTONIC is one clock for every process of the host: an absolute deadline does
            # not drift later by the time a ping waits in the pipe.
            link.send(Ping(fence_at=self.last_contact + self.timeout))

    async def _loop(self) -> None:
        agent = self._agent
        while True:
            self.ping()
            await asyncio.sleep(FENCE_TICK)
            silent = time.monotonic() - self.last_contact
            live = [k for k in agent.kernels.values() if not k.ended and not k.fenced]
            if silent > self.timeout and live:
                log.error(
                    "manager unreachable past the fence timeout: killing kernels",
                    seconds=round(silent, 1),
                    kernels=len(live),
                )
                await agent.supervision.kill_and_confirm(live)
