"""The agent's hold on its supervisor (agent/supervisor.py): start it, hear its events, and
replace it when it dies or stops confirming kills, with its kernels killed and confirmed gone."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import structlog

from corral.agent.cgroup import kernel_cgroups
from corral.agent.events import Event, Exited, Failed, FencedAll
from corral.agent.kernel import KernelRunner
from corral.agent.link import SupervisorLink
from corral.waits import STOP_WAIT, stop_tasks

if TYPE_CHECKING:
    from corral.agent.agent import Agent

log = structlog.get_logger("corral.agent.supervision")

# How long the supervisor has to confirm kills before the agent takes over (well under the margin).
CONFIRM_KILL = 2.0


class Supervision:
    def __init__(self, agent: Agent) -> None:
        self._agent = agent
        self.link: SupervisorLink | None = None
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        agent = self._agent
        self.link = SupervisorLink(
            agent.mode, self._on_event, self._on_exit, spawn_helper=agent.cfg.spawn_helper
        )
        await self.link.start()
        for k in agent.kernels.values():
            k.link = self.link

    async def stop_replacing(self) -> None:
        """The agent is stopping: a replacement under way is stopped (idempotent)."""
        tasks, self._tasks = self._tasks, []
        await stop_tasks(tasks, STOP_WAIT)

    async def close(self) -> None:
        """The supervisor is told to go: it kills whatever still runs, then exits."""
        if self.link is not None:
            await self.link.close()

    def _on_exit(self, returncode: int | None) -> None:
        if not self._agent.stopped:
            self._tasks.append(asyncio.create_task(self._on_dead(returncode), name="agent:respawn"))

    async def _on_dead(self, returncode: int | None) -> None:
        async with self._lock:
            await self._replace(returncode)

    async def _replace(self, returncode: int | None) -> None:
        orphans = [k for k in self._agent.kernels.values() if k.started and not k.ended]
        log.error(
            "supervisor died: killing its kernels and starting a new one",
            returncode=returncode,
            kernels=len(orphans),
        )
        try:
            await self._empty_kernel_cgroups()
            await asyncio.gather(*(k.supervisor_lost() for k in orphans))
        finally:
            if not self._agent.stopped:
                await self.start()

    async def _empty_kernel_cgroups(self) -> None:
        """Kill everything in every kernel cgroup and remove them: all were the dead supervisor's,
        whichever kernel runs in which (it reuses emptied ones).  Until none is left, since a start
        in flight may join one between a kill and its removal; what is left after 10 s is said."""
        mode = self._agent.mode
        deadline = time.monotonic() + 10
        while True:
            left = []
            for cgroup in kernel_cgroups(mode):
                left += cgroup.pids()
                cgroup.kill_all()
                cgroup.remove()  # refused while a process is in it: tried again next turn
            if not kernel_cgroups(mode):
                return
            if time.monotonic() > deadline:
                log.error("kernel processes survived their supervisor", pids=left)
                return
            await asyncio.sleep(0.02)

    async def kill_all(self) -> None:
        await self.kill_and_confirm(list(self._agent.kernels.values()))

    async def kill_and_confirm(self, runners: list[KernelRunner]) -> None:
        """Kill these kernels now.  If the supervisor does not confirm within CONFIRM_KILL seconds it
        is stuck: take it down and confirm the deaths ourselves (cgroups or process groups), well
        inside the fence margin, before anyone may count these kernels gone."""
        stuck = self.link  # the one asked; if it is replaced meanwhile, the new one is left alone
        for k in runners:
            k.fence()
        waits = asyncio.gather(*(k.wait() for k in runners), return_exceptions=True)
        try:
            # Not asyncio.wait_for, which on Python 3.11 can swallow a cancellation (waits.py).
            async with asyncio.timeout(CONFIRM_KILL):
                await waits
            return
        except TimeoutError:
            log.error("the supervisor did not confirm the kills: replacing it", kernels=len(runners))
        async with self._lock:
            if stuck is not None and stuck is self.link and stuck.alive:
                await stuck.kill()
                await self._replace(None)

    def _on_event(self, event: Event) -> None:
        agent = self._agent
        if isinstance(event, FencedAll):
            log.error("supervisor fenced the kernels: the agent stopped pinging it", kernels=event.kernels)
            for k in agent.kernels.values():
                if k.started and not k.ended:
                    k.fenced = k.kill_sent = True  # so their ends are reported as the fence's doing
            return
        if isinstance(event, Failed):
            log.error("supervisor could not carry out a command", error=event.error)
            return
        if isinstance(event, Exited) and event.start_error:
            agent.health.wake()  # perhaps its cgroups: looked at now, not at the next tick
        kernel_id, _, _ = event.key.rpartition(".")
        runner = agent.kernels.get(kernel_id)
        if runner is not None and runner.key == event.key:
            runner.on_event(event)
