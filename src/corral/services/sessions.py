"""Session use cases: create (validated, idempotent), read with visibility, cancel."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from corral.domain.cause import TerminationReason
from corral.domain.resources import BUILTIN_SLOTS, ResourceSlots
from corral.domain.spec import SessionSpec
from corral.domain.status import TERMINAL_SESSION, SessionStatus
from corral.services.errors import Conflict, Forbidden, InvalidInput, NotFound
from corral.store import agents, auth, journal, sessions
from corral.store.auth import Principal
from corral.store.db import transaction
from corral.store.records import HistoryRecord, NewSession, SessionRecord


def _now() -> datetime:
    return datetime.now(UTC)


_KNOWN_SECONDS = 5.0
_known_names: dict[tuple[str, str], float] = {}


async def _known(
    conn: AsyncConnection, kind: str, name: str, exists: Callable[[AsyncConnection, str], Awaitable[bool]]
) -> bool:
    """Existence of a group or project, remembered briefly: they are created rarely, and only
    a positive answer is cached, so a new one is usable at once."""
    seen = _known_names.get((kind, name))
    if seen is not None and time.monotonic() - seen < _KNOWN_SECONDS:
        return True
    if not await exists(conn, name):
        return False
    _known_names[(kind, name)] = time.monotonic()
    return True


async def create(engine: AsyncEngine, who: Principal, spec: SessionSpec) -> tuple[SessionRecord, bool]:
    """Returns the session and whether it was created now (False: the caller's earlier identical
    request with this creation_id).  Idempotency is per caller: nobody else's session is ever found."""
    try:
        return await _create(engine, who, spec)
    except IntegrityError:
        # The same creation_id, committed by a concurrent request between our check and our insert.
        if not spec.creation_id:
            raise
        async with engine.connect() as conn:
            earlier = await _earlier(conn, who, spec)
        if earlier is None:
            raise
        return earlier, False


async def _earlier(conn: AsyncConnection, who: Principal, spec: SessionSpec) -> SessionRecord | None:
    """The caller's session made with this creation_id (409 if for a different request)."""
    assert spec.creation_id is not None
    earlier = await sessions.find_creation(conn, who.name, spec.creation_id)
    if earlier is None:
        return None
    session_id, digest = earlier
    if digest != spec.digest():
        raise Conflict(
            f"creation_id {spec.creation_id!r} was used for a different request",
            {"field": "creation_id", "session_id": session_id},
        )
    return await sessions.get(conn, session_id)


async def _create(engine: AsyncEngine, who: Principal, spec: SessionSpec) -> tuple[SessionRecord, bool]:
    now = _now()
    async with transaction(engine) as conn:
        if spec.creation_id:
            found = await _earlier(conn, who, spec)
            if found is not None:
                return found, False
        if not await _known(conn, "resource_group", spec.resource_group, agents.resource_group_exists):
            raise InvalidInput("resource_group", f"unknown resource group {spec.resource_group!r}")
        if not await _known(conn, "project", spec.project, auth.project_exists):
            raise InvalidInput("project", f"unknown project {spec.project!r}")
        if not who.is_admin and spec.project not in who.projects:
            raise Forbidden(f"you are not a member of project {spec.project!r}", {"field": "project"})
        await _check_fits(conn, spec)
        session_id = str(uuid.uuid4())
        new = NewSession(
            id=session_id, name=spec.name or f"session-{session_id[:8]}", owner=who.name, spec=spec
        )
        created = await sessions.insert_session(conn, new, now)
    return created, True


_capacity_cache: dict[str, tuple[float, list[ResourceSlots]]] = {}


async def _capacities(conn: AsyncConnection, group: str) -> list[ResourceSlots]:
    """Agents' declared capacities, remembered briefly (agents register rarely; the scheduler still
    places against live numbers, this only refuses the impossible)."""
    seen = _capacity_cache.get(group)
    if seen is not None and time.monotonic() - seen[0] < _KNOWN_SECONDS:
        return seen[1]
    found = await agents.capacities(conn, group)
    if found:
        _capacity_cache[group] = (time.monotonic(), found)
    return found


async def _check_fits(conn: AsyncConnection, spec: SessionSpec) -> None:
    """Refuse what no agent of the group could ever run; a group with no agent yet accepts anything
    (the scheduler then says why it waits)."""
    custom = set(spec.resources) - set(BUILTIN_SLOTS)
    if custom:
        undeclared = sorted(custom - await agents.declared_slots(conn))
        if undeclared:
            raise InvalidInput(
                f"resources.{undeclared[0]}", f"no agent declares the resource slot {undeclared[0]!r}"
            )
    capacities = await _capacities(conn, spec.resource_group)
    if not capacities:
        return
    for slot in sorted(spec.resources.nonzero()):
        largest = max(cap[slot] for cap in capacities)
        if spec.resources[slot] > largest:
            raise InvalidInput(
                f"resources.{slot}",
                f"{slot} {spec.resources[slot]} is more than any agent of resource group"
                f" {spec.resource_group!r} has (largest: {largest})",
            )


def _visible(who: Principal, s: SessionRecord) -> bool:
    return who.is_admin or s.spec.project in who.projects


async def get(engine: AsyncEngine, who: Principal, session_id: str) -> SessionRecord:
    async with engine.connect() as conn:
        found = await sessions.get(conn, session_id)
    if found is None or not _visible(who, found):
        raise NotFound(f"no session {session_id[:80]}", {"field": "id"})
    return found


async def list_visible(
    engine: AsyncEngine, who: Principal, statuses: list[str] | None, limit: int, offset: int
) -> list[SessionRecord]:
    async with engine.connect() as conn:
        return await sessions.list_sessions(
            conn,
            projects=None if who.is_admin else who.projects,
            statuses=statuses,
            limit=limit,
            offset=offset,
        )


async def waiting_reason(engine: AsyncEngine, session: SessionRecord) -> str | None:
    """Why a pending session waits (e.g. "unschedulable: ..."), from the scheduler's last word."""
    if session.status is not SessionStatus.PENDING:
        return None
    async with engine.connect() as conn:
        return await journal.latest_skip(conn, session.id)


async def history(engine: AsyncEngine, who: Principal, session_id: str) -> list[HistoryRecord]:
    await get(engine, who, session_id)
    async with engine.connect() as conn:
        return await journal.history_of(conn, session_id)


async def counts(engine: AsyncEngine, who: Principal) -> dict[str, int]:
    async with engine.connect() as conn:
        return await sessions.count_by_status(conn, None if who.is_admin else who.projects)


async def cancel(engine: AsyncEngine, who: Principal, session_id: str) -> SessionRecord:
    found = await get(engine, who, session_id)
    if found.status in TERMINAL_SESSION:
        raise Conflict(f"session {session_id} has already ended ({found.status})", {"field": "status"})
    async with transaction(engine) as conn:
        ok = await sessions.request_termination(
            conn, session_id, TerminationReason.USER_CANCELLED, f"cancelled by {who.name}", _now()
        )
    if not ok:
        raise Conflict(f"session {session_id} has already ended", {"field": "status"})
    return await get(engine, who, session_id)
