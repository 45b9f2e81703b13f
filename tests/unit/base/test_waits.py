"""A loop that waits for an event with a time limit stops when it is cancelled, even in the very loop
turn the event is set: the manager's scheduling loop and retry engine, its PostgreSQL wake-ups and an
agent's report pusher wait so, and one that swallowed its cancellation kept a manager running after
SIGTERM (asyncio.wait_for on Python 3.11, python/cpython#86296)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Awaitable, Callable

import pytest

from corral import waits
from corral.waits import wait_set
from corral.wakeup import Wakeup
from tests.support.eventually import eventually, parked


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
    await eventually(lambda: parked(task), f"the {name} loop waiting for its event")
    wake()
    task.cancel()  # in the same turn: the event and the cancellation reach it together
    done, _ = await asyncio.wait([task], timeout=5)
    assert task in done and task.cancelled(), f"the {name} loop went on after its cancellation"


async def test_stopping_cancels_again_a_task_that_lost_its_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(waits, "FIRST_WAIT", 0.1)
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
    await eventually(lambda: parked(task), "the task asleep")
    assert await asyncio.wait_for(waits.stop_tasks([task], 5), 5) == set()
    assert task.cancelled() and swallowed == 2


async def test_stopping_gives_a_cleanup_its_time_before_cancelling_again() -> None:
    cleaned = asyncio.Event()

    async def tidy() -> None:
        try:
            await asyncio.sleep(30)
        finally:
            await asyncio.sleep(0.8)  # a rollback, a connection closed
            cleaned.set()

    task = asyncio.create_task(tidy())
    await eventually(lambda: parked(task), "the task asleep, its cleanup ahead")
    assert await waits.stop_tasks([task], 5) == set()
    assert cleaned.is_set()


async def test_stopping_leaves_a_task_that_never_stops_within_the_bound() -> None:
    stop = asyncio.Event()

    async def deaf() -> None:
        while not stop.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(30)

    task = asyncio.create_task(deaf(), name="deaf")
    await eventually(lambda: parked(task), "the task asleep")
    started = asyncio.get_running_loop().time()
    assert await waits.stop_tasks([task], 0.3) == {task}
    assert asyncio.get_running_loop().time() - started < 2
    stop.set()
    task.cancel()
    await asyncio.wait([task], timeout=5)


PROCESS = """
import asyncio, contextlib, sys
from corral.waits import exit_when_stuck

async def deaf(started):
    started.set()
    while True:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(30)

async def plain(started):
    started.set()
    await asyncio.sleep(30)

async def main():
    kinds = [plain, deaf] if sys.argv[1] == "deaf" else [plain]
    started = [asyncio.Event() for _ in kinds]
    for kind, event in zip(kinds, started):
        asyncio.create_task(kind(event))
    for event in started:  # each task is in its sleep
        await event.wait()
    await exit_when_stuck(0.3)

asyncio.run(main())
"""


@pytest.mark.parametrize(("kind", "status"), [("deaf", 1), ("plain", 0)])
def test_a_process_ends_even_when_a_task_will_not_stop(kind: str, status: int) -> None:
    """Without the bound, asyncio.run would wait for the deaf task for ever."""
    done = subprocess.run([sys.executable, "-c", PROCESS, kind], timeout=30, capture_output=True, text=True)
    assert done.returncode == status, done.stderr
    assert ("tasks did not stop" in done.stdout + done.stderr) is (kind == "deaf")
