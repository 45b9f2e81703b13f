"""The manager's FastAPI app: API, agent protocol, and the scheduling loops in its lifespan."""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog
from fastapi import FastAPI, Request

from corral.api import docs, errors, graphql, serve
from corral.api.limits import BodyLimit
from corral.api.routes import (
    agents,
    arrays,
    deployments,
    events,
    groups,
    policies,
    projects,
    sessions,
    users,
    webhooks,
)
from corral.api.routes import cluster as cluster_routes
from corral.api.state import AppState
from corral.clock import utcnow
from corral.http1 import Upstream
from corral.manager.deliveries import Deliverer
from corral.manager.deployment_coordinator import DeploymentLoop
from corral.manager.loop import Scheduler
from corral.manager.retry_engine import RetryEngine
from corral.services import cluster
from corral.services.agent_protocol import AgentProtocol
from corral.services.feed import Feed
from corral.services.intake import Intake
from corral.services.serve import Proxy
from corral.settings import ManagerSettings, SchedulerSettings
from corral.store import agents as agent_store
from corral.store import auth, config
from corral.store.db import transaction, upgrade, upkeep
from corral.store.dialect.engine import backend, make_engine, make_reader
from corral.store.unit import Engine
from corral.waits import STOP_WAIT, stop_tasks
from corral.wakeup import Wakeup
from corral.web import app as web

log = structlog.get_logger("corral.manager")


async def prepare_database(engine: Engine, settings: ManagerSettings) -> None:
    """Migrate, create the bootstrap admin key if one is configured, and refresh agent leases."""
    await upgrade(engine)
    now = utcnow()
    async with transaction(engine) as conn:
        if settings.bootstrap_admin_key:
            user_id = await auth.ensure_user(conn, "admin", "admin", now)
            key = settings.bootstrap_admin_key
            if await auth.add_key(conn, user_id, key, now):
                # The audit names the key by its public prefix only.
                await config.audit(conn, "system", "key.create", "admin", f"bootstrap key {key[:8]}...", now)
            if settings.rotate_admin_key:
                revoked = await auth.revoke_other_keys(conn, user_id, key)
                await config.audit(
                    conn, "system", "key.revoke", "admin", f"{revoked} older key(s) revoked", now
                )
        await agent_store.refresh_all_leases(conn, now)
    await cluster.check_at_start(engine)


def create_app(
    settings: ManagerSettings | None = None,
    scheduler: SchedulerSettings | None = None,
    run_scheduler: bool = True,
) -> FastAPI:
    settings = settings or ManagerSettings()
    scheduler = scheduler or SchedulerSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # What importing made (modules, classes, the app) lives as long as the process: frozen out
        # of the collector's reach, a full collection walks only what serving makes.  Unfrozen,
        # every full collection walks all of it again on the manager's thread, while requests and
        # cycles wait.  Frozen before the engine, so no database connection is kept from the
        # collector.
        gc.collect()
        gc.freeze()
        url = settings.resolved_database_url()
        engine = make_engine(url, settings.db_pool_size)
        await prepare_database(engine, settings)
        reader = make_reader(engine)
        wakeup = Wakeup()
        upkept = upkeep(engine, wakeup)  # before serving: it may give the wake-ups their broadcast
        app.state.corral = AppState(
            engine,
            reader,
            settings,
            scheduler,
            wakeup,
            AgentProtocol(
                engine, scheduler, wakeup, settings.log_cap_bytes, settings.checkpoint_root, reader=reader
            ),
            Intake(engine),
            Feed(reader, settings.stream_queue),
            Proxy(reader, engine),
            Upstream(),
        )
        feed = app.state.corral.feed
        proxy = app.state.corral.proxy
        tasks = (
            [
                asyncio.create_task(Scheduler(engine, scheduler, wakeup).run(), name="scheduler"),
                asyncio.create_task(
                    RetryEngine(
                        engine, wakeup, poll=scheduler.retry_poll, grace=scheduler.retry_event_grace
                    ).run(),
                    name="retry-engine",
                ),
                asyncio.create_task(
                    DeploymentLoop(engine, wakeup, scheduler.deployment_interval, proxy.in_flight).run(),
                    name="deployments",
                ),
                asyncio.create_task(
                    # The suite's fault: a delivery answered 2xx waits before it is recorded.
                    Deliverer(
                        engine, reader, settings, os.environ.get("CORRAL_TEST_WEBHOOK_HOLD") == "1"
                    ).run(),
                    name="webhooks",
                ),
            ]
            if run_scheduler
            else []
        )
        tasks += [asyncio.create_task(work, name=name) for name, work in upkept]
        tasks.append(asyncio.create_task(feed.run(), name="event-feed"))
        tasks.append(asyncio.create_task(proxy.run(), name="serve-holds"))
        log.info("manager ready", database=backend(engine))
        try:
            yield
        finally:
            await feed.shutdown()  # open streams end, so the server's shutdown need not wait
            await proxy.shutdown()
            await stop_tasks(tasks, STOP_WAIT)
            await app.state.corral.upstream.aclose()
            if reader is not engine:
                await reader.dispose()
            await engine.dispose()

    # docs.install serves /docs and /redoc in place of FastAPI's, which load from a CDN.
    app = FastAPI(title="Corral", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    errors.install(app, web.error_page)
    web.install(app)
    docs.install(app)
    app.add_middleware(
        BodyLimit, user_limit=settings.max_request_bytes, agent_limit=settings.max_agent_request_bytes
    )
    app.add_middleware(serve.ServeFirst, fastapi=app)  # added last: outside BodyLimit
    app.include_router(sessions.router)
    app.include_router(arrays.router)
    app.include_router(agents.router)
    app.include_router(events.router)
    app.include_router(policies.router)
    app.include_router(projects.router)
    app.include_router(users.router)
    app.include_router(groups.router)
    app.include_router(cluster_routes.router)
    app.include_router(webhooks.router)
    app.include_router(deployments.router)
    app.include_router(graphql.router())

    if os.environ.get("CORRAL_TEST_FAULT_ROUTES") == "1":
        # Only for the test suite: a route that fails, to prove a 500 logs no credential.
        @app.get("/api/v1/_test/boom", include_in_schema=False)
        async def boom(request: Request) -> None:
            headers = dict(request.headers)
            raise RuntimeError(f"forced failure ({len(headers)} headers)")

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
