"""Creating sessions: a request checked (project, priority, policy, fit) and written once per
creation_id, alone or in the intake's batch."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from corral.clock import utcnow
from corral.domain.cluster import values_of
from corral.domain.errors import Duplicate
from corral.domain.priority import PriorityRefused, choose, effective
from corral.domain.records import NewSession, Principal, SessionRecord
from corral.domain.resources import BUILTIN_SLOTS, ResourceSlots
from corral.domain.spec import UNNAMED_PROJECT, RetryPolicy, SessionSpec
from corral.services import policies
from corral.services.errors import Conflict, Forbidden, InvalidInput
from corral.store import agents, auth, config, sessions, users
from corral.store.db import reading, transaction
from corral.store.unit import Engine, Tx

_KNOWN_SECONDS = 5.0


_known_names: dict[tuple[str, str], float] = {}


async def _known(conn: Tx, kind: str, name: str, exists: Callable[[Tx, str], Awaitable[bool]]) -> bool:
    """Existence of a group or project, remembered briefly: they are created rarely, and only
    a positive answer is cached, so a new one is usable at once."""
    seen = _known_names.get((kind, name))
    if seen is not None and time.monotonic() - seen < _KNOWN_SECONDS:
        return True
    if not await exists(conn, name):
        return False
    _known_names[(kind, name)] = time.monotonic()
    return True


async def create(
    engine: Engine,
    who: Principal,
    spec: SessionSpec,
    retry_fields: Mapping[str, Any] | None = None,
    requested_priority: int | None = None,
    arrived: datetime | None = None,
) -> tuple[SessionRecord, bool]:
    """Returns the session and whether it was created now (False: the caller's earlier identical
    request with this creation_id).  Idempotency is per caller: nobody else's session is ever found.

    `retry_fields` are the inline policy fields the request set: merged over the project's and the
    cluster's defaults (session > project > cluster) into the policy the session keeps.
    `requested_priority` (None: the request gave none) is checked against the caller's priority
    rules in the project: outside its range 422, changing it where not allowed 403.  `arrived`
    (default: now) is when the request reached the manager, its place in the queue."""
    try:
        return await _create(engine, who, spec, retry_fields, requested_priority, arrived)
    except Duplicate:
        # The same creation_id, committed by a concurrent request between our check and our insert.
        if not spec.creation_id:
            raise
        async with reading(engine) as conn:
            found = await earlier(conn, who, spec)
        if found is None:
            raise
        return found, False


async def earlier(conn: Tx, who: Principal, spec: SessionSpec) -> SessionRecord | None:
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


def _priority(
    who: Principal, project_cfg: Mapping[str, Any], user_cfg: Mapping[str, Any], requested: int | None
) -> int:
    own = user_cfg.get("priority_rules")
    try:
        return choose(effective(project_cfg.get("priority_rules"), own), requested, who.is_admin)
    except PriorityRefused as exc:
        if exc.forbidden:
            raise Forbidden(str(exc), {"field": "priority"}) from None
        raise InvalidInput("priority", str(exc)) from None


class Shared:
    """What checking a new session reads that the others checked in the same transaction share:
    read once for a batch."""

    def __init__(self) -> None:
        self._cluster: dict[str, Any] | None = None
        self._configs: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = {}

    def cluster_values(self) -> dict[str, Any]:
        """The cluster's values, as read with the first submitter's configs."""
        assert self._cluster is not None, "read with submitter_configs"
        return self._cluster

    async def submitter_configs(
        self, conn: Tx, project: str, user_id: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        found = self._configs.get((project, user_id))
        if found is None:
            project_cfg, user_cfg, cluster = await config.submitter_configs(conn, project, user_id)
            found = self._configs[project, user_id] = (project_cfg, user_cfg)
            if self._cluster is None:
                self._cluster = cluster
        return found


def _effective_policy(
    spec: SessionSpec,
    retry_fields: Mapping[str, Any] | None,
    project_cfg: Mapping[str, Any],
    shared: Shared,
) -> RetryPolicy | None:
    cluster_defaults = values_of(shared.cluster_values())["retry.defaults"] or {}
    project_defaults = project_cfg.get("retry_defaults") or {}
    if spec.retry_policy is None and not cluster_defaults and not project_defaults:
        return None
    if retry_fields is None:
        retry_fields = spec.retry_policy.to_json() if spec.retry_policy else {}
    return RetryPolicy.from_json({**cluster_defaults, **project_defaults, **retry_fields})


async def _create(
    engine: Engine,
    who: Principal,
    spec: SessionSpec,
    retry_fields: Mapping[str, Any] | None,
    requested_priority: int | None,
    arrived: datetime | None,
) -> tuple[SessionRecord, bool]:
    now = utcnow()
    # One transaction: the session, its kernels and its events are written whole or not at all.
    async with transaction(engine) as conn:
        admitted = await admit(conn, who, spec, retry_fields, requested_priority, arrived=arrived)
        if isinstance(admitted, SessionRecord):
            return admitted, False
        created = await sessions.insert_session(conn, admitted, now)
    return created, True


async def admit(
    conn: Tx,
    who: Principal,
    spec: SessionSpec,
    retry_fields: Mapping[str, Any] | None,
    requested_priority: int | None,
    shared: Shared | None = None,
    arrived: datetime | None = None,
) -> SessionRecord | NewSession:
    """The caller's earlier session made with this creation_id, or the new session to insert:
    checked against the cluster and the caller's rights, its priority and policy filled in, queued
    from `arrived` (None: when it is written)."""
    if spec.creation_id:
        found = await earlier(conn, who, spec)
        if found is not None:
            return found
    checked = await prepared(conn, who, spec, retry_fields, requested_priority, shared)
    session_id = str(uuid.uuid4())
    return NewSession(
        id=session_id,
        name=checked.name or f"session-{session_id[:8]}",
        owner=who.name,
        spec=checked,
        spec_hash=spec.digest(),
        chain_submitted_at=arrived,
    )


async def prepared(
    conn: Tx,
    who: Principal,
    spec: SessionSpec,
    retry_fields: Mapping[str, Any] | None,
    requested_priority: int | None,
    shared: Shared | None = None,
) -> SessionSpec:
    """The spec checked against the cluster and the caller's rights, with its priority and its
    effective retry policy filled in (what every new session goes through)."""
    shared = shared or Shared()
    if spec.project == UNNAMED_PROJECT:
        spec = replace(spec, project=await _project_for(conn, who))
    if not await _known(conn, "resource_group", spec.resource_group, agents.resource_group_exists):
        raise InvalidInput("resource_group", f"unknown resource group {spec.resource_group!r}")
    if not await _known(conn, "project", spec.project, auth.project_exists):
        raise InvalidInput("project", f"unknown project {spec.project!r}")
    if not who.is_admin and spec.project not in who.projects:
        raise Forbidden(f"you are not a member of project {spec.project!r}", {"field": "project"})
    await _check_fits(conn, spec)
    if spec.image is not None and not await _known(conn, "image", spec.image, agents.image_offered):
        raise InvalidInput("image", f"no agent offers image {spec.image!r} (corral agent images lists them)")
    await policies.check_names(conn, list(spec.retry_policies), "retry_policies")
    project_cfg, user_cfg = await shared.submitter_configs(conn, spec.project, who.user_id)
    return replace(
        spec,
        priority=_priority(who, project_cfg, user_cfg, requested_priority),
        retry_policy=_effective_policy(spec, retry_fields, project_cfg, shared),
    )


async def _project_for(conn: Tx, who: Principal) -> str:
    """A request that names no project goes to the caller's only project, else to their
    default_project, else it must name one."""
    if len(who.projects) == 1:
        return next(iter(who.projects))
    chosen = (await users.config_of(conn, who.user_id)).get("default_project")
    if chosen:
        return str(chosen)
    if not who.projects:
        raise Forbidden(
            "you are a member of no project: ask an admin to add you to one", {"field": "project"}
        )
    choices = ", ".join(sorted(who.projects))
    raise InvalidInput("project", f"name a project: you are a member of several ({choices})")


_capacity_cache: dict[str, tuple[float, list[ResourceSlots]]] = {}


async def _capacities(conn: Tx, group: str) -> list[ResourceSlots]:
    """Agents' declared capacities, remembered briefly (agents register rarely; the scheduler still
    places against live numbers, this only refuses the impossible)."""
    seen = _capacity_cache.get(group)
    if seen is not None and time.monotonic() - seen[0] < _KNOWN_SECONDS:
        return seen[1]
    found = await agents.capacities(conn, group)
    if found:
        _capacity_cache[group] = (time.monotonic(), found)
    return found


async def _check_fits(conn: Tx, spec: SessionSpec) -> None:
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
