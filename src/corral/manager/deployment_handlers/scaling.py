"""What the deployment handlers share: a deployment's routes as planning sees them, and the plan
(domain/rollout) carried out: drains started, replicas started (after the replacement backoff)."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.deployment_records import DeploymentRecord, RouteRecord
from corral.domain.deployment_status import LIVE_ROUTE, RouteStatus
from corral.domain.rollout import Plan, RouteView, plan
from corral.manager import replicas
from corral.manager.deployment_handlers.base import Context
from corral.store import deployments, journal, routes

R = RouteStatus


def views(ctx: Context, dep: DeploymentRecord) -> list[RouteView]:
    """The routes, a route of a revision with the current one's spec counted as current (a rollback
    to what old routes run replaces none of them)."""
    current = ctx.revisions[(dep.id, dep.revision)].key
    out = []
    for r in ctx.routes.get(dep.id, ()):
        same = ctx.revisions[(dep.id, r.revision)].key == current
        out.append(
            RouteView(
                r.id,
                dep.revision if same else r.revision,
                r.status,
                r.created_at,
                r.draining_since is not None,
            )
        )
    return out


def serving(ctx: Context, dep: DeploymentRecord) -> tuple[int, int, int]:
    """(current routes HEALTHY and in traffic, current ones not yet serving, other routes not yet
    ended: old, draining or stopping)."""
    ready = starting = other = 0
    for v, r in zip(views(ctx, dep), ctx.routes.get(dep.id, ()), strict=True):
        if r.status is R.TERMINATED:
            continue
        if v.revision == dep.revision and not v.draining and r.status in LIVE_ROUTE:
            if r.status is R.HEALTHY and r.in_traffic:
                ready += 1
            else:
                starting += 1
        else:
            other += 1
    return ready, starting, other


def planned(ctx: Context, dep: DeploymentRecord, stalled: bool) -> Plan:
    surge, unavailable = dep.surge_and_unavailable
    return plan(views(ctx, dep), dep.replicas, dep.revision, surge, unavailable, stalled)


async def carry_out(ctx: Context, dep: DeploymentRecord, p: Plan) -> int:
    """Start the plan's drains and replicas; returns the replicas started (none while the last
    ones that ended are backed off)."""
    by_id = {r.id: r for r in ctx.routes.get(dep.id, ())}
    for route_id in p.drain:
        await routes.start_drain(ctx.conn, by_id[route_id], dep.project, "leaving service", ctx.now)
    if p.add == 0 or (dep.next_replica_at is not None and ctx.now < dep.next_replica_at):
        return 0
    revision = ctx.revisions[(dep.id, dep.revision)]
    for _ in range(p.add):
        await replicas.start(ctx.conn, dep, revision, ctx.now)
    return p.add


async def drain_all(ctx: Context, dep: DeploymentRecord, leaving: Sequence[RouteRecord], why: str) -> None:
    for r in leaving:
        if r.status in LIVE_ROUTE and r.draining_since is None:
            await routes.start_drain(ctx.conn, r, dep.project, why, ctx.now)


async def stall(ctx: Context, dep: DeploymentRecord) -> None:
    """The rollout passed its progress deadline: it adds no more replicas, the old ones serve."""
    message = (
        f"rollout of revision {dep.revision} stopped: not healthy within "
        f"{dep.rollout.progress_deadline:g} s; the earlier revision's routes go on serving "
        "(fix the spec, or `corral deploy rollout undo`)"
    )
    await deployments.update_fields(ctx.conn, dep.id, {"rollout_stalled": True, "message": message}, ctx.now)
    payload = {"name": dep.name, "revision": dep.revision}
    event = journal.entity_event("deployment", dep.id, dep.project, "deployment.rollout_stalled", payload)
    await journal.add_events(ctx.conn, [event], ctx.now)
