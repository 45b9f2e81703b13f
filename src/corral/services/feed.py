"""The outbox, live: one reader per manager hands each new event to every subscriber it is for.

Each subscriber has a bounded queue.  One that falls behind by a whole queue is dropped from the
feed and told where to resume (`Subscription.overflowed`): the manager's memory never grows with
a slow client, and the client loses nothing (it reads on from that position).

Rule for gap-free hand-over: the feed's `tail` is the position through which it has offered every
event to every subscriber then registered.  A subscriber registers under the feed's lock, which
the feed holds from each read to its fan-out, so every event after `joined_at` (the tail at that
moment) reaches its queue; what lies between the position it resumes from and `joined_at` it
reads from the database itself (all of it committed: the feed passes only committed events)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import structlog

from corral import metrics
from corral.domain.events import Position
from corral.domain.records import EventRecord
from corral.store import outbox
from corral.store.db import reading
from corral.store.unit import Engine

log = structlog.get_logger("corral.feed")

POLL = 0.05
"""Seconds between reads while someone subscribes: half of it is an event's mean wait."""
BATCH = 500
QUEUE = 1000
"""Events a subscriber may have waiting before it is told to resync."""


@dataclass(eq=False)
class Subscription:
    where: outbox.Filter
    joined_at: Position
    queue: asyncio.Queue[EventRecord]
    overflowed: bool = False
    """Its queue filled: nothing more is offered; it is to resync from what it last sent."""
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def wants(self, e: EventRecord, array_of: dict[str, str]) -> bool:
        w = self.where
        if w.projects is not None and e.project not in w.projects:
            return False
        if w.kinds and e.kind not in w.kinds:
            return False
        if w.session_id is not None and e.session_id != w.session_id:
            return False
        if w.project is not None and e.project != w.project:
            return False
        return w.array_id is None or (e.session_id is not None and array_of.get(e.session_id) == w.array_id)

    def offer(self, e: EventRecord) -> None:
        try:
            self.queue.put_nowait(e)
        except asyncio.QueueFull:
            self.overflowed = True
        self.arrived.set()


class Feed:
    """`run()` reads new events while anyone subscribes; `shutdown()` stops it (idempotent)."""

    def __init__(self, engine: Engine, queue: int = QUEUE, poll: float = POLL) -> None:
        self._engine = engine
        self._queue = queue
        self._poll = poll
        self._subs: set[Subscription] = set()
        self._lock = asyncio.Lock()
        self._someone = asyncio.Event()
        self._stopped = False
        self.tail: Position | None = None

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    async def subscribe(self, where: outbox.Filter) -> Subscription:
        async with self._lock:
            if not self._subs or self.tail is None:
                # Nobody was reading: start from what is committed now, not from a stale tail.
                async with reading(self._engine) as conn:
                    self.tail = await outbox.newest(conn)
            sub = Subscription(where, self.tail, asyncio.Queue(self._queue))
            self._subs.add(sub)
            metrics.STREAM_SUBSCRIBERS.set(len(self._subs))
            self._someone.set()
            return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs.discard(sub)
        metrics.STREAM_SUBSCRIBERS.set(len(self._subs))

    async def run(self) -> None:
        while not self._stopped:
            if not self._subs:
                self._someone.clear()
                await self._someone.wait()
                continue
            try:
                full = await self._step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("event feed read failed")
                full = False
            if not full:
                await asyncio.sleep(self._poll)

    async def _step(self) -> bool:
        """One read and its fan-out; True when a whole batch came (more may wait)."""
        async with self._lock:
            if self.tail is None:
                return False
            async with reading(self._engine) as conn:
                found = await outbox.read(conn, self.tail, BATCH)
                array_of = (
                    await outbox.arrays_of(conn, found) if any(s.where.array_id for s in self._subs) else {}
                )
            for e in found:
                for sub in list(self._subs):
                    if sub.wants(e, array_of):
                        sub.offer(e)
                        if sub.overflowed:
                            metrics.STREAM_RESYNCS.inc()
                            self.unsubscribe(sub)
            if found:
                self.tail = found[-1].position
            return len(found) == BATCH

    async def shutdown(self) -> None:
        self._stopped = True
        self._someone.set()
        for sub in self._subs:
            sub.arrived.set()
