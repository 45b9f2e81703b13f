"""An agent that leaves or registers again ships nothing more of its ended kernels: their output is
marked complete (followers stop waiting for more), and nothing else's is, on both backends."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from sqlalchemy import select, update

from corral.domain.records import NewSession
from corral.domain.spec import SessionSpec
from corral.store import agents, kernels, sessions
from corral.store.db import transaction
from corral.store.tables import kernels as kernel_table
from tests.conftest import BACKENDS
from tests.integration.api.test_bounds import NOW
from tests.support.db import migrated, register_agent


@pytest.mark.parametrize("backend", BACKENDS)
async def test_only_the_agents_ended_kernels_have_their_output_closed(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    # (agent, status, output already complete): what each kernel is when its agent comes back.
    kernel_states = {
        "ended": ("a", "TERMINATED", False),
        "failed": ("a", "ERROR", False),
        "closed before": ("a", "TERMINATED", True),
        "running": ("a", "RUNNING", False),
        "elsewhere": ("b", "TERMINATED", False),
    }
    async with migrated(fresh_database(backend)) as engine:
        async with transaction(engine) as conn:
            await agents.ensure_resource_group(conn, "default", NOW)
            for aid in ("a", "b"):
                await register_agent(conn, aid, {"cpu": 8, "mem": "8G"}, now=NOW)
            ids = {name: str(uuid.uuid4()) for name in kernel_states}
            for name, (agent, status, done) in kernel_states.items():
                spec = SessionSpec(command=("true",))
                await sessions.insert_session(
                    conn, NewSession(id=ids[name], name=name, owner="u", spec=spec), NOW
                )
                await conn.execute(
                    update(kernel_table)
                    .where(kernel_table.c.session_id == ids[name])
                    .values(agent_id=agent, status=status, logs_done=done)
                )
        async with transaction(engine) as conn:
            await kernels.close_output_of(conn, "a")
        async with engine.connect() as conn:
            rows = await conn.execute(select(kernel_table.c.session_id, kernel_table.c.logs_done))
            done_by_name: dict[str, bool | None] = {name: None for name in ids}
            by_id = {sid: name for name, sid in ids.items()}
            for sid, done in rows:
                done_by_name[by_id[sid]] = bool(done)
    assert done_by_name == {
        "ended": True,
        "failed": True,
        "closed before": True,
        "running": False,
        "elsewhere": False,
    }
