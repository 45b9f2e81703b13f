"""A test's database directly: a migrated engine, or SQL for what no API shows (a consumer's cursor)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from corral.store.db import make_engine, transaction, upgrade


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
