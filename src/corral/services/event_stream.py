"""One subscriber's stream of events: what it missed, from the database, then the feed's, live.

Nothing missed and nothing repeated: events up to the feed's tail when it joined are read from
the database (services/feed.py), later ones come from its queue, and any at or before the last
one sent is dropped (the feed's and the database's reads may overlap)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from corral.domain.events import Position
from corral.domain.records import EventRecord
from corral.services.feed import Feed
from corral.store import outbox
from corral.store.db import reading
from corral.store.unit import Engine

PAGE = 500
RECHECK = 15.0
"""Seconds between checks that the subscriber may still read (a revoked key, an ended sign-in
ends its open streams within this)."""


@dataclass(frozen=True)
class Opened:
    """The stream's first item: where it starts (after `position`)."""

    position: Position


@dataclass(frozen=True)
class Resync:
    """The stream ends here: read on from `position` (the subscriber fell a whole queue behind)."""

    position: Position


async def stream(
    feed: Feed,
    engine: Engine,
    where: outbox.Filter,
    after: Position | None,
    allowed: Callable[[], Awaitable[bool]] | None = None,
    recheck: float = RECHECK,
) -> AsyncIterator[list[EventRecord] | Opened | Resync]:
    """The events `where` lets through (services/events.scope) after `after` (None: after the
    newest), in commit order and in batches (what is at hand at once: one write to the client),
    until the caller stops reading or the feed is shut down: `Opened` first, and a `Resync` last
    when it fell behind.  `allowed` is asked every `recheck` seconds whether the subscriber may
    still read; once it says no, the stream ends."""
    sub = await feed.subscribe(where)
    try:
        last = sub.joined_at if after is None else after
        checked = time.monotonic()
        yield Opened(last)
        while last < sub.joined_at:
            async with reading(engine) as conn:
                page = await outbox.read(conn, last, PAGE, where)
            batch = [e for e in page if e.position <= sub.joined_at]
            if batch:
                yield batch
                last = batch[-1].position
            if len(batch) < PAGE:
                break
        while True:
            batch = []
            while not sub.queue.empty():
                e = sub.queue.get_nowait()
                if e.position > last:
                    batch.append(e)
                    last = e.position
            if batch:
                yield batch
            if sub.overflowed:
                yield Resync(last)
                return
            if feed.stopped:
                return
            if allowed is not None and time.monotonic() >= checked + recheck:
                if not await allowed():
                    return
                checked = time.monotonic()
            sub.arrived.clear()
            if sub.queue.empty() and not sub.overflowed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(sub.arrived.wait(), recheck if allowed is not None else None)
    finally:
        feed.unsubscribe(sub)
