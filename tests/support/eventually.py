"""Waiting in async tests for what can be observed, never for a number of loop turns or a sleep.

`eventually` polls a condition until it holds, with a deadline (the sync tests' twin is
tests/support/cluster.py's `poll`, which fails with the same message).  `parked` and `settled` say
when tasks can no longer move by themselves: what a test needs before it asserts that something
has *not* happened."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


# A deadline of its own, not asyncio.timeout's (ASYNC109): the failure says what was last seen.
@overload
async def eventually(
    check: Callable[[], Awaitable[T]],
    what: str,
    timeout: float = 10.0,  # noqa: ASYNC109
    interval: float = 0.01,
) -> T: ...


@overload
async def eventually(
    check: Callable[[], T],
    what: str,
    timeout: float = 10.0,  # noqa: ASYNC109
    interval: float = 0.01,
) -> T: ...


async def eventually(
    check: Callable[[], Any],
    what: str,
    timeout: float = 10.0,  # noqa: ASYNC109
    interval: float = 0.01,
) -> Any:
    """Call `check` (a function, or an async one) until it returns something truthy, and return
    that; after `timeout` seconds fail with `what` and the last value it returned.

    It is called at once, then every `interval` seconds, and once more at the deadline.  An
    exception it raises (an assertion that something must not have happened meanwhile) ends the
    wait.  `interval=0` looks at every turn of the loop: for a state that lasts one turn only."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        last = check()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        left = deadline - loop.time()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        await asyncio.sleep(min(interval, left))


def parked(*tasks: asyncio.Task[Any]) -> bool:
    """Each task is suspended on a future nothing has resolved yet (a lock, an event, a condition,
    a sleep's timer): it cannot take another step until something outside it acts, or that sleep's
    time is up.  A task not started yet, woken but not yet run, or finished, is not parked.

    Reads Task._fut_waiter, the future a task waits on (None while it is ready to run): asyncio has
    no public way to ask."""
    for task in tasks:
        waiter = getattr(task, "_fut_waiter", None)
        if task.done() or waiter is None or waiter.done():
            return False
    return True


def settled(*tasks: asyncio.Task[Any]) -> bool:
    """Each task has finished or is parked: none of them will do anything more by itself."""
    return all(task.done() or parked(task) for task in tasks)
