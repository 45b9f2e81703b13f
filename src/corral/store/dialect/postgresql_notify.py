"""Wake-ups across managers on one PostgreSQL database: LISTEN/NOTIFY on one channel.

A session submitted through manager B is placed by the scheduling loop of manager A (which holds the
group's lease) at once, not at A's next poll; an order placed by A reaches an agent long-polling B.
Notifications are only hints: each manager still polls, so a lost one costs a poll interval at worst.
That is also why a manager sends them only while it knows another is listening: each says "hello"
when it starts listening and every HELLO seconds, and answers the hello of one it did not know, so
two managers know of each other within a round trip of the second one's start.  A manager alone (the
usual installation) sends nothing: a NOTIFY is a round trip, and its own comes back to it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import asyncpg
import structlog
from sqlalchemy.engine import URL

from corral.waits import wait_set
from corral.wakeup import Wakeup

log = structlog.get_logger("corral.notify")

CHANNEL = "corral_wakeup"
KINDS = frozenset({"scheduler", "retries", "orders", "deployments"})
HELLO = 10.0
"""Seconds between a manager's hellos, which also check that an idle connection still works."""
PEER_TTL = 3 * HELLO
"""A manager not heard from for this long is taken to be gone (nothing is sent for it alone)."""


class Notifier:
    """Sends this manager's wake-ups to the others and hands theirs to its `Wakeup`."""

    def __init__(self, url: URL, wakeup: Wakeup) -> None:
        self._dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._wakeup = wakeup
        self._me = uuid.uuid4().hex[:12]  # our own notifications come back to us: ignored
        self._outbox: set[str] = set()
        self._peers: dict[str, float] = {}
        """Other managers on the database: when each was last heard (monotonic)."""
        self._pending = asyncio.Event()
        self._conn: Any = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connected = asyncio.Event()

    @property
    def peers(self) -> int:
        """How many other managers are listening, as far as this one knows."""
        now = time.monotonic()
        return sum(1 for heard in self._peers.values() if now - heard < PEER_TTL)

    def send(self, kind: str) -> None:
        """Queue a wake-up (coalesced: one NOTIFY per kind however many arrive meanwhile); none
        while no other manager is known to listen."""
        if self.peers:
            self._queue(kind)

    def _queue(self, kind: str) -> None:
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
        self._queue("hello")
        for kind in KINDS:
            # What other managers said while we were not listening is lost: look at everything now.
            await self._wakeup.receive(kind)
        while True:
            if not await wait_set(self._pending, HELLO):
                # Also a check of the connection, which can die without a word (a half-open socket).
                self._queue("hello")
                now = time.monotonic()
                self._peers = {p: heard for p, heard in self._peers.items() if now - heard < PEER_TTL}
            self._pending.clear()
            if self._conn.is_closed():
                raise ConnectionError("the wake-up connection was closed")
            while self._outbox:
                kind = min(self._outbox)
                self._outbox.discard(kind)  # a send meanwhile queues it again: it follows a later commit
                try:
                    notify = ("SELECT pg_notify($1, $2)", CHANNEL, f"{self._me}:{kind}")
                    await self._conn.execute(*notify, timeout=HELLO)
                except BaseException:
                    self._outbox.add(kind)  # kept for the next connection
                    raise

    def _heard(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        sender, _, kind = payload.partition(":")
        if sender == self._me:
            return
        now = time.monotonic()
        if kind == "hello" and now - self._peers.get(sender, -PEER_TTL) >= PEER_TTL:
            self._queue("hello")  # a newcomer: it learns of us now, not at our next hello
        self._peers[sender] = now
        if kind in KINDS:
            task = asyncio.get_running_loop().create_task(self._wakeup.receive(kind))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def shutdown(self) -> None:
        """Close the connection (idempotent)."""
        self.connected.clear()
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            await conn.close(timeout=2)
