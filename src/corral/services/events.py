"""Reading the outbox: a caller sees only events of their projects (admins: every event)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from corral.domain.events import EVENT_TYPES, Position, matching
from corral.domain.records import EventRecord, Principal
from corral.services.errors import Forbidden, InvalidInput
from corral.services.short_ids import full_id
from corral.store import outbox
from corral.store.db import reading
from corral.store.unit import Engine

_POLL = 0.25


@dataclass(frozen=True)
class Wanted:
    """What a caller asked to read, as given: event types (globs), a session, an array, a project."""

    types: tuple[str, ...] = ()
    session: str | None = None
    array: str | None = None
    project: str | None = None


def position(text: str | None, field: str = "after") -> Position | None:
    """A position a reader gave (None: none given); 422 naming `field` for one no event carried."""
    if text is None or text == "":
        return None
    try:
        return Position.parse(text)
    except ValueError as exc:
        raise InvalidInput(field, f"{field}: {exc}") from None


def kinds(patterns: tuple[str, ...]) -> list[str] | None:
    """The event types the patterns name (None: every type); 422 naming `type` for a pattern that
    names none, listing the known ones."""
    if not patterns:
        return None
    found: list[str] = []
    for pattern in patterns:
        named = matching(pattern)
        if not named:
            known = ", ".join(EVENT_TYPES)
            raise InvalidInput("type", f"type: {pattern[:80]!r} names no event type (known: {known})")
        found += [t for t in named if t not in found]
    return found


async def scope(engine: Engine, who: Principal, wanted: Wanted) -> outbox.Filter:
    """The store's filter for what `who` asked: within their projects, with a session's short id
    made whole (404 when they see no such session)."""
    if wanted.project is not None and not who.is_admin and wanted.project not in who.projects:
        raise Forbidden(f"not a member of project {wanted.project[:80]}", {"field": "project"})
    session_id = wanted.session
    if session_id is not None:
        async with reading(engine) as conn:
            session_id = await full_id(conn, who, session_id, "session")
    return outbox.Filter(
        projects=None if who.is_admin else sorted(who.projects),
        kinds=kinds(wanted.types),
        session_id=session_id,
        array_id=wanted.array,
        project=wanted.project,
    )


async def read(
    engine: Engine,
    who: Principal,
    after: Position | None,
    limit: int,
    wanted: Wanted = Wanted(),
    wait: float = 0.0,
    newest: bool = False,
) -> list[EventRecord]:
    """Events after `after` (from the first; with `newest`, the last of them, newest first); with
    `wait`, polls until one arrives or the wait ends."""
    where = await scope(engine, who, wanted)
    deadline = time.monotonic() + wait
    while True:
        async with reading(engine) as conn:
            found = await outbox.read(conn, after or Position(), limit, where, newest)
        if found or time.monotonic() >= deadline:
            return found
        await asyncio.sleep(_POLL)


async def newest(engine: Engine) -> Position:
    """Where a stream opened now should start so that it misses nothing committed after this call
    (a page reads this before what it shows, then follows from here)."""
    async with reading(engine) as conn:
        return await outbox.newest(conn)
