"""Signals: wake the scheduling loops early, and wake agents' long polls; with a `broadcast` set
(PostgreSQL: store/notify.py), other managers on the same database are woken too."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

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
        self._orders = asyncio.Condition()
        self.orders_version = 0
        self._polls = 0
        """Long polls waiting for orders right now."""
        self._unread = 0
        """Of the polls the last bump woke, how many have not read their orders yet."""
        self._all_read = asyncio.Event()
        self._all_read.set()
        # Tells other managers (kind: "scheduler", "retries", "orders"); None with one manager.
        self.broadcast: Callable[[str], None] | None = None

    async def receive(self, kind: str) -> None:
        """Another manager's wake-up: acted on here, never sent on again."""
        if kind == "scheduler":
            self.room_version += 1  # not told which kind: placement runs
            self._scheduler.set()
        elif kind == "retries":
            self._retries.set()
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
        try:
            await asyncio.wait_for(self._scheduler.wait(), seconds)
        except TimeoutError:
            pass
        self._scheduler.clear()

    def retries(self) -> None:
        self._retries.set()
        self._tell_others("retries")

    async def wait_retries(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._retries.wait(), seconds)
        except TimeoutError:
            pass
        self._retries.clear()

    async def orders_changed(self) -> None:
        """New orders are written: wake the long polls, and return once they have read them (or
        after ORDERS_READ_WAIT).  A poll's reads take turns with the cycle's on the loop; the cycle
        going on at once made them wait for its next handlers (measured on an idle cluster: the
        orders of a placed session reached its agent 10 ms after their commit, 3 ms of it reading)."""
        await self._bump_orders()
        self._tell_others("orders")  # an agent may long-poll another manager
        try:
            await asyncio.wait_for(self._all_read.wait(), ORDERS_READ_WAIT)
        except TimeoutError:
            pass

    async def _bump_orders(self) -> None:
        async with self._orders:
            self.orders_version += 1
            self._unread = self._polls
            if self._unread:
                self._all_read.clear()
            self._orders.notify_all()

    async def wait_orders(self, seen_version: int, seconds: float) -> int | None:
        """Wait for orders newer than `seen_version`; the version that woke it, or None when the
        time ran out.  A poll woken says `orders_read` with that version once it has read."""
        async with self._orders:
            self._polls += 1
            try:
                await asyncio.wait_for(
                    self._orders.wait_for(lambda: self.orders_version != seen_version), seconds
                )
            except TimeoutError:
                return None
            finally:
                self._polls -= 1
            return self.orders_version

    def orders_read(self, version: int) -> None:
        """A poll woken by `version` has read its orders (a later bump counts its own polls)."""
        if version == self.orders_version and self._unread:
            self._unread -= 1
            if not self._unread:
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
