"""Session use cases: create (validated, idempotent), read with visibility, cancel."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from corral.domain.cause import TerminationReason
from corral.domain.resources import BUILTIN_SLOTS, ResourceError, ResourceSlots
from corral.domain.status import TERMINAL_SESSION
from corral.services.errors import Conflict, Forbidden, InvalidInput, NotFound
from corral.store import agents, auth, sessions
from corral.store.auth import Principal
from corral.store.db import transaction
from corral.store.records import NewSession, SessionRecord

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
DEFAULT_RESOURCES: dict[str, object] = {"cpu": 1}


@dataclass(frozen=True)
class SessionSpec:
    """A create request, already shaped by the API schema."""

    command: list[str]
    resources: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    name: str | None = None
    type: str = "batch"
    cluster_size: int = 1
    priority: int = 10
    resource_group: str = "default"
    project: str = "default"
    placement: str = "concentrated"
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    timeout: int | None = None
    error_strategy: str = "earliest"
    retry_policy: dict[str, Any] | None = None
    retry_policies: list[str] = field(default_factory=list)
    creation_id: str | None = None


def _now() -> datetime:
    return datetime.now(UTC)


def parse_resources(raw: dict[str, Any]) -> ResourceSlots:
    try:
        slots = ResourceSlots.parse(raw)
    except ResourceError as exc:
        raise InvalidInput(f"resources.{exc.field}", str(exc)) from exc
    return slots


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
    """Returns the session and whether it was created now (False: an earlier identical creation_id)."""
    if not spec.command or not all(isinstance(c, str) for c in spec.command) or not spec.command[0]:
        raise InvalidInput("command", "command must be a non-empty list of strings")
    if spec.name is not None and not _NAME.match(spec.name):
        raise InvalidInput("name", "name must be 1-128 letters, digits, '.', '_' or '-'")
    slots = parse_resources(spec.resources)
    now = _now()
    async with transaction(engine) as conn:
        if spec.creation_id:
            existing = await sessions.id_for_creation(conn, spec.creation_id)
            if existing:
                found = await sessions.get(conn, existing)
                assert found is not None
                return found, False
        if not await _known(conn, "resource_group", spec.resource_group, agents.resource_group_exists):
            raise InvalidInput("resource_group", f"unknown resource group {spec.resource_group!r}")
        if not await _known(conn, "project", spec.project, auth.project_exists):
            raise InvalidInput("project", f"unknown project {spec.project!r}")
        if not who.is_admin and spec.project not in who.projects:
            raise Forbidden(f"you are not a member of project {spec.project!r}", {"field": "project"})
        custom = set(slots) - set(BUILTIN_SLOTS)
        if custom:
            undeclared = sorted(custom - await agents.declared_slots(conn))
            if undeclared:
                raise InvalidInput(
                    f"resources.{undeclared[0]}", f"no agent declares the resource slot {undeclared[0]!r}"
                )
        session_id = str(uuid.uuid4())
        new = NewSession(
            id=session_id,
            name=spec.name or f"session-{session_id[:8]}",
            type=spec.type,
            priority=spec.priority,
            resource_group=spec.resource_group,
            project=spec.project,
            owner=who.name,
            cluster_size=spec.cluster_size,
            resources=slots.nonzero(),
            placement=spec.placement,
            command=spec.command,
            env=spec.env,
            image=spec.image,
            timeout=spec.timeout,
            error_strategy=spec.error_strategy,
            retry_policy=spec.retry_policy,
            retry_policies=spec.retry_policies,
            creation_id=spec.creation_id or session_id,
        )
        created = await sessions.insert_session(conn, new, now)
    return created, True


def _visible(who: Principal, s: SessionRecord) -> bool:
    return who.is_admin or s.project in who.projects


async def get(engine: AsyncEngine, who: Principal, session_id: str) -> SessionRecord:
    async with engine.connect() as conn:
        found = await sessions.get(conn, session_id)
    if found is None or not _visible(who, found):
        raise NotFound(f"no session {session_id}", {"field": "id"})
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
