"""What the specs of an agent's orders are built from: the sessions with their kernels, the
agents those are on and the owners' run_as, in one statement (two for a gang: store/joined.py).

Read on the path from a session's placement to its kernels starting, where on an idle cluster the
round trips to the database are much of the time: read separately, they would be four."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BindParameter, and_, bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import SessionRecord
from corral.store import joined
from corral.store.db import IN_CHUNK, chunks
from corral.store.tables import agents, kernels, sessions, users

_IDS: BindParameter[str] = bindparam("ids", expanding=True)
# The kernels' side of the join names the ids too.  Without it, PostgreSQL's estimate for a young
# kernels table (a few rows, the statistics of its first minute) can make the plan read every first
# kernel there is for each session, not only those of the sessions asked for.
_ONE = (
    select(*joined.COLUMNS, agents.c.address, users.c.config)
    .select_from(sessions)
    .outerjoin(kernels, and_(joined.FIRST_KERNEL, kernels.c.session_id.in_(_IDS)))
    .outerjoin(agents, agents.c.id == kernels.c.agent_id)
    .outerjoin(users, users.c.name == sessions.c.owner)
    .where(sessions.c.id.in_(_IDS))
)
_ADDRESS, _OWNER_CONFIG = joined.END, joined.END + 1


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
    # Half a chunk: the ids are bound twice, and an older SQLite allows 999 parameters a statement.
    for part in chunks(sorted(set(session_ids)), IN_CHUNK // 2):
        rows, addresses = await joined.read(conn, _ONE, {"ids": part})
        found.addresses.update(addresses)
        for sid, (record, row) in rows.items():
            # An address only comes with the first kernel's agent (record.kernels[0]).
            if row[_ADDRESS] is not None and (agent := record.kernels[0].agent_id):
                found.addresses[agent] = row[_ADDRESS]
            owner_config = row[_OWNER_CONFIG] or {}
            if owner_config.get("run_as"):
                found.run_as[record.owner] = dict(owner_config["run_as"])
            found.sessions[sid] = record
    return found
