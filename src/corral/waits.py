"""Waiting for an event, with a time limit, without losing a cancellation."""

from __future__ import annotations

import asyncio


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
