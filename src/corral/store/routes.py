"""Routes: one per replica session, its address, health and traffic flag (DESIGN §7).

A status changes only through `move` (guarded by the table, with its event, in the caller's
transaction); `in_traffic` only through `set_traffic`, which writes `route.traffic_changed`."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.deployment_records import DeploymentRecord, RouteRecord
from corral.domain.deployment_status import RouteStatus, route_sources
from corral.domain.route_health import Health
from corral.store import journal
from corral.store.deployment_tables import deployments, routes

r = routes


def _record(row: Any) -> RouteRecord:
    m = row._mapping
    return RouteRecord(
        id=m["id"],
        deployment_id=m["deployment_id"],
        revision=m["revision"],
        session_id=m["session_id"],
        status=RouteStatus(m["status"]),
        status_changed_at=m["status_changed_at"],
        host=m["host"],
        port=m["port"],
        in_traffic=m["in_traffic"],
        draining_since=m["draining_since"],
        held_until=m["held_until"],
        started_at=m["started_at"],
        health=Health(m["health_ok"], m["health_failed"], m["health_at"], m["health_detail"]),
        created_at=m["created_at"],
    )


async def insert_route(
    conn: AsyncConnection, route_id: str, dep: DeploymentRecord, session_id: str, now: datetime
) -> None:
    """A PROVISIONING route for a new replica session of the deployment's current revision."""
    await conn.execute(
        insert(r).values(
            id=route_id,
            deployment_id=dep.id,
            revision=dep.revision,
            session_id=session_id,
            status=RouteStatus.PROVISIONING,
            status_changed_at=now,
            in_traffic=False,
            created_at=now,
        )
    )
    payload = {"deployment": dep.name, "session_id": session_id, "revision": dep.revision}
    event = journal.entity_event(
        "route", route_id, dep.project, "route.created", payload, None, "PROVISIONING"
    )
    await journal.add_events(conn, [event], now)


async def of_deployments(
    conn: AsyncConnection, deployment_ids: Collection[str]
) -> dict[str, list[RouteRecord]]:
    """Each deployment's routes, oldest first (TERMINATED ones included)."""
    out: dict[str, list[RouteRecord]] = {i: [] for i in deployment_ids}
    if not deployment_ids:
        return out
    query = select(r).where(r.c.deployment_id.in_(list(deployment_ids))).order_by(r.c.created_at, r.c.id)
    for row in await conn.execute(query):
        out[row.deployment_id].append(_record(row))
    return out


async def by_sessions(conn: AsyncConnection, session_ids: Collection[str]) -> dict[str, RouteRecord]:
    """The routes of these sessions (those that are replicas), by session id."""
    if not session_ids:
        return {}
    rows = await conn.execute(select(r).where(r.c.session_id.in_(list(session_ids))))
    return {row.session_id: _record(row) for row in rows}


async def move(
    conn: AsyncConnection,
    route: RouteRecord,
    project: str,
    dst: RouteStatus,
    now: datetime,
    also: Mapping[str, Any] | None = None,
) -> bool:
    """Move the route to `dst` if it still may (the table's guard), with its event; a route that
    leaves HEALTHY leaves traffic in the same update.  False when another writer moved it first."""
    values: dict[str, Any] = {"status": dst, "status_changed_at": now, **(also or {})}
    if dst is not RouteStatus.HEALTHY:
        values["in_traffic"] = False
    done = await conn.execute(
        update(r)
        .where(r.c.id == route.id, r.c.status.in_([str(s) for s in route_sources(dst)]))
        .values(**values)
    )
    if not done.rowcount:
        return False
    events = [journal.entity_event("route", route.id, project, "route.status_changed", {}, route.status, dst)]
    if route.in_traffic and not values.get("in_traffic", True):
        events.append(_traffic_event(route.id, project, False, f"it is {dst}"))
    await journal.add_events(conn, events, now)
    return True


def _traffic_event(route_id: str, project: str, in_traffic: bool, reason: str) -> journal.EventRow:
    return journal.entity_event(
        "route", route_id, project, "route.traffic_changed", {"in_traffic": in_traffic, "reason": reason}
    )


async def set_traffic(
    conn: AsyncConnection, route: RouteRecord, project: str, in_traffic: bool, reason: str, now: datetime
) -> bool:
    """Put the route in traffic (only while HEALTHY and not draining) or take it out."""
    query = update(r).where(r.c.id == route.id, r.c.in_traffic.is_(not in_traffic))
    if in_traffic:
        query = query.where(r.c.status == RouteStatus.HEALTHY, r.c.draining_since.is_(None))
    done = await conn.execute(query.values(in_traffic=in_traffic))
    if done.rowcount:
        await journal.add_events(conn, [_traffic_event(route.id, project, in_traffic, reason)], now)
    return bool(done.rowcount)


async def start_drain(
    conn: AsyncConnection, route: RouteRecord, project: str, reason: str, now: datetime
) -> None:
    """Out of traffic at once; DrainRoute stops it once its in-flight requests had their time."""
    await conn.execute(
        update(r).where(r.c.id == route.id, r.c.draining_since.is_(None)).values(draining_since=now)
    )
    await set_traffic(conn, route, project, False, reason, now)


async def report(
    conn: AsyncConnection,
    session_id: str,
    now: datetime,
    address: tuple[str, int] | None = None,
    started_at: datetime | None = None,
    health: Health | None = None,
) -> bool:
    """What an agent reports of a replica: where it listens once it started, its health (the
    counts in a row and the last probe's result, stamped with `now`).  False for no such route."""
    values: dict[str, Any] = {}
    if address is not None:
        values.update(host=address[0], port=address[1])
    if started_at is not None:
        values["started_at"] = func.coalesce(r.c.started_at, started_at)  # its first start counts
    if health is not None:
        values.update(
            health_ok=health.ok_in_a_row,
            health_failed=health.failed_in_a_row,
            health_at=now,
            health_detail=health.detail[:256],
        )
    if not values:
        return False
    done = await conn.execute(update(r).where(r.c.session_id == session_id).values(**values))
    return bool(done.rowcount)


async def in_traffic(conn: AsyncConnection, deployment_id: str) -> list[RouteRecord]:
    query = select(r).where(r.c.deployment_id == deployment_id, r.c.in_traffic.is_(True)).order_by(r.c.id)
    return [_record(row) for row in await conn.execute(query)]


async def with_status(conn: AsyncConnection, statuses: Collection[RouteStatus]) -> list[RouteRecord]:
    query = select(r).where(r.c.status.in_([str(s) for s in statuses])).order_by(r.c.created_at, r.c.id)
    return [_record(row) for row in await conn.execute(query)]


async def replica_sessions(conn: AsyncConnection, session_ids: Collection[str]) -> set[str]:
    """Those of these sessions that are deployments' replicas."""
    if not session_ids:
        return set()
    rows = await conn.execute(select(r.c.session_id).where(r.c.session_id.in_(list(session_ids))))
    return {str(sid) for (sid,) in rows}


async def counts(conn: AsyncConnection) -> dict[tuple[str, str], int]:
    """Routes by (deployment name, status), of deployments not DESTROYED."""
    d = deployments
    query = (
        select(d.c.name, r.c.status, func.count())
        .join(d, d.c.id == r.c.deployment_id)
        .where(d.c.status != "DESTROYED")
        .group_by(d.c.name, r.c.status)
    )
    return {(str(name), str(status)): int(n) for name, status, n in await conn.execute(query)}


async def hold(conn: AsyncConnection, route_ids: Collection[str], until: datetime) -> None:
    """This manager has requests open on these routes: those draining wait until `until` at least."""
    if route_ids:
        query = update(r).where(r.c.id.in_(list(route_ids)), r.c.draining_since.is_not(None))
        await conn.execute(query.values(held_until=until))
