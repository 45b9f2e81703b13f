"""The agent: registers, pulls orders, runs kernels under supervisors, pushes reports and logs.

Every connection is the agent's: a long-poll for orders (which doubles as the heartbeat) and a
push of reports and logs.  If the manager cannot be reached for `fence_timeout`, the agent kills
its own kernels (self-fencing), so a retried attempt never runs beside a zombie of this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog

from corral.agent import spawn
from corral.agent.capacity import capacity
from corral.agent.cgroup import CgroupMode, detect, detect_cpu, kernel_cgroups, parent_name, release
from corral.agent.client import Fenced, ManagerUnreachable, ProtocolClient, Refused, Rejected
from corral.agent.health import Health, describe
from corral.agent.identity import IdentityError, KernelIdentity, publish_worker_lib, unreachable_from
from corral.agent.kernel import WORKER_LIB, KernelRunner, Report
from corral.agent.link import SupervisorLink
from corral.agent.settings import AgentSettings
from corral.agent.shipper import KernelLogs, Piece
from corral.domain.status import KernelStatus
from corral.protocol.messages import KernelOrder
from corral.waits import STOP_WAIT, stop_tasks, wait_set

log = structlog.get_logger("corral.agent")

FENCE_TICK = 0.1
# How long the supervisor has to confirm kills before the agent takes over (well under the margin).
CONFIRM_KILL = 2.0
# How long a report push waits for kernels being started to say so (see _await_starts).
START_COALESCE = 0.05
# Under load (the last push reported several kernels) pushes are at least this far apart (seconds),
# so that each carries a batch: on PostgreSQL, where a report is answered while the scheduling
# cycle runs, pushes as fast as they were answered carried half the reports each, and every
# request cost the agent, the manager and the database (bench/throughput.py: 130 requests an
# agent for 1,000 sessions against 75, the machine's CPU per session -5%).  One kernel's reports,
# as on an idle cluster, go at once.
REPORT_SPACING = 0.02
# What a kernel report needs to end its kernel; details are dropped if the manager refuses them.
_ESSENTIAL = frozenset(
    {
        "kernel_id",
        "generation",
        "status",
        "exit_code",
        "signal",
        "oom_killed",
        "killed_by_corral",
        "image_failed",
        "agent_lost",
        "exited_at_ns",
        "master_port",
        "final",
        "output_done",
    }
)


class Agent:
    """`async with Agent(cfg) as agent: await agent.run()`; `shutdown()` is idempotent."""

    def __init__(self, cfg: AgentSettings) -> None:
        self.cfg = cfg
        self.client = ProtocolClient(cfg.manager, cfg.token)
        self.kernels: dict[str, KernelRunner] = {}
        self.shipping: dict[str, KernelLogs] = {}
        self.outbox: list[Report] = []
        self.finished: set[tuple[str, int]] = set()
        self._fences = 0  # times the manager fenced us: a reply from before the last is stale
        self._finished_order: deque[tuple[str, int]] = deque()
        self.epoch = 0
        self.lease = 15.0
        self.fence_timeout = 30.0
        self.long_poll = 5.0
        self.log_cap = 2 << 30
        self.last_contact = time.monotonic()
        self.mode = CgroupMode("watchdog", "")
        self.health = Health(self.mode)
        self.identity: KernelIdentity | None = None
        self.link: SupervisorLink | None = None
        self._why = ""
        self._cpu_why = ""
        self._instance = cfg.instance or uuid.uuid4().hex
        self._wake_push = asyncio.Event()
        self._next_push = 0.0  # monotonic time before which a push waits (REPORT_SPACING)
        self._stopped = asyncio.Event()
        self._register_lock = asyncio.Lock()
        self._supervisor_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(
        self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]
    ) -> None:
        await self.shutdown()

    # --- lifecycle -------------------------------------------------------------------------
    async def run(self) -> None:
        """Until stopped. Raises IdentityError at start when kernels could not run as configured."""
        self.identity = self._prepare_work_dir()
        log.info("kernels run as", **self.identity.info())
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
        await self._start_supervisor()
        await self._register()
        if self._stopped.is_set():
            return
        self._tasks = [
            asyncio.create_task(self._pull_loop(), name="agent:pull"),
            asyncio.create_task(self._push_loop(), name="agent:push"),
            asyncio.create_task(self._fence_watch(), name="agent:fence"),
            asyncio.create_task(self._ship_loop(), name="agent:logs"),
            asyncio.create_task(
                self.health.run(self.client, self.cfg.id, lambda: self.epoch), name="agent:health"
            ),
        ]
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

    async def _start_supervisor(self) -> None:
        self.link = SupervisorLink(
            self.mode, self._on_supervisor_event, self._on_supervisor_exit, spawn_helper=self.cfg.spawn_helper
        )
        await self.link.start()
        for k in self.kernels.values():
            k.link = self.link

    def _on_supervisor_exit(self, returncode: int | None) -> None:
        if not self._stopped.is_set():
            self._tasks.append(
                asyncio.create_task(self._on_dead_supervisor(returncode), name="agent:respawn")
            )

    async def _on_dead_supervisor(self, returncode: int | None) -> None:
        async with self._supervisor_lock:
            await self._replace_supervisor(returncode)

    async def _replace_supervisor(self, returncode: int | None) -> None:
        orphans = [k for k in self.kernels.values() if k.started and not k.ended]
        log.error(
            "supervisor died: killing its kernels and starting a new one",
            returncode=returncode,
            kernels=len(orphans),
        )
        try:
            await self._empty_kernel_cgroups()
            await asyncio.gather(*(k.supervisor_lost() for k in orphans))
        finally:
            if not self._stopped.is_set():
                await self._start_supervisor()

    async def _empty_kernel_cgroups(self) -> None:
        """Kill everything in every kernel cgroup and remove them: all were the dead supervisor's,
        whichever kernel runs in which (it reuses emptied ones).  Until none is left, since a start
        in flight may join one between a kill and its removal; what is left after 10 s is said."""
        deadline = time.monotonic() + 10
        while True:
            left = []
            for cgroup in kernel_cgroups(self.mode):
                left += cgroup.pids()
                cgroup.kill_all()
                cgroup.remove()  # refused while a process is in it: tried again next turn
            if not kernel_cgroups(self.mode):
                return
            if time.monotonic() > deadline:
                log.error("kernel processes survived their supervisor", pids=left)
                return
            await asyncio.sleep(0.02)

    def request_stop(self) -> None:
        """Safe from a signal handler: `run()` returns, and `shutdown()` (or `async with`) cleans up."""
        self._stopped.set()

    async def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stopped.set()
        await stop_tasks(self._tasks, STOP_WAIT)
        if self.link is not None and self.link.alive:
            try:
                await asyncio.wait_for(self._kill_all(), 10.0)
                await asyncio.wait_for(self._push_once(), 2.0)
                # Leaving: a successor under the same id may register at once.
                await asyncio.wait_for(self.client.leave(self.cfg.id, self.epoch), 2.0)
            except Exception:  # best effort: the manager fences what it never hears about
                pass
        if self.link is not None:
            await self.link.close()
        release(self.mode)
        await self.client.aclose()

    async def _register(self) -> None:
        async with self._register_lock:
            await self._register_held()

    async def _register_held(self) -> None:
        """Register (a new epoch), with `_register_lock` held by the caller."""
        while not self._stopped.is_set():
            sent = time.monotonic()
            try:
                reply = await self.client.register(
                    agent_id=self.cfg.id,
                    hostname=socket.gethostname(),
                    address=self.cfg.address,
                    resource_group=self.cfg.resource_group,
                    capacity=capacity(self.cfg),
                    info=describe(
                        self.mode,
                        self._why,
                        self._cpu_why,
                        self.identity,
                        self.cfg.rendezvous_ports,
                        os.getpid(),
                    ),
                    instance=self._instance,
                    **self.health.registering(),
                )
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
            self.fence_timeout = reply.fence_timeout
            self.long_poll = reply.long_poll
            self.log_cap = reply.log_cap
            self.last_contact = sent  # registration records the contact: count from its send
            # At once, before any order: the supervisor's deadline from before a partition has
            # passed, and it would fence the first kernel started after re-registering.
            self._ping_supervisor()
            log.info("registered", agent=self.cfg.id, epoch=self.epoch)
            return

    async def _fenced(self, why: str, epoch: int) -> None:
        """The manager refused `epoch` (the one the request was sent with): stop everything, forget
        it, register anew; unless another loop has already done so since that request went out."""
        async with self._register_lock:
            if self.epoch != epoch:
                return
            log.warning("fenced by the manager", why=why)
            self._fences += 1
            await self._kill_all()
            self.outbox.clear()
            self.kernels.clear()
            self.shipping.clear()
            # Under the lock: another loop fenced at the same time waits for the new epoch, and
            # then has nothing to do.  Registered after releasing it, each loop registered in turn,
            # each registration fencing the one before, and a kernel ordered in between was lost.
            await self._register_held()

    async def _kill_all(self) -> None:
        await self._kill_and_confirm(list(self.kernels.values()))

    async def _kill_and_confirm(self, runners: list[KernelRunner]) -> None:
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
        async with self._supervisor_lock:
            if stuck is not None and stuck is self.link and stuck.alive:
                await stuck.kill()
                await self._replace_supervisor(None)

    # --- loops -----------------------------------------------------------------------------
    async def _pull_loop(self) -> None:
        seen = ""
        while True:
            epoch, fences = self.epoch, self._fences
            sent = time.monotonic()
            try:
                # The spec of a kernel started here is never read again (_act): not sent again.
                started = [k.key for k in self.kernels.values() if k.started]
                reply = await self.client.orders(self.cfg.id, epoch, seen, self.long_poll, started)
            except Fenced as exc:
                await self._fenced(str(exc), epoch)
                seen = ""
                continue
            except (ManagerUnreachable, Rejected) as exc:
                if isinstance(exc, Rejected):
                    log.error("orders refused or unreadable", error=str(exc))
                await asyncio.sleep(0.5)
                continue
            if epoch != self.epoch or fences != self._fences:
                # Answered before a fence that forgot every kernel (and, with `started`, without
                # the specs of those started): the next poll, under the new epoch, has it right.
                seen = ""
                continue
            if reply.recorded:
                self._contact(sent)
            seen = reply.fingerprint
            self._reconcile(reply.orders)

    async def _push_loop(self) -> None:
        while True:
            await wait_set(self._wake_push, 0.25)
            self._wake_push.clear()
            # The spacing first: a kernel that starts meanwhile still has its RUNNING waited for.
            if (spacing := self._next_push - time.monotonic()) > 0:
                await asyncio.sleep(spacing)
            await self._await_starts()
            epoch = self.epoch  # what _push_once sends (it reads it before any wait)
            try:
                await self._push_once()
            except Fenced as exc:
                await self._fenced(str(exc), epoch)
            except ManagerUnreachable:
                await asyncio.sleep(0.5)
            except Rejected as exc:
                # Resending the same batch cannot help: strip it to what ends kernels, and go on.
                log.error("reports refused by the manager; resending them without details", error=str(exc))
                self.outbox = [{k: v for k, v in r.items() if k in _ESSENTIAL} for r in self.outbox]
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
            if not await wait_set(self._wake_push, remaining):
                return
            self._wake_push.clear()

    def _only_starts(self) -> bool:
        """The outbox holds only steps of kernels still starting (and at least one)."""
        starting = {k.kernel_id for k in self.kernels.values() if k.starting}
        return bool(starting) and all(r["kernel_id"] in starting for r in self.outbox)

    async def _push_once(self) -> None:
        # A kernel's end is reported without waiting for its output, which follows on its own (the
        # ship loop).
        reports = list(self.outbox)
        if not reports:
            return
        epoch = self.epoch
        sent = time.monotonic()
        several = len({r["kernel_id"] for r in reports}) > 1
        self._next_push = sent + REPORT_SPACING if several else 0.0
        reply = await self.client.reports(
            self.cfg.id, epoch, [{k: v for k, v in r.items() if k != "final"} for r in reports]
        )
        if reply.recorded:
            self._contact(sent)
        done = {id(r) for r in reports}
        self.outbox = [r for r in self.outbox if id(r) not in done]
        for r in reports:
            if r.get("final"):
                self._forget(r["kernel_id"], r["generation"])

    async def _ship_loop(self) -> None:
        """Kernels' output, as fast as the manager takes it; idle polls are 0.2 s apart."""
        while True:
            busy = False
            for key, logs in list(self.shipping.items()):
                if logs.closed:
                    self.shipping.pop(key, None)  # its final report said all of it was shipped
                    continue
                piece, eof = logs.next_piece(), False
                if piece is None:
                    if not logs.ended:
                        continue
                    piece, eof = Piece("stdout", logs.offsets["stdout"], b""), True
                epoch, sent = self.epoch, time.monotonic()
                try:
                    stored, recorded = await self.client.ship_logs(self.cfg.id, epoch, logs, piece, eof)
                except Fenced as exc:
                    await self._fenced(str(exc), epoch)
                    break
                except ManagerUnreachable:
                    await asyncio.sleep(0.5)
                    break
                except Rejected as exc:
                    log.error(
                        "log shipment refused; the rest of this kernel's output is dropped", error=str(exc)
                    )
                    self.shipping.pop(key, None)
                    with contextlib.suppress(Exception):  # say it is over, so readers stop waiting
                        await self.client.ship_logs(
                            self.cfg.id, epoch, logs, Piece(piece.stream, 0, b""), True
                        )
                    continue
                if recorded:
                    self._contact(sent)
                if not stored or eof:
                    self.shipping.pop(key, None)
                    continue
                logs.commit(piece)
                busy = True
            if not busy:
                await asyncio.sleep(0.2)

    def _forget(self, kernel_id: str, generation: int) -> None:
        runner = self.kernels.get(kernel_id)
        if runner is not None and runner.generation == generation:
            del self.kernels[kernel_id]
        self.finished.add((kernel_id, generation))
        self._finished_order.append((kernel_id, generation))
        while len(self._finished_order) > 100_000:
            self.finished.discard(self._finished_order.popleft())

    def _contact(self, sent: float) -> None:
        """The manager recorded a request we sent at `sent`: it recorded it no earlier than that, so
        counting the fence from the send time (not the reply) keeps us ahead of the manager's count."""
        now = time.monotonic()
        lapsed = self.last_contact + self.fence_timeout <= now
        self.last_contact = max(self.last_contact, sent)
        if lapsed and self.last_contact + self.fence_timeout > now:
            # Back in contact after the supervisor's deadline passed (SIGSTOP, a partition healed
            # before the manager fenced us): it kills every kernel until told a later one, so it is
            # told now, before the start orders this reply may carry, not at the next fence tick.
            self._ping_supervisor()

    def _ping_supervisor(self) -> None:
        if self.link is not None and self.link.alive:
            # CLOCK_MONOTONIC is one clock for every process of the host: an absolute deadline does
            # not drift later by the time a ping waits in the pipe.
            self.link.send({"op": "ping", "fence_at": self.last_contact + self.fence_timeout})

    async def _fence_watch(self) -> None:
        while True:
            self._ping_supervisor()
            await asyncio.sleep(FENCE_TICK)
            silent = time.monotonic() - self.last_contact
            live = [k for k in self.kernels.values() if not k.ended and not k.fenced]
            if silent > self.fence_timeout and live:
                log.error(
                    "manager unreachable past the fence timeout: killing kernels",
                    seconds=round(silent, 1),
                    kernels=len(live),
                )
                await self._kill_and_confirm(live)

    # --- orders ----------------------------------------------------------------------------
    def _queue(self, report: Report) -> None:
        self.outbox.append(report)
        self._wake_push.set()

    def _on_supervisor_event(self, event: dict[str, Any]) -> None:
        if event.get("ev") == "fenced":
            log.error(
                "supervisor fenced the kernels: the agent stopped pinging it", kernels=event.get("kernels")
            )
            for k in self.kernels.values():
                if k.started and not k.ended:
                    k.fenced = k.kill_sent = True  # so their ends are reported as the fence's doing
            return
        if event.get("ev") == "error":
            log.error("supervisor could not carry out a command", error=event.get("error"))
            return
        if event.get("start_error"):
            self.health.wake()  # perhaps its cgroups: looked at now, not at the next tick
        kernel_id, _, generation = str(event.get("key", "")).rpartition(".")
        runner = self.kernels.get(kernel_id)
        if runner is not None and str(runner.generation) == generation:
            runner.on_event(event)

    def _runner(self, order: KernelOrder) -> KernelRunner:
        assert self.link is not None, "orders arrive only after the supervisor started"
        runner = self.kernels.get(order.kernel_id)
        if runner is not None and runner.generation != order.generation:
            # Re-placed here after an earlier placement: that one must not run on.
            runner.fence()
            runner = None
        if runner is None:
            runner = KernelRunner(
                order.kernel_id,
                order.generation,
                order.session_id,
                order.rank,
                Path(self.cfg.work_dir),
                self.link,
                self.cfg.grace,
                self._queue,
                self.log_cap,
                self.identity or KernelIdentity.resolve(self.cfg.kernel_user, self.cfg.allow_root_kernels),
            )
            self.kernels[order.kernel_id] = runner
        return runner

    def _reconcile(self, orders: list[KernelOrder]) -> None:
        wanted = set()
        for o in orders:
            wanted.add(o.kernel_id)
            if (o.kernel_id, o.generation) in self.finished:
                continue  # an order computed before our final report landed: never run twice
            try:
                self._act(o)
            except Exception as exc:  # one bad order fails its kernel, never the agent
                log.exception("cannot carry out an order", kernel=o.kernel_id)
                runner = self._runner(o)
                if not runner.ended:
                    runner.fail(f"the agent could not carry out the order: {exc!r}"[:1000])
        for kid, runner in list(self.kernels.items()):
            if kid in wanted:
                continue
            if not runner.started:
                del self.kernels[kid]  # prepared only, then re-scheduled or ended: nothing to stop
            elif not runner.ended and not runner.fenced:
                # No longer ours (declared gone): it must not keep running.
                log.warning("kernel not ordered any more: killing it", kernel=kid)
                runner.fence()

    def _rendezvous(self, o: KernelOrder) -> dict[str, Any] | None:
        """The order's spec with rank 0's port, or None when this agent cannot know it yet (the
        kernel then waits for the start order).  A gang on this agent alone gets the port its
        rank 0 picked: the orders of a session come in one reply, in rank order."""
        if o.spec.get("master_port"):
            return o.spec
        first = next(
            (
                k
                for k in self.kernels.values()
                if k.session_id == o.session_id and k.rank == 0 and not k.ended
            ),
            None,
        )
        if first is None or first.master_port is None:
            return None
        return {**o.spec, "master_port": first.master_port}

    def _act(self, o: KernelOrder) -> None:
        existing = self.kernels.get(o.kernel_id)
        if existing is not None and existing.generation != o.generation:
            existing = None
        if o.kill:
            runner = existing or self._runner(o)
            runner.force_kill() if o.force else runner.kill(o.grace)
            return
        if o.status in (KernelStatus.PREPARING, KernelStatus.PULLING) and existing is None:
            runner = self._runner(o)
            runner.prepare(o.spec, self.cfg.images)
            spec = self._rendezvous(o) if o.spec.get("start_at_once") else None
            if spec is not None and runner.prepared and not runner.ended:
                self.shipping[runner.key] = runner.logs
                runner.start(spec, report_creating=True)
        elif o.status is KernelStatus.CREATING:
            runner = self._runner(o)
            if not runner.prepared and not runner.ended:
                runner.prepare(o.spec, self.cfg.images, quiet=True)
            if runner.prepared and not runner.started and not runner.ended:
                self.shipping[runner.key] = runner.logs
                runner.start(o.spec)
