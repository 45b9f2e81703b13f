"""Deployments, their revisions and their history rows (routes: store/routes.py).

A status changes only through `move`, guarded by the transition table (domain/deployment_status)
and written with its event in the caller's transaction, as sessions' are."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.deployment_records import (
    DeploymentHistoryRecord,
    DeploymentRecord,
    OutcomeRow,
    RevisionRecord,
    rollout_of,
)
from corral.domain.deployment_status import DeploymentStatus, deployment_sources
from corral.domain.deployments import DeploymentSpec, HealthCheck, replica_json, replica_spec
from corral.domain.rollout import replace_delay
from corral.store import journal
from corral.store.deployment_tables import deployment_history, deployment_revisions, deployments

d = deployments


def _record(row: Any) -> DeploymentRecord:
    m = dict(row._mapping)
    return DeploymentRecord(
        id=m["id"],
        name=m["name"],
        project=m["project"],
        owner=m["owner"],
        status=DeploymentStatus(m["status"]),
        status_changed_at=m["status_changed_at"],
        replicas=m["replicas"],
        revision=m["revision"],
        public=m["public"],
        rollout=rollout_of(m["max_surge"], m["max_unavailable"], m["drain_timeout"], m["progress_deadline"]),
        rollout_started_at=m["rollout_started_at"],
        rollout_stalled=m["rollout_stalled"],
        ended_in_a_row=m["ended_in_a_row"],
        next_replica_at=m["next_replica_at"],
        delete_requested_at=m["delete_requested_at"],
        message=m["message"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )


def rollout_values(spec: DeploymentSpec) -> dict[str, Any]:
    r = spec.rollout
    return {
        "max_surge": str(r.max_surge),
        "max_unavailable": str(r.max_unavailable),
        "drain_timeout": r.drain_timeout,
        "progress_deadline": r.progress_deadline,
    }


async def insert_deployment(
    conn: AsyncConnection, deployment_id: str, spec: DeploymentSpec, owner: str, now: datetime
) -> None:
    """A new deployment (PENDING) and its first revision, with its `deployment.created` event."""
    await conn.execute(
        insert(d).values(
            id=deployment_id,
            name=spec.name,
            project=spec.session.project,
            owner=owner,
            status=DeploymentStatus.PENDING,
            status_changed_at=now,
            replicas=spec.replicas,
            revision=1,
            public=spec.public,
            created_at=now,
            updated_at=now,
            **rollout_values(spec),
        )
    )
    await add_revision(conn, deployment_id, 1, spec.session, spec.health, now)
    payload = {"name": spec.name, "replicas": spec.replicas, "revision": 1}
    await journal.add_events(
        conn,
        [
            journal.entity_event(
                "deployment", deployment_id, spec.session.project, "deployment.created", payload
            )
        ],
        now,
    )


async def add_revision(
    conn: AsyncConnection, deployment_id: str, number: int, session: Any, health: HealthCheck, now: datetime
) -> None:
    await conn.execute(
        insert(deployment_revisions).values(
            deployment_id=deployment_id,
            number=number,
            key=DeploymentSpec("x", session, health=health).revision_key,
            session=replica_json(session),
            health=health.to_json(),
            created_at=now,
        )
    )


async def get(conn: AsyncConnection, name: str) -> DeploymentRecord | None:
    """The deployment of this name (DESTROYED ones included)."""
    row = (await conn.execute(select(d).where(d.c.name == name))).first()
    return None if row is None else _record(row)


async def by_ids(conn: AsyncConnection, ids: Collection[str]) -> dict[str, DeploymentRecord]:
    if not ids:
        return {}
    return {r.id: _record(r) for r in await conn.execute(select(d).where(d.c.id.in_(list(ids))))}


async def listed(conn: AsyncConnection, projects: Collection[str] | None) -> list[DeploymentRecord]:
    """Every deployment the caller may see (None: an admin), by name."""
    query = select(d).order_by(d.c.name)
    if projects is not None:
        query = query.where(d.c.project.in_(list(projects)))
    return [_record(r) for r in await conn.execute(query)]


async def with_status(
    conn: AsyncConnection, statuses: Collection[DeploymentStatus]
) -> list[DeploymentRecord]:
    query = select(d).where(d.c.status.in_([str(s) for s in statuses])).order_by(d.c.created_at, d.c.id)
    return [_record(r) for r in await conn.execute(query)]


async def revisions(
    conn: AsyncConnection, deployment_ids: Collection[str]
) -> dict[tuple[str, int], RevisionRecord]:
    """Every revision of these deployments, by (deployment id, number)."""
    if not deployment_ids:
        return {}
    rev = deployment_revisions
    rows = await conn.execute(select(rev).where(rev.c.deployment_id.in_(list(deployment_ids))))
    out: dict[tuple[str, int], RevisionRecord] = {}
    for r in rows:
        out[(r.deployment_id, r.number)] = RevisionRecord(
            r.deployment_id,
            r.number,
            r.key,
            replica_spec(r.session),
            HealthCheck.from_json(r.health),
            r.created_at,
        )
    return out


async def update_fields(
    conn: AsyncConnection, deployment_id: str, values: Mapping[str, Any], now: datetime
) -> None:
    await conn.execute(update(d).where(d.c.id == deployment_id).values(updated_at=now, **values))


async def move(
    conn: AsyncConnection,
    dep: DeploymentRecord,
    dst: DeploymentStatus,
    now: datetime,
    also: Mapping[str, Any] | None = None,
) -> bool:
    """Move the deployment to `dst` if it is still in a status that may (the table's guard), with
    its `deployment.status_changed` event; False when another writer moved it first."""
    done = await conn.execute(
        update(d)
        .where(d.c.id == dep.id, d.c.status.in_([str(s) for s in deployment_sources(dst)]))
        .values(status=dst, status_changed_at=now, updated_at=now, **(also or {}))
    )
    if not done.rowcount:
        return False
    event = journal.entity_event(
        "deployment", dep.id, dep.project, "deployment.status_changed", {"name": dep.name}, dep.status, dst
    )
    await journal.add_events(conn, [event], now)
    return True


async def record(conn: AsyncConnection, outcomes: Sequence[OutcomeRow], now: datetime) -> None:
    """History rows; an outcome that repeats the newest row of its entity and handler (no move,
    same result and message) adds to that row's count instead of a row."""
    h = deployment_history
    for o in outcomes:
        if o.to_status is None:
            newest = (
                await conn.execute(
                    select(h.c.id, h.c.result, h.c.message, h.c.to_status)
                    .where(h.c.deployment_id == o.deployment_id, h.c.handler == o.handler)
                    .where(h.c.route_id == o.route_id if o.route_id else h.c.route_id.is_(None))
                    .order_by(h.c.id.desc())
                    .limit(1)
                )
            ).first()
            if newest is not None and (newest.result, newest.message, newest.to_status) == (
                o.result,
                o.message,
                None,
            ):
                await conn.execute(
                    update(h).where(h.c.id == newest.id).values(count=h.c.count + 1, last_at=now)
                )
                continue
        await conn.execute(
            insert(h).values(
                deployment_id=o.deployment_id,
                route_id=o.route_id,
                handler=o.handler,
                result=o.result,
                from_status=o.from_status,
                to_status=o.to_status,
                message=o.message,
                count=1,
                created_at=now,
                last_at=now,
            )
        )


async def history(
    conn: AsyncConnection, deployment_id: str, limit: int = 1000
) -> list[DeploymentHistoryRecord]:
    """The deployment's and its routes' outcomes, oldest first (the newest `limit`)."""
    h = deployment_history
    rows = await conn.execute(
        select(h).where(h.c.deployment_id == deployment_id).order_by(h.c.id.desc()).limit(limit)
    )
    return [
        DeploymentHistoryRecord(
            r.route_id,
            r.handler,
            r.result,
            r.from_status,
            r.to_status,
            r.message,
            r._mapping["count"],
            r.created_at,
            r.last_at,
        )
        for r in reversed(list(rows))
    ]


async def count_live(conn: AsyncConnection) -> int:
    return int(
        (
            await conn.execute(select(func.count()).select_from(d).where(d.c.status != "DESTROYED"))
        ).scalar_one()
    )


async def replica_ended(conn: AsyncConnection, deployment_id: str, now: datetime) -> None:
    """A replica ended without serving (or stopped serving): the next one waits longer."""
    n = (await conn.execute(select(d.c.ended_in_a_row).where(d.c.id == deployment_id))).scalar_one() + 1
    after = now + timedelta(seconds=replace_delay(n))
    await conn.execute(
        update(d).where(d.c.id == deployment_id).values(ended_in_a_row=n, next_replica_at=after)
    )


async def replica_healthy(conn: AsyncConnection, deployment_id: str) -> None:
    """A replica became HEALTHY: replacements start at once again."""
    await conn.execute(
        update(d)
        .where(d.c.id == deployment_id, d.c.ended_in_a_row > 0)
        .values(ended_in_a_row=0, next_replica_at=None)
    )
