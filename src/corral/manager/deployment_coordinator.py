"""The deployment coordinator: runs each deployment and route handler in its own transaction and
alone applies its declared move per outcome (DESIGN §7, the sessions' pattern): SUCCESS, FAILURE
and STALE go where `status_transitions()` says, or nowhere (history only).  Every outcome is a
history row; one that repeats the last row of its target and handler adds to its count.  A move
is a guarded update (the table's sources), so an outcome judged on a status another writer has
changed since moves nothing."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

import structlog

from corral import metrics
from corral.clock import utcnow
from corral.domain.deployment_records import DeploymentRecord, OutcomeRow, RouteRecord
from corral.domain.deployment_status import DeploymentStatus, RouteStatus
from corral.manager.deployment_handlers import DeploymentHandler, RouteHandler, cycle_handlers
from corral.manager.deployment_handlers.base import Context, Reported
from corral.store import deployments, leases, routes, sessions
from corral.store.db import reading
from corral.store.unit import Engine, Tx
from corral.wakeup import Wakeup, repeat

log = structlog.get_logger("corral.deployments")

Handler = RouteHandler | DeploymentHandler
COUNT_EVERY = 10.0
"""Seconds between counts of the routes for the metrics when nothing moved."""


class DeploymentCoordinator:
    def __init__(
        self,
        engine: Engine,
        clock: Callable[[], datetime] = utcnow,
        holding: leases.Holding | None = None,
        in_flight: Callable[[], Mapping[str, int]] = dict,
        handlers: Sequence[Handler] | None = None,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._writes = leases.writes(engine, holding)
        self._in_flight = in_flight
        self._handlers = list(handlers) if handlers is not None else cycle_handlers()

    async def run_cycle(self) -> int:
        """Every handler once; returns how many deployments and routes moved."""
        async with reading(self._engine) as conn:
            if not await deployments.count_live(conn):
                return 0
        moved = 0
        for handler in self._handlers:
            async with self._writes() as conn:
                moved += await self._run(conn, handler, self._clock())
        return moved

    async def _run(self, conn: Tx, handler: Handler, now: datetime) -> int:
        targets: Sequence[RouteRecord] | Sequence[DeploymentRecord]
        if isinstance(handler, RouteHandler):
            targets = await routes.with_status(conn, handler.target_statuses)
            ids = {r.deployment_id for r in targets}
        else:
            targets = await deployments.with_status(conn, handler.target_statuses)
            ids = {d.id for d in targets}
        if not targets:
            return 0
        ctx = await self._context(conn, now, ids)
        if isinstance(handler, RouteHandler):
            route_targets = [r for r in targets if isinstance(r, RouteRecord)]
            reported = await handler.execute(ctx, route_targets)
            return await self._apply_routes(ctx, handler, route_targets, reported)
        dep_targets = [d for d in targets if isinstance(d, DeploymentRecord)]
        reported = await handler.execute(ctx, dep_targets)
        return await self._apply_deployments(ctx, handler, dep_targets, reported)

    async def _context(self, conn: Tx, now: datetime, ids: set[str]) -> Context:
        deps = await deployments.by_ids(conn, ids)
        all_routes = await routes.of_deployments(conn, list(ids))
        session_ids = [r.session_id for rs in all_routes.values() for r in rs]
        found = {s.id: s for s in await sessions.get_many(conn, session_ids)}
        revs = await deployments.revisions(conn, list(ids))
        return Context(conn, now, deps, all_routes, revs, found, self._in_flight())

    async def _apply_routes(
        self,
        ctx: Context,
        handler: RouteHandler,
        targets: Sequence[RouteRecord],
        reported: Mapping[str, Reported],
    ) -> int:
        moves = handler.status_transitions()
        rows: list[OutcomeRow] = []
        moved = 0
        for route in targets:
            rep = reported.get(route.id)
            if rep is None:
                continue
            dst = moves.to(rep.outcome)
            went = None
            if dst is not None and dst != route.status:
                dep = ctx.deployments[route.deployment_id]
                if await routes.move(ctx.conn, route, dep.project, RouteStatus(dst), ctx.now, rep.also):
                    went, moved = str(dst), moved + 1
            rows.append(
                OutcomeRow(
                    route.deployment_id, route.id, handler.name, rep.outcome, route.status, went, rep.message
                )
            )
        await deployments.record(ctx.conn, rows, ctx.now)
        return moved

    async def _apply_deployments(
        self,
        ctx: Context,
        handler: DeploymentHandler,
        targets: Sequence[DeploymentRecord],
        reported: Mapping[str, Reported],
    ) -> int:
        moves = handler.status_transitions()
        rows: list[OutcomeRow] = []
        moved = 0
        for dep in targets:
            rep = reported.get(dep.id)
            if rep is None:
                continue
            dst = moves.to(rep.outcome)
            went = None
            if dst is not None and dst != dep.status:
                if await deployments.move(ctx.conn, dep, DeploymentStatus(dst), ctx.now, rep.also):
                    went, moved = str(dst), moved + 1
            elif rep.also:
                await deployments.update_fields(ctx.conn, dep.id, rep.also, ctx.now)
            rows.append(OutcomeRow(dep.id, None, handler.name, rep.outcome, dep.status, went, rep.message))
        await deployments.record(ctx.conn, rows, ctx.now)
        return moved


class DeploymentLoop:
    """Runs the deployment coordinator while this manager holds the `deployments` lease: when woken
    (a health report, a request), or every `interval`."""

    def __init__(
        self,
        engine: Engine,
        wakeup: Wakeup,
        interval: float,
        in_flight: Callable[[], Mapping[str, int]] = dict,
        holder: str | None = None,
    ) -> None:
        ttl = timedelta(seconds=max(5.0, interval * 5))
        self.holding = leases.Holding(engine, "deployments", holder or uuid.uuid4().hex[:16], ttl)
        self.coordinator = DeploymentCoordinator(engine, utcnow, self.holding, in_flight)
        self._wakeup = wakeup
        self._interval = interval
        self._engine = engine
        self._counted: float | None = None

    async def run_once(self) -> int:
        if not await self.holding.claim():
            return 0
        try:
            moved = await self.coordinator.run_cycle()
        except leases.LeaseLost:
            log.warning("deployments lease lost: another manager runs the deployments")
            return 0
        if moved:
            self._wakeup.scheduler()  # replicas started or asked to stop
        if moved or self._counted is None or time.monotonic() - self._counted > COUNT_EVERY:
            await self._count()
        return moved

    async def _count(self) -> None:
        """`corral_routes{deployment,status}` as the database has them now."""
        async with reading(self._engine) as conn:
            found = await routes.counts(conn)
        metrics.ROUTES.clear()
        for (name, status), n in found.items():
            metrics.ROUTES.labels(name, status).set(n)
        self._counted = time.monotonic()

    async def run(self) -> None:
        await repeat(self.run_once, self._idle, "deployment cycle failed")

    async def _idle(self) -> None:
        await self._wakeup.wait_deployments(self._interval)

    async def shutdown(self) -> None:
        await asyncio.shield(self.holding.release())
