"""What the specs of an agent's orders are built from, read in two statements.

Read on the path from a session's placement to its kernels starting: the session with its kernels,
the agents those are on and the owner's run_as were four round trips (of an idle cluster's 30 ms
from submit to RUNNING, PostgreSQL spent about 1 ms on each)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store import convert
from corral.store.db import chunks
from corral.store.records import KernelRecord, SessionRecord
from corral.store.tables import agents, kernels, sessions, users

_SESSIONS = (
    select(sessions, users.c.config.label("owner_config"))
    .outerjoin(users, users.c.name == sessions.c.owner)
    .where(sessions.c.id.in_(bindparam("ids", expanding=True)))
)
_KERNELS = (
    select(kernels, agents.c.address.label("agent_address"))
    .outerjoin(agents, agents.c.id == kernels.c.agent_id)
    .where(kernels.c.session_id.in_(bindparam("ids", expanding=True)))
    .order_by(kernels.c.rank)
)


@dataclass(frozen=True)
class OrderSources:
    """Sessions with their kernels, as one snapshot of each statement allows."""

    sessions: dict[str, SessionRecord]
    """By id, each with every kernel (in rank order)."""
    addresses: dict[str, str]
    """The address of each agent one of their kernels is on."""
    run_as: dict[str, dict[str, Any]]
    """Each owner's uid/gid mapping (owners without one are left out)."""


async def read(conn: AsyncConnection, session_ids: Sequence[str]) -> OrderSources:
    found = OrderSources({}, {}, {})
    for part in chunks(sorted(set(session_ids))):
        rows = convert.mappings(await conn.execute(_SESSIONS, {"ids": part}))
        by_session: dict[str, list[KernelRecord]] = defaultdict(list)
        for k in convert.mappings(await conn.execute(_KERNELS, {"ids": part})):
            address = k.pop("agent_address")
            if k["agent_id"] and address is not None:
                found.addresses[k["agent_id"]] = address
            by_session[k["session_id"]].append(convert.kernel(k, owned=True))
        for r in rows:
            owner_config = r.pop("owner_config") or {}
            if owner_config.get("run_as"):
                found.run_as[r["owner"]] = dict(owner_config["run_as"])
            found.sessions[r["id"]] = convert.session(r, tuple(by_session[r["id"]]), owned=True)
    return found
