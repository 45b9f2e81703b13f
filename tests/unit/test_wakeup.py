"""A cycle that hands orders lets the long polls it woke read them before it goes on."""

from __future__ import annotations

import asyncio

import pytest

from corral import wakeup as wakeup_module
from corral.wakeup import Wakeup


async def _turns(n: int = 20) -> None:
    """Give every ready task `n` turns of the loop."""
    for _ in range(n):
        await asyncio.sleep(0)


async def _poll(w: Wakeup, may_read: asyncio.Event, read: list[int]) -> None:
    """A long poll: waits for new orders, reads them once allowed, says so."""
    woken = await w.wait_orders(w.orders_version, 30)
    assert woken is not None
    await may_read.wait()
    read.append(woken)
    w.orders_read(woken)


async def test_orders_changed_returns_once_every_woken_poll_has_read() -> None:
    w = Wakeup()
    gates = [asyncio.Event(), asyncio.Event()]
    read: list[int] = []
    polls = [asyncio.create_task(_poll(w, g, read)) for g in gates]
    await _turns()
    changed = asyncio.create_task(w.orders_changed())
    await _turns()
    assert not changed.done()  # both polls woken, neither has read
    gates[0].set()
    await _turns()
    assert len(read) == 1 and not changed.done()
    gates[1].set()
    await asyncio.wait_for(changed, 5)
    assert read == [w.orders_version, w.orders_version]
    await asyncio.gather(*polls)


async def test_orders_changed_returns_at_once_when_no_poll_waits() -> None:
    w = Wakeup()
    await asyncio.wait_for(w.orders_changed(), 0.5)
    assert w.orders_version == 1


async def test_a_poll_that_never_reads_holds_the_cycle_only_for_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wakeup_module, "ORDERS_READ_WAIT", 0.05)
    w = Wakeup()
    never = asyncio.Event()
    poll = asyncio.create_task(_poll(w, never, []))
    await _turns()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(w.orders_changed(), 5)
    assert loop.time() - started >= 0.05
    poll.cancel()


async def test_a_read_of_older_orders_does_not_release_a_newer_bump() -> None:
    w = Wakeup()
    first_gate, second_gate = asyncio.Event(), asyncio.Event()
    slow_read: list[int] = []
    slow = asyncio.create_task(_poll(w, first_gate, slow_read))
    await _turns()
    # Bump once: `slow` is woken by version 1 and is still reading when version 2 comes.
    first = asyncio.create_task(w.orders_changed())
    await _turns()
    other = asyncio.create_task(_poll(w, second_gate, []))
    await _turns()
    second = asyncio.create_task(w.orders_changed())
    await _turns()
    first_gate.set()  # says it read version 1
    await _turns()
    assert slow_read == [1] and not second.done()  # version 2's poll has not read yet
    second_gate.set()
    await asyncio.wait_for(second, 5)
    await asyncio.wait_for(first, 5)
    await asyncio.gather(slow, other)
