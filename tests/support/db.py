"""A test's database directly: a migrated engine, or SQL for what no API shows (a consumer's cursor)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from corral.domain.resources import ResourceSlots
from corral.store import agents
from corral.store.db import transaction, upgrade
from corral.store.dialect.engine import make_engine


@asynccontextmanager
async def migrated(database_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on the database, migrated to head; disposed of on exit."""
    engine = make_engine(database_url)
    try:
        await upgrade(engine)
        yield engine
    finally:
        await engine.dispose()


def sql(database_url: str, statement: str, **params: Any) -> list[tuple[Any, ...]]:
    async def go() -> list[tuple[Any, ...]]:
        engine = make_engine(database_url)
        try:
            async with transaction(engine) as conn:
                result = await conn.execute(text(statement), params)
                return [tuple(r) for r in result] if result.returns_rows else []
        finally:
            await engine.dispose()

    return asyncio.run(go())


async def register_agent(
    conn: AsyncConnection,
    agent_id: str,
    capacity: dict[str, Any],
    *,
    hostname: str | None = None,
    address: str = "127.0.0.1",
    info: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> int:
    """An agent of group "default" registered through the store, as an agent's request would;
    its epoch."""
    return await agents.register(
        conn,
        agent_id,
        hostname=hostname or agent_id,
        address=address,
        resource_group="default",
        capacity=ResourceSlots.parse(capacity),
        info=info or {},
        now=now or datetime.now(UTC),
    )
