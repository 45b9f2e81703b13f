"""Deployments as a caller manages them: a project's members see and change their project's, an
admin every one.  Every change is a request the deployment handlers act on (DESIGN §7): a new
`replicas`, a new revision (rollout), a deletion; nothing here starts or stops a replica."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from corral.clock import utcnow
from corral.domain.deployment_records import (
    DeploymentHistoryRecord,
    DeploymentRecord,
    RevisionRecord,
    RouteRecord,
)
from corral.domain.deployment_status import DeploymentStatus
from corral.domain.deployments import DeploymentSpec, HealthCheck, Rollout, revision_key
from corral.domain.records import Principal
from corral.domain.spec import SessionSpec, SessionType
from corral.services import admission
from corral.services.errors import Conflict, NotFound
from corral.store import deployments, journal, routes
from corral.store.db import reading, transaction
from corral.store.unit import Engine, Tx


@dataclass(frozen=True)
class View:
    """A deployment with its routes and its revisions, as one read found them."""

    deployment: DeploymentRecord
    routes: list[RouteRecord]
    revisions: dict[int, RevisionRecord]

    @property
    def current(self) -> RevisionRecord:
        return self.revisions[self.deployment.revision]

    @property
    def ready_routes(self) -> int:
        return sum(r.in_traffic for r in self.routes)


def _visible(who: Principal, dep: DeploymentRecord | None, name: str) -> DeploymentRecord:
    if dep is None or not (who.is_admin or dep.project in who.projects):
        raise NotFound(f"no deployment {name!r}", {"field": "name"})
    return dep


async def _view(conn: Tx, dep: DeploymentRecord) -> View:
    found = await routes.of_deployments(conn, [dep.id])
    revs = await deployments.revisions(conn, [dep.id])
    return View(dep, found[dep.id], {n: rev for (_, n), rev in revs.items()})


async def _checked_replica(
    conn: Tx, who: Principal, session: SessionSpec, priority: int | None
) -> SessionSpec:
    """The replicas' spec, checked as any session's (project, group, fit, priority rules)."""
    checked = await admission.prepared(conn, who, session, None, priority)
    return replace(
        checked, type=SessionType.INFERENCE, retry_policy=None, retry_policies=(), creation_id=None
    )


async def create(engine: Engine, who: Principal, spec: DeploymentSpec, priority: int | None) -> View:
    """A new PENDING deployment; 409 naming `name` when one of that name exists (even DESTROYED:
    names are not reused while its history is kept)."""
    now = utcnow()
    async with transaction(engine) as conn:
        if await deployments.get(conn, spec.name) is not None:
            raise Conflict(f"a deployment named {spec.name!r} exists", {"field": "name"})
        spec = replace(spec, session=await _checked_replica(conn, who, spec.session, priority))
        deployment_id = str(uuid.uuid4())
        await deployments.insert_deployment(conn, deployment_id, spec, who.name, now)
        dep = await deployments.get(conn, spec.name)
        assert dep is not None
        return await _view(conn, dep)


async def get(engine: Engine, who: Principal, name: str) -> View:
    async with reading(engine) as conn:
        return await _view(conn, _visible(who, await deployments.get(conn, name), name))


async def listed(engine: Engine, who: Principal) -> list[View]:
    async with reading(engine) as conn:
        found = await deployments.listed(conn, None if who.is_admin else sorted(who.projects))
        ids = [d.id for d in found]
        all_routes = await routes.of_deployments(conn, ids)
        revs = await deployments.revisions(conn, ids)
    return [View(d, all_routes[d.id], {n: rev for (i, n), rev in revs.items() if i == d.id}) for d in found]


async def history(engine: Engine, who: Principal, name: str) -> list[DeploymentHistoryRecord]:
    async with reading(engine) as conn:
        dep = _visible(who, await deployments.get(conn, name), name)
        return await deployments.history(conn, dep.id)


@dataclass(frozen=True)
class Change:
    """A PATCH: what the caller set (None: unchanged)."""

    replicas: int | None = None
    session: SessionSpec | None = None
    priority: int | None = None
    health: HealthCheck | None = None
    rollout: Rollout | None = None
    public: bool | None = None


async def update(engine: Engine, who: Principal, name: str, change: Change) -> View:
    """Records the change; a new session spec or health check is a new revision, rolled out by
    the handlers (a spec equal to the current revision's is no new revision)."""
    now = utcnow()
    async with transaction(engine) as conn:
        dep = _changeable(_visible(who, await deployments.get(conn, name), name))
        view = await _view(conn, dep)
        values: dict[str, Any] = {}
        if change.replicas is not None:
            values["replicas"] = change.replicas
        if change.public is not None:
            values["public"] = change.public
        if change.rollout is not None:
            values.update(
                deployments.rollout_values(DeploymentSpec(name, view.current.session, rollout=change.rollout))
            )
        session = view.current.session
        if change.session is not None:
            session = await _checked_replica(conn, who, change.session, change.priority)
        health = change.health or view.current.health
        if revision_key(session, health) != view.current.key:
            values.update(await _new_revision(conn, dep, session, health, now))
        if values:
            await deployments.update_fields(conn, dep.id, values, now)
            await _updated(conn, dep, values, now)
        return await _view(conn, _visible(who, await deployments.get(conn, name), name))


async def undo(engine: Engine, who: Principal, name: str) -> View:
    """Roll back: the revision before the current one becomes a new revision (as `kubectl rollout
    undo` does); 409 when there is none."""
    now = utcnow()
    async with transaction(engine) as conn:
        dep = _changeable(_visible(who, await deployments.get(conn, name), name))
        view = await _view(conn, dep)
        before = view.revisions.get(dep.revision - 1)
        if before is None:
            raise Conflict(f"{name!r} has no revision before {dep.revision}", {"field": "revision"})
        values = await _new_revision(conn, dep, before.session, before.health, now)
        await deployments.update_fields(conn, dep.id, values, now)
        await _updated(conn, dep, values, now)
        return await _view(conn, _visible(who, await deployments.get(conn, name), name))


async def delete(engine: Engine, who: Principal, name: str) -> View:
    """A deletion request: the deployment goes DESTROYING, drains and stops its routes, then is
    DESTROYED (idempotent: asking again changes nothing)."""
    now = utcnow()
    async with transaction(engine) as conn:
        dep = _visible(who, await deployments.get(conn, name), name)
        if dep.delete_requested_at is None and dep.status is not DeploymentStatus.DESTROYED:
            await deployments.update_fields(conn, dep.id, {"delete_requested_at": now}, now)
        return await _view(conn, _visible(who, await deployments.get(conn, name), name))


def _changeable(dep: DeploymentRecord) -> DeploymentRecord:
    if dep.delete_requested_at is not None or dep.status in (
        DeploymentStatus.DESTROYING,
        DeploymentStatus.DESTROYED,
    ):
        raise Conflict(f"deployment {dep.name!r} is being deleted", {"field": "name"})
    return dep


async def _new_revision(
    conn: Tx, dep: DeploymentRecord, session: SessionSpec, health: HealthCheck, now: Any
) -> dict[str, Any]:
    number = dep.revision + 1
    await deployments.add_revision(conn, dep.id, number, session, health, now)
    return {"revision": number, "rollout_started_at": now, "rollout_stalled": False, "ended_in_a_row": 0}


async def _updated(conn: Tx, dep: DeploymentRecord, values: Mapping[str, Any], now: Any) -> None:
    payload = {
        "name": dep.name,
        "replicas": values.get("replicas", dep.replicas),
        "revision": values.get("revision", dep.revision),
    }
    event = journal.entity_event("deployment", dep.id, dep.project, "deployment.updated", payload)
    await journal.add_events(conn, [event], now)
