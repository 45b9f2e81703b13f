"""The migrations build exactly the schema `store/tables.py` declares, on both backends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.engine import Connection

from corral.store.db import make_engine, upgrade
from corral.store.tables import metadata
from tests.conftest import BACKENDS


def _diff(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": False})
    return list(compare_metadata(context, metadata))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_migrations_match_the_tables(backend: str, fresh_database: Callable[[str], str]) -> None:
    url = fresh_database(backend)
    engine = make_engine(url)
    try:
        await upgrade(engine)  # idempotent: PostgreSQL's template is migrated already
        async with engine.connect() as conn:
            diff = await conn.run_sync(_diff)
    finally:
        await engine.dispose()
    assert diff == [], diff
