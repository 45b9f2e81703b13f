"""The deployment coordinator: runs each deployment and route handler in its own transaction and
alone applies its declared move per outcome (DESIGN §7, the sessions' pattern): SUCCESS, FAILURE
and STALE go where `status_transitions()` says, or nowhere (history only).  Every outcome is a
history row; one that repeats the last row of its target and handler adds to its count.  A move
is a guarded update (the table's sources), so an outcome judged on a status another writer has
changed since moves nothing."""

from __future__ import annotations

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
        if isinstance(handler, RouteHandler):
            found_routes = await routes.with_status(conn, handler.target_statuses)
            if not found_routes:
                return 0
            ctx = await self._context(conn, now, {r.deployment_id for r in found_routes})
            reported = await handler.execute(ctx, found_routes)
            return await self._apply(ctx, handler, found_routes, reported)
        found = await deployments.with_status(conn, handler.target_statuses)
        if not found:
            return 0
        ctx = await self._context(conn, now, {d.id for d in found})
        return await self._apply(ctx, handler, found, await handler.execute(ctx, found))

    async def _context(self, conn: Tx, now: datetime, ids: set[str]) -> Context:
        deps = await deployments.by_ids(conn, ids)
        all_routes = await routes.of_deployments(conn, list(ids))
        session_ids = [r.session_id for rs in all_routes.values() for r in rs]
        found = {s.id: s for s in await sessions.get_many(conn, session_ids)}
        revs = await deployments.revisions(conn, list(ids))
        return Context(conn, now, deps, all_routes, revs, found, self._in_flight())

    async def _apply(
        self,
        ctx: Context,
        handler: Handler,
        targets: Sequence[RouteRecord] | Sequence[DeploymentRecord],
        reported: Mapping[str, Reported],
    ) -> int:
        """The declared move of each outcome (a guarded update: False when another writer moved
        it first, and then the outcome is history only), and every outcome's history row."""
        moves = handler.status_transitions()
        rows: list[OutcomeRow] = []
        moved = 0
        for t in targets:
            rep = reported.get(t.id)
            if rep is None:
                continue
            dst = moves.to(rep.outcome)
            went = None
            if isinstance(t, RouteRecord):
                dep_id, route_id = t.deployment_id, t.id
                if dst is not None and dst != t.status:
                    project = ctx.deployments[t.deployment_id].project
                    if await routes.move(ctx.conn, t, project, RouteStatus(dst), ctx.now, rep.also):
                        went = str(dst)
            else:
                dep_id, route_id = t.id, None
                if dst is not None and dst != t.status:
                    if await deployments.move(ctx.conn, t, DeploymentStatus(dst), ctx.now, rep.also):
                        went = str(dst)
                elif rep.also:
                    await deployments.update_fields(ctx.conn, t.id, rep.also, ctx.now)
            moved += went is not None
            rows.append(OutcomeRow(dep_id, route_id, handler.name, rep.outcome, t.status, went, rep.message))
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
