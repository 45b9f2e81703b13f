"""Signals: wake the scheduling loops early, and wake agents' long polls; with a `broadcast` set
(PostgreSQL: store/notify.py), other managers on the same database are woken too."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

log = structlog.get_logger("corral.loop")


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
        await self._bump_orders()
        self._tell_others("orders")  # an agent may long-poll another manager

    async def _bump_orders(self) -> None:
        async with self._orders:
            self.orders_version += 1
            self._orders.notify_all()

    async def wait_orders(self, seen_version: int, seconds: float) -> None:
        async with self._orders:
            try:
                await asyncio.wait_for(
                    self._orders.wait_for(lambda: self.orders_version != seen_version), seconds
                )
            except TimeoutError:
                pass


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
