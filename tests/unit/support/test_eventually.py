"""The tests' wait for a condition (tests/support/eventually.py): it returns what the condition
gave once it holds, fails naming what it waited for and what it last saw, and keeps its deadline."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.eventually import eventually, parked, settled


async def test_returns_the_first_truthy_value_the_check_gives() -> None:
    seen: list[int] = []

    def check() -> list[int] | None:
        seen.append(len(seen))
        return seen[:] if len(seen) == 3 else None

    assert await eventually(check, "the third look", interval=0) == [0, 1, 2]
    assert len(seen) == 3  # not called again once it held


async def test_an_async_check_is_awaited() -> None:
    event = asyncio.Event()
    asyncio.get_running_loop().call_later(0.02, event.set)

    async def check() -> str:
        await asyncio.sleep(0)
        return "set" if event.is_set() else ""

    assert await eventually(check, "the event") == "set"


async def test_a_check_that_never_holds_fails_naming_what_and_the_last_value() -> None:
    with pytest.raises(AssertionError) as failed:
        await eventually(lambda: [], "the list to fill", timeout=0.05)
    assert str(failed.value) == "timed out after 0.05s waiting for the list to fill (last: [])"


async def test_it_keeps_its_deadline_and_looks_once_more_at_it() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    looks: list[float] = []

    def check() -> bool:
        looks.append(loop.time() - started)
        return False

    with pytest.raises(AssertionError, match=r"timed out after 0\.3s waiting for nothing"):
        await eventually(check, "nothing", timeout=0.3, interval=0.1)
    assert 0.3 <= loop.time() - started < 2
    assert looks[0] < 0.1 and looks[-1] >= 0.3 and 3 <= len(looks) <= 6


async def test_an_assertion_in_the_check_ends_the_wait_at_once() -> None:
    def check() -> bool:
        raise AssertionError("it happened meanwhile")

    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(AssertionError, match="it happened meanwhile"):
        await eventually(check, "anything", timeout=30)
    assert loop.time() - started < 1


async def test_parked_and_settled_tell_a_waiting_task_from_one_that_can_run() -> None:
    event = asyncio.Event()
    task = asyncio.create_task(event.wait())
    assert not parked(task) and not settled(task)  # not started yet
    await eventually(lambda: parked(task), "the task waiting on the event")
    assert settled(task)
    event.set()
    assert not parked(task) and not settled(task)  # woken, not yet run
    await eventually(task.done, "the task to finish")
    assert settled(task) and not parked(task)
