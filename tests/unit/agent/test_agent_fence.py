"""An order reply answered before the manager fenced the agent is never acted on: the fence forgot
every kernel, and the reply left out the specs of the kernels the agent said it had started (the
agent would have built runners from empty specs).  The agent's own loop against a stand-in for
the manager's HTTP side, which is the only way to hold a reply until the fence is half done."""

from __future__ import annotations

import asyncio
import time

from corral.agent.agent import Agent
from corral.agent.commands import Command, Ping
from corral.agent.settings import AgentSettings
from corral.domain.status import KernelStatus
from corral.protocol.messages import RegisterIn, RegisterOut
from corral.protocol.orders import KernelOrder, OrdersIn, OrdersOut


def registered(epoch: int) -> RegisterOut:
    """The manager's answer to a registration: the new epoch, and settings as it sends them."""
    return RegisterOut(
        epoch=epoch,
        agent_lease=15.0,
        fence_timeout=30.0,
        heartbeat_interval=3.0,
        long_poll=5.0,
        log_cap=1 << 20,
    )


class Manager:
    """Answers the agent's first poll only once a fence (from another loop) has forgotten its
    kernels while its registration is still under way."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.registering = asyncio.Event()
        self.registered = asyncio.Event()
        self.polls = 0
        self.second_poll = asyncio.Event()

    async def orders(self, body: OrdersIn) -> OrdersOut:
        self.polls += 1
        if self.polls > 1:
            self.second_poll.set()
            await asyncio.Event().wait()
        fence = asyncio.create_task(self.agent.fenced("epoch fenced", 1))
        await self.registering.wait()  # kernels forgotten, epoch not yet renewed
        order = KernelOrder(
            kernel_id="k1",
            session_id="s1",
            rank=0,
            generation=1,
            status=KernelStatus.CREATING,
            kill=False,
        )
        self.fence = fence
        return OrdersOut(fingerprint="f1", orders=[order], recorded=True)

    async def register(self, body: RegisterIn) -> RegisterOut:
        self.registering.set()
        await self.registered.wait()
        return registered(2)


async def test_an_order_reply_from_before_a_fence_is_dropped() -> None:
    agent = Agent(AgentSettings(id="a1", token="t"))
    agent.epoch = 1
    manager = Manager(agent)
    agent.client = manager  # type: ignore[assignment]
    acted: list[str] = []
    agent.pull.reconcile = lambda orders: acted.extend(o.kernel_id for o in orders)  # type: ignore[method-assign]
    pulling = asyncio.create_task(agent.pull.run())
    await asyncio.wait_for(manager.second_poll.wait(), 10)  # the first reply was read (and dropped)
    assert acted == []
    manager.registered.set()
    await asyncio.wait_for(manager.fence, 10)
    assert agent.epoch == 2
    pulling.cancel()
    await asyncio.gather(pulling, return_exceptions=True)


class Registrar:
    """The manager's registration: each one takes a round trip and fences the epoch before it."""

    def __init__(self) -> None:
        self.epoch = 1
        self.calls = 0

    async def register(self, body: RegisterIn) -> RegisterOut:
        self.calls += 1
        await asyncio.sleep(0.01)
        self.epoch += 1
        return registered(self.epoch)


async def test_loops_fenced_at_once_register_once() -> None:
    """The orders, reports and log loops can each hear "fenced" for the same epoch.  One new
    registration serves them all: a second one would fence the first, and a kernel ordered under
    the first would be lost (seen in test_faults' lost-agent test on PostgreSQL under load)."""
    agent = Agent(AgentSettings(id="a1", token="t"))
    agent.epoch = 1
    registrar = Registrar()
    agent.client = registrar  # type: ignore[assignment]
    await asyncio.wait_for(
        asyncio.gather(*(agent.fenced(f"loop {i}", 1) for i in range(3))),
        10,
    )
    assert (registrar.calls, agent.epoch) == (1, 2)


async def test_a_refusal_of_an_epoch_already_replaced_changes_nothing() -> None:
    """A long poll sent under epoch 1 is refused after another loop has already registered epoch 2:
    epoch 2 and what was ordered under it stay (a new registration would declare them gone)."""
    agent = Agent(AgentSettings(id="a1", token="t"))
    agent.epoch = 1
    registrar = Registrar()
    agent.client = registrar  # type: ignore[assignment]
    await agent.fenced("the log loop's refusal", 1)
    assert agent.epoch == 2
    agent.kernels["k2"] = "ordered under epoch 2"  # type: ignore[assignment]
    await agent.fenced("the poll sent under epoch 1, refused now", 1)
    assert (registrar.calls, agent.epoch, list(agent.kernels)) == (1, 2, ["k2"])


class Link:
    """The supervisor's end of the pipe: what the agent sent it."""

    def __init__(self) -> None:
        self.alive = True
        self.sent: list[Command] = []

    def send(self, command: Command) -> bool:
        self.sent.append(command)
        return True


def test_contact_after_the_fence_passed_renews_the_supervisors_deadline_at_once() -> None:
    """An agent stopped past its fence deadline, and back in contact before the manager fenced it,
    gets orders for new kernels: the supervisor must hear the new deadline before their starts, or
    it kills them (it kills every kernel while its deadline is past)."""
    agent = Agent(AgentSettings(id="a1", token="t"))
    agent.fence.timeout = 3.0
    agent.fence.last_contact = time.monotonic() - 10
    link = Link()
    agent.supervision.link = link  # type: ignore[assignment]
    agent.fence.contact(time.monotonic())
    [ping] = link.sent
    assert isinstance(ping, Ping) and ping.fence_at > time.monotonic()
    agent.fence.contact(time.monotonic())  # in contact all along: the fence watch's tick is enough
    assert len(link.sent) == 1
