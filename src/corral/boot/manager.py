"""`corral manager` and `corral db`: a manager process over a shared database, and its migrations."""

from __future__ import annotations

import asyncio
import os

from corral.boot.failure import BootFailure, from_env
from corral.boot.serve import serve_manager
from corral.logsetup import add_secret
from corral.services.cluster import StartupError
from corral.settings import ManagerSettings, SchedulerSettings
from corral.store.db import upgrade as upgrade_database
from corral.store.dialect.engine import make_engine


def manager(database_url: str | None, host: str | None, port: int | None) -> None:
    """Until SIGTERM, SIGINT or SIGHUP; settings from CORRAL_* variables, then these options."""
    settings, scheduler = from_env(ManagerSettings), from_env(SchedulerSettings)
    for attr, value in (("database_url", database_url), ("host", host), ("port", port)):
        if value is not None:
            setattr(settings, attr, value)
    if not settings.agent_token:
        raise BootFailure("set CORRAL_AGENT_TOKEN: agents must present it to register")
    os.umask(0o077)
    add_secret(settings.agent_token, settings.bootstrap_admin_key)
    try:
        serve_manager(settings, scheduler)
    except StartupError as exc:
        raise BootFailure(str(exc)) from None


def upgrade(database_url: str | None) -> None:
    """Apply the migrations (idempotent)."""
    url = database_url or from_env(ManagerSettings).resolved_database_url()

    async def go() -> None:
        engine = make_engine(url)
        try:
            await upgrade_database(engine)
        finally:
            await engine.dispose()

    asyncio.run(go())
