"""The agent: registers, pulls orders, runs kernels under supervisors, pushes reports and logs.

Every connection is the agent's: a long poll for orders (which doubles as the heartbeat) and a
push of reports and logs.  If the manager cannot be reached for `fence_timeout`, the agent kills
its own kernels (self-fencing), so a retried attempt never runs beside a zombie of this one.

The agent holds what its collaborators share (its settings, client, epoch and kernels) and the
registration; each collaborator is one concern, in its own module: pull (orders), push (reports),
ship (logs), fence (self-fencing), supervision (its supervisor process), health (its cgroups).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from types import TracebackType

import structlog

from corral.agent import spawn
from corral.agent.capacity import capacity
from corral.agent.cgroup import CgroupMode, detect, detect_cpu, kernel_cgroups, parent_name, release
from corral.agent.client import ManagerUnreachable, ProtocolClient, Refused, Rejected
from corral.agent.fence import Fence
from corral.agent.health import Health, describe
from corral.agent.identity import IdentityError, KernelIdentity, publish_worker_lib, unreachable_from
from corral.agent.image_build import Images
from corral.agent.images import parse as parse_images
from corral.agent.kernel import KernelRunner
from corral.agent.kernel_env import WORKER_LIB
from corral.agent.probe import Prober
from corral.agent.pull import Puller
from corral.agent.push import Pusher
from corral.agent.settings import AgentSettings
from corral.agent.ship import LogShipper
from corral.agent.supervision import Supervision
from corral.protocol.messages import LeaveIn, RegisterIn
from corral.waits import STOP_WAIT, stop_tasks

log = structlog.get_logger("corral.agent")


class Agent:
    """`async with Agent(cfg) as agent: await agent.run()`; `shutdown()` is idempotent."""

    def __init__(self, cfg: AgentSettings) -> None:
        self.cfg = cfg
        self.client = ProtocolClient(cfg.manager, cfg.token)
        self.kernels: dict[str, KernelRunner] = {}
        self.fences = 0  # times the manager fenced us: a reply from before the last is stale
        self.epoch = 0
        self.lease = 15.0
        self.long_poll = 5.0
        self.log_cap = 2 << 30
        self.mode = CgroupMode("watchdog", "")
        self.health = Health(self.mode, lambda: self.images.offered())
        self.identity: KernelIdentity | None = None
        self.images = Images({}, cfg.work_dir / "images", shared=False)  # its own at run()
        self.supervision = Supervision(self)
        self.pull = Puller(self)
        self.push = Pusher(self)
        self.ship = LogShipper(self)
        self.fence = Fence(self)
        self.probe = Prober(self)
        self._why = ""
        self._cpu_why = ""
        self._instance = cfg.instance or uuid.uuid4().hex
        self._stopped = asyncio.Event()
        self._register_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(
        self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]
    ) -> None:
        await self.shutdown()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    # --- lifecycle -------------------------------------------------------------------------
    async def run(self) -> None:
        """Until stopped. Raises IdentityError at start when kernels could not run as configured."""
        self.identity = self._prepare_work_dir()
        log.info("kernels run as", **self.identity.info())
        self.images = Images(
            parse_images(self.cfg.images), self.cfg.work_dir / "images", self.identity.switches
        )
        self.images.publish()
        self.images.on_change = self.health.wake  # a build ended: the manager is told at once
        if self.images.specs:
            log.info("images offered", images=self.images.offered())
        name = parent_name(self.cfg.id, self.cfg.work_dir)
        self.mode, why = detect(name, self.cfg.memory_mode)
        log.info("memory limits", mode=self.mode.kind, why=why, cgroup=self.mode.parent or None)
        self.mode, self._cpu_why = detect_cpu(self.mode, name)
        for left in kernel_cgroups(self.mode):
            left.remove()  # emptied ones an earlier run of ours kept (a cgroup in use stays)
        log.info("cpu limits", mode=self.mode.cpu, why=self._cpu_why, cgroup=self.mode.cpu_parent or None)
        self._why = why
        self.health.mode = self.mode
        if self.cfg.spawn_helper and (os.geteuid() == 0 or self.mode.kind != "watchdog"):
            await asyncio.to_thread(spawn.prepare)  # the helper kernels start through (agent/spawn.py)
        await self.supervision.start()
        await self._register()
        if self._stopped.is_set():
            return
        self._tasks = [
            asyncio.create_task(loop.run(), name=loop.name)
            for loop in (self.pull, self.push, self.fence, self.ship, self.probe)
        ]
        self._tasks.append(
            asyncio.create_task(
                self.health.run(self.client, self.cfg.id, lambda: self.epoch), name="agent:health"
            )
        )
        await self._stopped.wait()

    def _prepare_work_dir(self) -> KernelIdentity:
        identity = KernelIdentity.resolve(self.cfg.kernel_user, self.cfg.allow_root_kernels)
        work = self.cfg.work_dir
        work.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not identity.switches:
            work.chmod(0o700)  # kernel logs and env files are the owner's only
            return identity
        # Kernels of other accounts reach their own directories (700, theirs) but list nothing.
        for d in (work, work / "kernels", work / "checkpoints"):
            d.mkdir(exist_ok=True)
            d.chmod(0o711)
        blocked = unreachable_from(work)
        if blocked is not None:
            raise IdentityError(
                f"kernels run as other accounts cannot reach the work dir {work}: {blocked} is not "
                "traversable by others; use a --work-dir outside it (e.g. under /var/lib)"
            )
        publish_worker_lib(WORKER_LIB, work)
        return identity

    def request_stop(self) -> None:
        """Safe from a signal handler: `run()` returns, and `shutdown()` (or `async with`) cleans up."""
        self._stopped.set()

    async def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stopped.set()
        for loop in (self.pull, self.push, self.fence, self.ship, self.probe):
            await loop.shutdown()
        await self.supervision.stop_replacing()
        await stop_tasks(self._tasks, STOP_WAIT)
        link = self.supervision.link
        if link is not None and link.alive:
            try:
                await asyncio.wait_for(self.supervision.kill_all(), 10.0)
                await asyncio.wait_for(self.push.push_once(), 2.0)
                # Leaving: a successor under the same id may register at once.
                await asyncio.wait_for(
                    self.client.leave(LeaveIn(agent_id=self.cfg.id, epoch=self.epoch)), 2.0
                )
            except Exception:  # best effort: the manager fences what it never hears about
                pass
        await self.supervision.close()
        release(self.mode)
        await self.client.aclose()

    # --- registration ----------------------------------------------------------------------
    async def _register(self) -> None:
        async with self._register_lock:
            await self._register_held()

    def _registration(self) -> RegisterIn:
        reason = self.health.registering()
        return RegisterIn(
            agent_id=self.cfg.id,
            hostname=socket.gethostname(),
            address=self.cfg.address,
            resource_group=self.cfg.resource_group,
            capacity=capacity(self.cfg),
            info=describe(
                self.mode, self._why, self._cpu_why, self.identity, self.cfg.rendezvous_ports, os.getpid()
            )
            | ({"images": self.health.registering_images} if self.images.specs else {}),
            instance=self._instance,
            schedulable=reason is None,
            unschedulable_reason=reason,
        )

    async def _register_held(self) -> None:
        """Register (a new epoch), with `_register_lock` held by the caller."""
        while not self._stopped.is_set():
            sent = time.monotonic()
            try:
                reply = await self.client.register(self._registration())
            except ManagerUnreachable as exc:
                log.warning("manager unreachable; retrying registration", error=str(exc))
                await asyncio.sleep(1.0)
                continue
            except (Refused, Rejected) as exc:
                log.error("registration refused; retrying", reason=str(exc))
                await asyncio.sleep(2.0)
                continue
            self.epoch = reply.epoch
            self.health.registered(reply.epoch)
            self.lease = reply.agent_lease
            self.long_poll = reply.long_poll
            self.log_cap = reply.log_cap
            self.fence.registered(reply.fence_timeout, sent)
            log.info("registered", agent=self.cfg.id, epoch=self.epoch)
            return

    async def fenced(self, why: str, epoch: int) -> None:
        """The manager refused `epoch` (the one the request was sent with): stop everything, forget
        it, register anew; unless another loop has already done so since that request went out."""
        async with self._register_lock:
            if self.epoch != epoch:
                return
            log.warning("fenced by the manager", why=why)
            self.fences += 1
            await self.supervision.kill_all()
            self.push.clear()
            self.kernels.clear()
            self.ship.clear()
            self.probe.clear()
            # Under the lock: another loop fenced at the same time waits for the new epoch, and
            # then has nothing to do.  Registered after releasing it, each loop registered in turn,
            # each registration fencing the one before, and a kernel ordered in between was lost.
            await self._register_held()
