"""Reading the outbox: a caller sees only events of sessions in their projects."""

from __future__ import annotations

import asyncio
import time

from corral.domain.records import EventRecord, Principal
from corral.services.short_ids import full_id
from corral.store import retries
from corral.store.db import reading
from corral.store.unit import Engine

_POLL = 0.25


async def read(
    engine: Engine,
    who: Principal,
    after: int,
    limit: int,
    kinds: list[str] | None,
    session_id: str | None,
    wait: float = 0.0,
    newest: bool = False,
) -> list[EventRecord]:
    """Events after `after` (with `newest`, the last of them, newest first); with `wait`, polls
    until one arrives or the wait ends."""
    projects = None if who.is_admin else sorted(who.projects)
    if session_id is not None:
        async with reading(engine) as conn:
            session_id = await full_id(conn, who, session_id, "session")
    deadline = time.monotonic() + wait
    while True:
        async with reading(engine) as conn:
            found = await retries.events_after(conn, after, limit, kinds, projects, session_id, newest)
        if found or time.monotonic() >= deadline:
            return found
        await asyncio.sleep(_POLL)
