"""Pulling the agent's orders: a long poll (which doubles as the heartbeat), and each reply carried
out against the kernels this agent holds (reconciled: what is not ordered any more is stopped)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from corral.agent.client import Fenced, ManagerUnreachable, Rejected
from corral.agent.identity import KernelIdentity
from corral.agent.kernel import KernelRunner
from corral.agent.loop import Loop
from corral.domain.status import KernelStatus
from corral.protocol.orders import KernelOrder, KernelSpec, OrdersIn

if TYPE_CHECKING:
    from corral.agent.agent import Agent

log = structlog.get_logger("corral.agent.pull")


class Puller(Loop):
    name = "agent:pull"

    def __init__(self, agent: Agent) -> None:
        super().__init__()
        self._agent = agent

    async def _loop(self) -> None:
        agent = self._agent
        seen = ""
        while True:
            epoch, fences = agent.epoch, agent.fences
            sent = time.monotonic()
            try:
                # The spec of a kernel started here is never read again (_act): not sent again.
                started = [k.key for k in agent.kernels.values() if k.started]
                body = OrdersIn(
                    agent_id=agent.cfg.id, epoch=epoch, seen=seen, wait=agent.long_poll, started=started
                )
                reply = await agent.client.orders(body)
            except Fenced as exc:
                await agent.fenced(str(exc), epoch)
                seen = ""
                continue
            except (ManagerUnreachable, Rejected) as exc:
                if isinstance(exc, Rejected):
                    log.error("orders refused or unreadable", error=str(exc))
                await asyncio.sleep(0.5)
                continue
            if epoch != agent.epoch or fences != agent.fences:
                # Answered before a fence that forgot every kernel (and, with `started`, without
                # the specs of those started): the next poll, under the new epoch, has it right.
                seen = ""
                continue
            if reply.recorded:
                agent.fence.contact(sent)
            seen = reply.fingerprint
            self.reconcile(reply.orders)

    def reconcile(self, orders: list[KernelOrder]) -> None:
        kernels = self._agent.kernels
        wanted = set()
        for o in orders:
            wanted.add(o.kernel_id)
            if (o.kernel_id, o.generation) in self._agent.push.finished:
                continue  # an order computed before our final report landed: never run twice
            try:
                self._act(o)
            except Exception as exc:  # one bad order fails its kernel, never the agent
                log.exception("cannot carry out an order", kernel=o.kernel_id)
                runner = self._runner(o)
                if not runner.ended:
                    runner.fail(f"the agent could not carry out the order: {exc!r}"[:1000])
        for kid, runner in list(kernels.items()):
            if kid in wanted:
                continue
            if not runner.started:
                runner.forget()
                del kernels[kid]  # prepared only, then re-scheduled or ended: nothing to stop
            elif not runner.ended and not runner.fenced:
                # No longer ours (declared gone): it must not keep running.
                log.warning("kernel not ordered any more: killing it", kernel=kid)
                runner.fence()

    def _runner(self, order: KernelOrder) -> KernelRunner:
        agent = self._agent
        link = agent.supervision.link
        assert link is not None, "orders arrive only after the supervisor started"
        runner = agent.kernels.get(order.kernel_id)
        if runner is not None and runner.generation != order.generation:
            # Re-placed here after an earlier placement: that one must not run on.
            runner.fence()
            runner = None
        if runner is None:
            cfg = agent.cfg
            runner = KernelRunner(
                order.kernel_id,
                order.generation,
                order.session_id,
                order.rank,
                Path(cfg.work_dir),
                link,
                cfg.grace,
                agent.push.queue,
                agent.log_cap,
                agent.identity or KernelIdentity.resolve(cfg.kernel_user, cfg.allow_root_kernels),
                agent.ship.add,
            )
            agent.kernels[order.kernel_id] = runner
        return runner

    def _rendezvous(self, o: KernelOrder, spec: KernelSpec) -> KernelSpec | None:
        """The order's spec with rank 0's port, or None when this agent cannot know it yet (the
        kernel then waits for the start order).  A gang on this agent alone gets the port its
        rank 0 picked: the orders of a session come in one reply, in rank order."""
        if spec.master_port:
            return spec
        first = next(
            (
                k
                for k in self._agent.kernels.values()
                if k.session_id == o.session_id and k.rank == 0 and not k.ended
            ),
            None,
        )
        if first is None or first.master_port is None:
            return None
        return spec.model_copy(update={"master_port": first.master_port})

    def _act(self, o: KernelOrder) -> None:
        agent = self._agent
        existing = agent.kernels.get(o.kernel_id)
        if existing is not None and existing.generation != o.generation:
            existing = None
        if o.kill:
            runner = existing or self._runner(o)
            runner.force_kill() if o.force else runner.kill(o.grace)
            return
        if o.status in (KernelStatus.PREPARING, KernelStatus.PULLING) and existing is None:
            spec = _spec(o)
            runner = self._runner(o)
            then = (lambda: self._start_at_once(o, spec, runner)) if spec.start_at_once else None
            runner.prepare(spec, agent.images, then=then)
        elif o.status is KernelStatus.CREATING:
            runner = self._runner(o)
            if runner.started or runner.ended or runner.pulling is not None:
                return  # its spec was not sent again (it said it started), or it starts once built
            spec = _spec(o)
            if runner.prepared:
                self._start(runner, spec)
            else:
                runner.prepare(spec, agent.images, quiet=True, then=lambda: self._start(runner, spec))

    def _start_at_once(self, o: KernelOrder, spec: KernelSpec, runner: KernelRunner) -> None:
        """Prepared on a prepare order that may start it: started when its rendezvous is known."""
        start = self._rendezvous(o, spec)
        if start is not None:
            self._start(runner, start, report_creating=True)

    def _start(self, runner: KernelRunner, spec: KernelSpec, report_creating: bool = False) -> None:
        if runner.ended or runner.forgotten or self._agent.kernels.get(runner.kernel_id) is not runner:
            return
        if spec.serve is not None:  # a deployment's replica: it listens where it is told
            port = self._agent.probe.port_for(runner, spec.serve)
            if port is None:
                runner.fail(f"no free port left in this agent's serve ports ({self._agent.cfg.serve_ports})")
                return
            spec = spec.model_copy(update={"env": {**spec.env, "CORRAL_PORT": str(port)}})
        runner.start(spec, report_creating=report_creating)


def _spec(o: KernelOrder) -> KernelSpec:
    """The spec a prepare or start order must carry (the manager leaves it out only for kernels
    this agent said it started)."""
    if o.spec is None:
        raise ValueError(f"the order for kernel {o.kernel_id} carries no spec")
    return o.spec
