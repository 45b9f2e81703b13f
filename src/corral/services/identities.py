"""Who holds an API key, read once for all the requests with that key that wait at once.

Every request's key is read from the database, never cached (a revoked key is refused from its
next request, on every manager).  Requests with one key that arrive while a read of it runs wait
for the next read, which starts when that one ends, and share it: each is answered by a read that
began after it arrived, as if it had read alone, but 32 requests at once cost about two reads,
not 32 (bench/serve.py: the proxy's throughput on PostgreSQL)."""

from __future__ import annotations

import asyncio

from corral.domain.records import Principal
from corral.store import auth
from corral.store.db import reading
from corral.store.unit import Engine

_next: dict[tuple[int, str], asyncio.Future[Principal | None]] = {}
"""The read each waiting key's requests wait for (not begun yet)."""
_reading: set[tuple[int, str]] = set()
_tasks: set[asyncio.Task[None]] = set()


async def holder(reader: Engine, key: str) -> Principal | None:
    """The key's caller (None for a key nobody has), from a read begun after this call."""
    k = (id(reader), key)
    waiting = _next.get(k)
    if waiting is None:
        waiting = _next[k] = asyncio.get_running_loop().create_future()
        waiting.add_done_callback(_retrieved)
        if k not in _reading:
            _reading.add(k)
            task = asyncio.create_task(_reads(reader, key, k))
            _tasks.add(task)
            task.add_done_callback(_tasks.discard)
    # Shielded: a caller that goes away does not cancel the others' read.
    return await asyncio.shield(waiting)


def _retrieved(f: asyncio.Future[Principal | None]) -> None:
    """A read's failure is its waiters'; with none left (all gone), it is not an unseen error."""
    if not f.cancelled():
        f.exception()


async def _reads(reader: Engine, key: str, k: tuple[int, str]) -> None:
    try:
        while (batch := _next.pop(k, None)) is not None:  # later arrivals wait for the next read
            try:
                async with reading(reader) as conn:
                    found = await auth.principal_for(conn, key)
            except asyncio.CancelledError:
                batch.cancel()
                raise
            except Exception as exc:
                batch.set_exception(exc)
            else:
                batch.set_result(found)
    finally:
        _reading.discard(k)
        left = _next.pop(k, None)
        if left is not None:  # stopped (the manager is stopping): nobody waits for ever
            left.cancel()
