"""Sessions read with their kernels in one statement (two for a gang: store/joined.py), on a real
database, both backends: `sessions.get` gives what reading the session and then its kernels gives,
and an agent's order specs name every kernel's agent address and the owner's run_as."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import event, select, update

from corral.domain.records import NewSession
from corral.domain.spec import SessionSpec
from corral.store import agents, order_sources, sessions, users
from corral.store.db import IN_CHUNK, transaction
from corral.store.tables import kernels as kernel_table
from corral.store.tables import sessions as session_table
from tests.conftest import BACKENDS
from tests.integration.api.test_bounds import NOW
from tests.support.db import migrated, register_agent


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_session_reads_with_all_its_kernels_in_rank_order(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        async with transaction(engine) as conn:
            await agents.ensure_resource_group(conn, "default", NOW)
            for aid, address in (("a", "10.0.0.1"), ("b", "10.0.0.2")):
                await register_agent(conn, aid, {"cpu": 8, "mem": "8G"}, address=address, now=NOW)
            owner = await users.create(conn, "ann", "user", [], NOW)
            await users.set_config(conn, owner, {"run_as": {"uid": 4242}})
            ids = {size: str(uuid.uuid4()) for size in (1, 3)}
            for size, sid in ids.items():
                spec = SessionSpec(command=("true",), cluster_size=size, env={"K": "v"})
                await sessions.insert_session(
                    conn, NewSession(id=sid, name=f"s{size}", owner="ann", spec=spec), NOW
                )
            # The gang's ranks on two agents, the last one on none yet.
            for rank, agent in ((0, "b"), (1, "a")):
                await conn.execute(
                    update(kernel_table)
                    .where(kernel_table.c.session_id == ids[3], kernel_table.c.rank == rank)
                    .values(agent_id=agent)
                )
        async with engine.connect() as conn:
            for size, sid in ids.items():
                got = await sessions.get(conn, sid)
                # The reading it replaced: the session, then its kernels.
                [expected] = await sessions.select_with_kernels(
                    conn, select(session_table).where(session_table.c.id == sid)
                )
                assert got == expected
                assert got is not None and [k.rank for k in got.kernels] == list(range(size))
            assert await sessions.get(conn, str(uuid.uuid4())) is None
            src = await order_sources.read(conn, list(ids.values()))
        assert {sid: len(s.kernels) for sid, s in src.sessions.items()} == {ids[1]: 1, ids[3]: 3}
        assert [k.agent_id for k in src.sessions[ids[3]].kernels] == ["b", "a", None]
        assert src.addresses == {"a": "10.0.0.1", "b": "10.0.0.2"}
        assert src.run_as == {"ann": {"uid": 4242}}


async def test_order_specs_of_more_sessions_than_an_old_sqlite_binds_in_one_statement(
    fresh_database: Callable[[str], str],
) -> None:
    """SQLite before 3.32 allows 999 parameters a statement: the order specs' read binds its ids
    twice, so a chunk of them must stay under that (emulated here with setlimit)."""
    async with migrated(fresh_database("sqlite")) as engine:
        limited: list[int] = []

        @event.listens_for(engine.sync_engine, "connect")
        def _old_sqlite(dbapi_connection: Any, record: Any) -> None:
            sqlite_connection = dbapi_connection._conn  # store/dialect/sqlite_inline.py's wrapper holds it
            sqlite_connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
            limited.append(sqlite_connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))

        await engine.dispose()  # the connections made from here on have the old limit
        async with transaction(engine) as conn:
            await agents.ensure_resource_group(conn, "default", NOW)
            ids = [str(uuid.uuid4()) for _ in range(2 * IN_CHUNK + 1)]
            spec = SessionSpec(command=("true",))
            await sessions.insert_many(
                conn, [NewSession(id=i, name="s", owner="u", spec=spec) for i in ids], NOW
            )
        async with engine.connect() as conn:
            src = await order_sources.read(conn, ids)
        assert limited and set(limited) == {999}
        assert sorted(src.sessions) == sorted(ids)
