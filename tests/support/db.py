"""Direct SQL on a test cluster's database, for what no API shows (e.g. a consumer's cursor)."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import text

from corral.store.db import make_engine, transaction


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
