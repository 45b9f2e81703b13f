"""The migrations build exactly the schema `store/tables.py` declares, on both backends, and the
schema holds what it promises."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import insert, inspect, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from corral.domain.errors import Duplicate
from corral.domain.records import NewSession, Principal, SessionRecord
from corral.domain.resources import ResourceSlots
from corral.domain.spec import SessionSpec
from corral.domain.status import TERMINAL_KERNEL, KernelStatus
from corral.services import admission as session_service
from corral.store import auth
from corral.store import kernels as kernel_store
from corral.store import sessions as session_rows
from corral.store.db import reading, transaction, upgrade
from corral.store.dialect.engine import make_engine
from corral.store.sessions import insert as session_insert
from corral.store.tables import kernels, metadata, sessions
from tests.conftest import BACKENDS
from tests.support.db import migrated, register_agent
from tests.support.postgres import PgServer


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


async def _one_session(engine: AsyncEngine) -> SessionRecord:
    """A session of a new user's, made through the service as a request would."""
    async with transaction(engine) as conn:
        user_id = await auth.ensure_user(conn, "alice", "user", datetime.now(UTC))
    alice = Principal(user_id, "alice", "user", frozenset({"default"}))
    spec = SessionSpec(command=("true",), resources=ResourceSlots.parse({"cpu": 1}))
    made, _ = await session_service.create(engine, alice, spec, None, None)
    return made


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_session_has_one_kernel_a_rank(backend: str, fresh_database: Callable[[str], str]) -> None:
    """A second row for a rank (a placement written twice) is refused by the database itself."""
    async with migrated(fresh_database(backend)) as engine:
        made = await _one_session(engine)
        async with reading(engine) as conn:
            row = dict(
                (await conn.execute(select(kernels).where(kernels.c.session_id == made.id))).one()._mapping
            )
            del row["ended"]  # computed by the database
        with pytest.raises(Duplicate):
            async with transaction(engine) as conn:
                await conn.execute(insert(kernels).values({**row, "id": str(uuid.uuid4())}))
        async with transaction(engine) as conn:  # another rank of the same session is fine
            await conn.execute(insert(kernels).values({**row, "id": str(uuid.uuid4()), "rank": 1}))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_creation_ids_and_retry_parents_are_unique(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """A caller's creation_id twice, or a session retried twice, is refused by the database (the
    retry parent's index is partial since migration 0009); rows without either are many."""
    async with migrated(fresh_database(backend)) as engine:
        first = await _one_session(engine)
        async with reading(engine) as conn:
            row = dict((await conn.execute(select(sessions).where(sessions.c.id == first.id))).one()._mapping)

        async def add(**changes: Any) -> None:
            async with transaction(engine) as conn:
                await conn.execute(insert(sessions).values({**row, "id": str(uuid.uuid4()), **changes}))

        await add(creation_id=None, parent_session_id=None)
        await add(creation_id=None, parent_session_id=None)
        await add(creation_id="job-1", parent_session_id=first.id)
        with pytest.raises(Duplicate):
            await add(creation_id="job-1")
        with pytest.raises(Duplicate):
            await add(parent_session_id=first.id)
        await add(creation_id="job-1", owner="bob")  # idempotency is per caller


async def test_sessions_and_kernels_leave_room_on_postgresql_pages(
    fresh_database: Callable[[str], str],
) -> None:
    """The migrated tables have the fill factor the tables declare (alembic compares neither)."""
    async with migrated(fresh_database("postgres")) as engine:
        async with reading(engine) as conn:
            query = "SELECT relname, reloptions FROM pg_class WHERE relname IN ('sessions', 'kernels')"
            found = dict((await conn.execute(text(query))).all())
    declared = {t.name: t.dialect_options["postgresql"]["with"] for t in (sessions, kernels)}
    assert found == {name: [f"fillfactor={opts['fillfactor']}"] for name, opts in declared.items()}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_retry_parent_and_an_array_id_are_indexed_only_where_set(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """Migration 0009's indexes are partial, as the tables declare (alembic compares neither
    index's condition): a session without a parent or an array adds no entry to them."""
    async with migrated(fresh_database(backend)) as engine:
        async with reading(engine) as conn:
            found = await conn.run_sync(lambda sync: inspect(sync).get_indexes("sessions"))
    where = f"{'postgresql' if backend == 'postgres' else 'sqlite'}_where"
    partial = {
        ix["name"]: re.sub(r"[()\s]+", " ", str(ix["dialect_options"].get(where, ""))).strip().lower()
        for ix in found
        if ix["name"] in ("ix_sessions_parent_session_id", "ix_sessions_array_id")
    }
    assert partial == {
        "ix_sessions_parent_session_id": "parent_session_id is not null",
        "ix_sessions_array_id": "array_id is not null",
    }


def _empty_database(backend: str, pg_server: PgServer | str, tmp_path: Path) -> str:
    """A database with nothing in it (the PostgreSQL test databases are migrated already)."""
    if backend == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/corral.db"
    if isinstance(pg_server, str):
        pytest.skip("needs a server it may create an empty database on (CORRAL_TEST_PG_DSN is one database)")
    name = "empty_" + uuid.uuid4().hex[:12]
    pg_server.psql(f"CREATE DATABASE {name}")
    return pg_server.dsn(name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_upgrades_at_once_both_succeed(backend: str, pg_server: PgServer | str, tmp_path: Path) -> None:
    """Two managers starting together on an empty database: each migrates or finds it migrated,
    and neither fails (on PostgreSQL both created the tables, and one died on a duplicate type)."""
    url = _empty_database(backend, pg_server, tmp_path)
    command = [sys.executable, "-m", "corral", "db", "upgrade", "--database-url", url]
    both = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in both]
    assert [p.returncode for p in both] == [0, 0], [out[-2000:] for out in outputs]
    assert all("database is up to date" in out for out in outputs)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_kernels_written_before_0010_are_found_by_its_index_of_live_kernels(
    backend: str, pg_server: PgServer | str, tmp_path: Path
) -> None:
    """A database at 0009 with a running and an ended kernel on an agent: after the upgrade each
    has its `ended`, and the agent's orders are its running kernel alone."""
    url = _empty_database(backend, pg_server, tmp_path)
    engine = make_engine(url)
    try:
        await upgrade(engine, "0009")
        made = [await _session_as_then(engine) for _ in range(2)]
        async with transaction(engine) as conn:
            epoch = await register_agent(conn, "a", {"cpu": 4})
            for record, status in zip(made, ("RUNNING", "TERMINATED"), strict=True):
                where = kernels.c.session_id == record.id
                await conn.execute(kernels.update().where(where).values(agent_id="a", status=status))
        await upgrade(engine)
        async with reading(engine) as conn:
            ended = dict((await conn.execute(select(kernels.c.session_id, kernels.c.ended))).all())
            orders = await kernel_store.orders_for(conn, "a", epoch)
        assert ended == {made[0].id: False, made[1].id: True}
        assert orders is not None and [k.session_id for k in orders] == [made[0].id]
    finally:
        await engine.dispose()


async def _session_as_then(engine: AsyncEngine) -> SessionRecord:
    """A session written as today's code writes one, into an older schema: only the columns that
    schema has (a later migration's, such as 0011's workdir, are left out)."""
    now = datetime.now(UTC)
    new = NewSession(str(uuid.uuid4()), "then", "alice", SessionSpec(command=("true",)))
    row = session_insert._session_row(new, now)
    kernel_rows = session_insert._kernel_rows(new, row["resources"], now)
    async with transaction(engine) as conn:
        have = {
            name: {c["name"] for c in await conn.run_sync(lambda c, t=name: inspect(c).get_columns(t))}
            for name in ("sessions", "kernels")
        }
        await conn.execute(insert(sessions).values({k: v for k, v in row.items() if k in have["sessions"]}))
        for k in kernel_rows:
            await conn.execute(insert(kernels).values({c: v for c, v in k.items() if c in have["kernels"]}))
    return session_rows.records_of([(row, kernel_rows)])[0]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_kernel_has_ended_exactly_when_its_status_is_terminal(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """`ended` is the database's own (migration 0010), which alembic's comparison does not read:
    set to every status, a kernel has ended exactly in the statuses the code calls terminal."""
    async with migrated(fresh_database(backend)) as engine:
        made = await _one_session(engine)
        found = {}
        for status in KernelStatus:
            async with transaction(engine) as conn:
                where = kernels.c.session_id == made.id
                await conn.execute(kernels.update().where(where).values(status=str(status)))
                found[status] = (await conn.execute(select(kernels.c.ended).where(where))).scalar_one()
    assert found == {status: status in TERMINAL_KERNEL for status in KernelStatus}
