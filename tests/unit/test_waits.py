"""A loop that waits for an event with a time limit stops when it is cancelled, even in the very loop
turn the event is set: the manager's scheduling loop and retry engine, its PostgreSQL wake-ups and an
agent's report pusher wait so, and one that swallowed its cancellation kept a manager running after
SIGTERM (asyncio.wait_for on Python 3.11, python/cpython#86296)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import pytest

from corral.api import app
from corral.waits import wait_set
from corral.wakeup import Wakeup


async def test_wait_set_says_whether_the_event_came_in_time() -> None:
    event = asyncio.Event()
    assert await wait_set(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_set(event, 30) is True


def _loops() -> list[tuple[str, Callable[[], tuple[Callable[[], Awaitable[object]], Callable[[], None]]]]]:
    """(name, make) where make() gives one wait of a loop and what sets its event."""

    def plain() -> tuple[Callable[[], Awaitable[object]], Callable[[], None]]:
        event = asyncio.Event()
        return lambda: wait_set(event, 30), event.set

    def scheduler() -> tuple[Callable[[], Awaitable[object]], Callable[[], None]]:
        w = Wakeup()
        return lambda: w.wait_scheduler(30), w.scheduler

    def retries() -> tuple[Callable[[], Awaitable[object]], Callable[[], None]]:
        w = Wakeup()
        return lambda: w.wait_retries(30), w.retries

    return [("wait_set", plain), ("scheduler", scheduler), ("retries", retries)]


@pytest.mark.parametrize(("name", "make"), _loops(), ids=[n for n, _ in _loops()])
async def test_a_waiting_loop_stops_when_cancelled_as_its_event_is_set(
    name: str, make: Callable[[], tuple[Callable[[], Awaitable[object]], Callable[[], None]]]
) -> None:
    wait, wake = make()

    async def loop() -> None:
        while True:
            await wait()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)  # it is waiting
    wake()
    task.cancel()  # in the same turn: the event and the cancellation reach it together
    done, _ = await asyncio.wait([task], timeout=5)
    assert task in done and task.cancelled(), f"the {name} loop went on after its cancellation"


async def test_the_managers_shutdown_cancels_again_a_task_that_lost_its_cancellation() -> None:
    swallowed = 0

    async def stubborn() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                swallowed += 1
                if swallowed > 1:
                    raise

    task = asyncio.create_task(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    await asyncio.wait_for(app._stop([task]), 5)
    assert task.cancelled() and swallowed == 2


async def test_the_managers_shutdown_leaves_a_task_that_never_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "STOP_WAIT", 0.3)
    stop = asyncio.Event()

    async def deaf() -> None:
        while not stop.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(30)

    task = asyncio.create_task(deaf(), name="deaf")
    await asyncio.sleep(0)
    started = asyncio.get_running_loop().time()
    await app._stop([task])
    assert asyncio.get_running_loop().time() - started < 2 and not task.done()
    stop.set()
    task.cancel()
    await asyncio.wait([task], timeout=5)
