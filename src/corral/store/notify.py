"""Wake-ups across managers on one PostgreSQL database: LISTEN/NOTIFY on one channel.

A session submitted through manager B is placed by the scheduling loop of manager A (which holds the
group's lease) at once, not at A's next poll; an order placed by A reaches an agent long-polling B.
Notifications are only hints: each manager still polls, so a lost one costs a poll interval at worst.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import structlog
from sqlalchemy.engine import URL

from corral.wakeup import Wakeup

log = structlog.get_logger("corral.notify")

CHANNEL = "corral_wakeup"
KINDS = frozenset({"scheduler", "retries", "orders"})
KEEPALIVE = 30.0  # seconds between checks of an idle wake-up connection


class Notifier:
    """Sends this manager's wake-ups to the others and hands theirs to its `Wakeup`."""

    def __init__(self, url: URL, wakeup: Wakeup) -> None:
        self._dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._wakeup = wakeup
        self._me = uuid.uuid4().hex[:12]  # our own notifications come back to us: ignored
        self._outbox: set[str] = set()
        self._pending = asyncio.Event()
        self._conn: Any = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connected = asyncio.Event()

    def send(self, kind: str) -> None:
        """Queue a wake-up (coalesced: one NOTIFY per kind however many arrive meanwhile)."""
        self._outbox.add(kind)
        self._pending.set()

    async def run(self) -> None:
        """Listen and send until cancelled; reconnect after a lost connection."""
        delay = 0.5
        while True:
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database restarting, a network blip
                log.warning("wake-up channel lost; managers fall back to polling", error=type(exc).__name__)
            finally:
                # A session that did connect starts the backoff afresh; failed connects double it.
                delay = 0.5 if self.connected.is_set() else min(delay * 2, 10.0)
                await self.shutdown()
            await asyncio.sleep(delay)

    async def _session(self) -> None:
        self._conn = await asyncpg.connect(self._dsn)
        await self._conn.add_listener(CHANNEL, self._heard)
        self._conn.add_termination_listener(lambda _conn: self._pending.set())
        self.connected.set()
        for kind in KINDS:
            # What other managers said while we were not listening is lost: look at everything now.
            await self._wakeup.receive(kind)
        while True:
            try:
                await asyncio.wait_for(self._pending.wait(), KEEPALIVE)
            except TimeoutError:
                # A connection can die without a word (a half-open socket): ask it something.
                await self._conn.execute("SELECT 1", timeout=KEEPALIVE)
                continue
            self._pending.clear()
            if self._conn.is_closed():
                raise ConnectionError("the wake-up connection was closed")
            while self._outbox:
                kind = min(self._outbox)
                self._outbox.discard(kind)  # a send meanwhile queues it again: it follows a later commit
                try:
                    await self._conn.execute("SELECT pg_notify($1, $2)", CHANNEL, f"{self._me}:{kind}")
                except BaseException:
                    self._outbox.add(kind)  # kept for the next connection
                    raise

    def _heard(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        sender, _, kind = payload.partition(":")
        if sender != self._me and kind in KINDS:
            task = asyncio.get_running_loop().create_task(self._wakeup.receive(kind))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def shutdown(self) -> None:
        """Close the connection (idempotent)."""
        self.connected.clear()
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            await conn.close(timeout=2)
