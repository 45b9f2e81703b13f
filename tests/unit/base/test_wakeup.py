"""A cycle that hands orders lets the long polls it woke read them before it goes on, and never
waits for a poll that will not read (gone, timed out, or never woken)."""

from __future__ import annotations

import asyncio

import pytest

from corral import wakeup as wakeup_module
from corral.wakeup import Wakeup
from tests.support.eventually import eventually, settled

RELEASED = 1.0
"""Seconds within which a cycle released by the polls' reads returns (the bound is set far above)."""


@pytest.fixture(autouse=True)
def _far_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the polls can release a cycle within RELEASED: the time bound is a minute."""
    monkeypatch.setattr(wakeup_module, "ORDERS_READ_WAIT", 60.0)


async def _poll(w: Wakeup, may_read: asyncio.Event, read: list[int]) -> None:
    """A long poll: waits for new orders, reads them once allowed, says so."""
    assert await w.wait_orders(w.orders_version, 30)
    await may_read.wait()
    read.append(w.orders_version)
    w.orders_read()


async def test_orders_changed_returns_once_every_woken_poll_has_read() -> None:
    w = Wakeup()
    gates = [asyncio.Event(), asyncio.Event()]
    read: list[int] = []
    polls = [asyncio.create_task(_poll(w, g, read)) for g in gates]
    await eventually(lambda: w.waiting == 2, "both polls waiting for orders")
    changed = asyncio.create_task(w.orders_changed())
    await eventually(lambda: w.unread == 2 and settled(changed, *polls), "both polls woken, at their gates")
    assert not changed.done()  # both polls woken, neither has read
    gates[0].set()
    await eventually(lambda: read and settled(changed, *polls), "the first poll's read, and all still")
    assert len(read) == 1 and not changed.done()
    gates[1].set()
    await asyncio.wait_for(changed, RELEASED)
    await asyncio.gather(*polls)


async def test_orders_changed_returns_at_once_when_no_poll_waits() -> None:
    w = Wakeup()
    await asyncio.wait_for(w.orders_changed(), RELEASED)
    assert w.orders_version == 1


async def test_a_poll_that_never_reads_holds_the_cycle_only_for_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wakeup_module, "ORDERS_READ_WAIT", 0.2)
    w = Wakeup()
    poll = asyncio.create_task(_poll(w, asyncio.Event(), []))
    await eventually(lambda: w.waiting == 1, "the poll waiting for orders")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(w.orders_changed(), 5)
    assert 0.2 <= loop.time() - started < 2
    poll.cancel()
    with pytest.raises(asyncio.CancelledError):
        await poll


async def test_a_later_bump_still_waits_for_a_poll_an_earlier_one_woke() -> None:
    w = Wakeup()
    gate = asyncio.Event()
    slow = asyncio.create_task(_poll(w, gate, []))
    await eventually(lambda: w.waiting == 1, "the poll waiting for orders")
    first = asyncio.create_task(w.orders_changed())
    await eventually(lambda: w.waiting == 0 and settled(first, slow), "the poll woken, held at its gate")
    second = asyncio.create_task(w.orders_changed())  # no poll waits now: `slow` is reading
    await eventually(lambda: w.orders_version == 2 and settled(first, second, slow), "the second bump")
    assert not first.done() and not second.done()
    gate.set()
    await asyncio.wait_for(asyncio.gather(first, second, slow), RELEASED)
    await asyncio.wait_for(w.orders_changed(), RELEASED)  # nothing left unread


async def test_a_poll_cancelled_after_its_wake_is_not_waited_for() -> None:
    w = Wakeup()
    poll = asyncio.create_task(w.wait_orders(w.orders_version, 30))
    await eventually(lambda: w.waiting == 1, "the poll waiting for orders")
    await w.receive("orders")  # woken (another manager's bump: nothing waits here)...
    poll.cancel()  # ...and gone before it could read
    with pytest.raises(asyncio.CancelledError):
        await poll
    await asyncio.wait_for(w.orders_changed(), RELEASED)


async def test_a_poll_that_timed_out_is_not_waited_for() -> None:
    w = Wakeup()
    assert not await w.wait_orders(w.orders_version, 0.01)
    await asyncio.wait_for(w.orders_changed(), RELEASED)


async def test_a_poll_whose_orders_changed_before_it_waited_is_not_counted() -> None:
    w = Wakeup()
    gate = asyncio.Event()
    counted = asyncio.create_task(_poll(w, gate, []))
    await eventually(lambda: w.waiting == 1, "the poll waiting for orders")
    seen = w.orders_version
    changed = asyncio.create_task(w.orders_changed())
    await eventually(lambda: w.unread == 1 and settled(changed, counted), "the poll woken, held at its gate")
    # A poll that read before that bump: it returns at once, and saying nothing it releases no one.
    assert not await w.wait_orders(seen, 30)
    await eventually(lambda: settled(changed, counted), "the cycle and the poll still")
    assert not changed.done()
    gate.set()
    await asyncio.wait_for(asyncio.gather(changed, counted), RELEASED)
