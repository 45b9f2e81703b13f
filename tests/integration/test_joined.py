"""Sessions read with their kernels in one statement (two for a gang: store/joined.py), on a real
database, both backends: `sessions.get` gives what reading the session and then its kernels gives,
and an agent's order specs name every kernel's agent address and the owner's run_as."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from sqlalchemy import select, update

from corral.domain.spec import SessionSpec
from corral.store import agents, order_sources, sessions, users
from corral.store.db import transaction
from corral.store.records import NewSession
from corral.store.tables import kernels as kernel_table
from corral.store.tables import sessions as session_table
from tests.conftest import BACKENDS
from tests.integration.test_bounds import NOW
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
