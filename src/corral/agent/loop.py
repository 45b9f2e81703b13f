"""The agent's collaborators that run a loop: `run()` until `shutdown()`, as a Temporal worker."""

from __future__ import annotations

import asyncio

from corral.waits import STOP_WAIT, stop_tasks


class Loop:
    """`await run()` carries out `_loop()` until `shutdown()`, then returns.  `shutdown()` is
    idempotent and may come before, during or after `run()`: a loop shut down never starts."""

    name = "agent:loop"

    def __init__(self) -> None:
        self._running: asyncio.Task[object] | None = None
        self._shut = False

    async def _loop(self) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        if self._shut:
            return
        self._running = asyncio.current_task()
        try:
            await self._loop()
        except asyncio.CancelledError:
            if not self._shut:
                raise  # cancelled by its caller, not by shutdown(): that cancellation is theirs
        finally:
            self._running = None

    async def shutdown(self) -> None:
        if self._shut:
            return
        self._shut = True
        running = self._running
        if running is not None and running is not asyncio.current_task() and not running.done():
            await stop_tasks([running], STOP_WAIT)
