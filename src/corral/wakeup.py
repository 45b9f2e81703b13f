"""Signals: wake the scheduling loops early, and wake agents' long polls; with a `broadcast` set
(PostgreSQL: store/dialect/postgresql_notify.py), other managers on the same database are woken too."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from corral.waits import wait_set

log = structlog.get_logger("corral.loop")

ORDERS_READ_WAIT = 0.05
"""Seconds at most a cycle that handed orders waits for the long polls it woke to read them."""


class Wakeup:
    """Coalescing wake-ups; a missed signal only costs one poll interval, never correctness."""

    def __init__(self) -> None:
        self._scheduler = asyncio.Event()
        self.room_version = 1
        """Bumped whenever room may have been made; each group's loop keeps the last it saw (a
        fresh loop has seen none, so it places at once)."""
        self._retries = asyncio.Event()
        self._deployments = asyncio.Event()
        self._orders = asyncio.Condition()
        self.orders_version = 0
        self._waiting = 0
        """Long polls waiting for orders that no bump has woken yet."""
        self._unread = 0
        """Polls a bump woke that have not read their orders yet (each counted by one bump only)."""
        self._all_read = asyncio.Event()
        self._all_read.set()
        # Tells other managers (kind: "scheduler", "retries", "orders", "deployments"); None with one manager.
        self.broadcast: Callable[[str], None] | None = None

    @property
    def waiting(self) -> int:
        """Long polls waiting for orders that no bump has woken yet."""
        return self._waiting

    @property
    def unread(self) -> int:
        """Polls a bump woke that have not read their orders yet."""
        return self._unread

    async def receive(self, kind: str) -> None:
        """Another manager's wake-up: acted on here, never sent on again."""
        if kind == "scheduler":
            self.room_version += 1  # not told which kind: placement runs
            self._scheduler.set()
        elif kind == "retries":
            self._retries.set()
        elif kind == "deployments":
            self._deployments.set()
        elif kind == "orders":
            await self._bump_orders()

    def _tell_others(self, kind: str) -> None:
        if self.broadcast is not None:
            self.broadcast(kind)

    def scheduler(self, room: bool = True) -> None:
        """`room`: capacity may have been freed or the queue changed, so placement should run (an
        agent's report of kernels progressing, not ending, wakes the cycle without it)."""
        if room:
            self.room_version += 1
        self._scheduler.set()
        self._tell_others("scheduler")

    async def wait_scheduler(self, seconds: float) -> None:
        await wait_set(self._scheduler, seconds)
        self._scheduler.clear()

    def retries(self) -> None:
        self._retries.set()
        self._tell_others("retries")

    async def wait_retries(self, seconds: float) -> None:
        await wait_set(self._retries, seconds)
        self._retries.clear()

    def deployments(self) -> None:
        """A replica's health or a deployment's request changed: run the deployment handlers."""
        self._deployments.set()
        self._tell_others("deployments")

    async def wait_deployments(self, seconds: float) -> None:
        await wait_set(self._deployments, seconds)
        self._deployments.clear()

    async def orders_changed(self) -> None:
        """New orders are written: wake the long polls, and return once every poll woken has read
        (or after ORDERS_READ_WAIT).  A poll's reads take turns with the cycle's on the loop: were
        the cycle to go on at once, they would wait for its next handlers, and the orders of a
        just-placed session would reach its agent later by as much."""
        await self._bump_orders()
        self._tell_others("orders")  # an agent may long-poll another manager
        if self._all_read.is_set():
            return
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel (shutdown).
            async with asyncio.timeout(ORDERS_READ_WAIT):
                await self._all_read.wait()
        except TimeoutError:
            pass

    async def _bump_orders(self) -> None:
        async with self._orders:
            self.orders_version += 1
            self._unread += self._waiting
            self._waiting = 0
            self._settle()
            self._orders.notify_all()

    async def wait_orders(self, seen_version: int, seconds: float) -> bool:
        """Wait for orders newer than `seen_version`, at most `seconds`.  True when a bump woke
        it: the poll then reads and says `orders_read`.  False when the time ran out, or when the
        orders had changed before it waited (no bump counted it: it reads anyway)."""
        async with self._orders:
            if self.orders_version != seen_version:
                return False
            self._waiting += 1
            try:
                async with asyncio.timeout(seconds):
                    await self._orders.wait_for(lambda: self.orders_version != seen_version)
            except TimeoutError:
                pass
            except BaseException:
                # Cancelled (its request went away): it reads nothing, and no cycle waits for it.
                if self.orders_version != seen_version:
                    self.orders_read()  # a bump counted it
                else:
                    self._waiting -= 1
                raise
            if self.orders_version != seen_version:
                return True  # a bump counted it, even when its time ran out in the same turn
            self._waiting -= 1
            return False

    def orders_read(self) -> None:
        """A poll a bump woke has read its orders."""
        self._unread = max(self._unread - 1, 0)
        self._settle()

    def _settle(self) -> None:
        if self._unread:
            self._all_read.clear()
        else:
            self._all_read.set()


async def repeat(
    step: Callable[[], Awaitable[object]], idle: Callable[[], Awaitable[None]], failed: str, **context: Any
) -> None:
    """Run `step` for ever; after a step that did nothing (or failed, logged) wait on `idle`."""
    while True:
        try:
            busy = await step()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(failed, **context)
            busy = False
        if not busy:
            await idle()
