"""Waiting without losing a cancellation, and stopping tasks within a bound."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Collection
from typing import Any

import structlog

log = structlog.get_logger("corral.waits")

STOP_WAIT = 5.0
"""Seconds a manager's or an agent's tasks get to stop when it is told to: it always exits."""
FIRST_WAIT = 2.0
"""Seconds a cancelled task gets for its cleanup (a rollback, closing a connection) before it is
cancelled again."""


async def wait_set(event: asyncio.Event, seconds: float) -> bool:
    """Whether `event` was set within `seconds`.

    Not `asyncio.wait_for`: on Python 3.11 it returns normally when its task is cancelled in the
    loop turn the event is set (python/cpython#86296), and a loop that waits with it then never
    stops.  A manager sent SIGTERM just as an agent's last report woke its scheduling loop was found
    50 minutes later with its server closed and that loop still cycling."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def stop_tasks(tasks: Collection[asyncio.Task[Any]], within: float) -> set[asyncio.Task[Any]]:
    """Cancel `tasks` and wait for them, `within` seconds at most; returns those still running (and
    logs them).  One still running after FIRST_WAIT is cancelled again every half second: a
    cancellation can be lost (wait_set).  What a task failed with is logged, not lost."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    pending = set(tasks)
    for task in pending:
        task.cancel()
    wait = min(FIRST_WAIT, within)
    while pending:
        done, pending = await asyncio.wait(pending, timeout=max(min(wait, deadline - loop.time()), 0))
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.error("task failed", task=task.get_name(), error=repr(task.exception()))
        if not pending or loop.time() >= deadline:
            break
        for task in pending:
            task.cancel()
        wait = 0.5
    if pending:
        log.error("tasks did not stop", tasks=sorted(t.get_name() for t in pending), seconds=within)
    return pending


async def exit_when_stuck(within: float) -> None:
    """The end of a process's main coroutine: every task still running is stopped (stop_tasks), and
    if one will not stop the process exits now, with status 1.  `asyncio.run` would otherwise cancel
    them once more and wait for them without a bound, and a manager or an agent told to stop would
    hang."""
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if others and await stop_tasks(others, within):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
