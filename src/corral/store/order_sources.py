"""What the specs of an agent's orders are built from, read in one statement.

Read on the path from a session's placement to its kernels starting: the session with its kernels,
the agents those are on and the owner's run_as were four round trips (of an idle cluster's 30 ms
from submit to RUNNING, PostgreSQL spent about 1 ms on each).  One row per kernel, its session's
columns beside it (prefixed s_): most sessions have one kernel, and a gang's repeated session
columns cost less than a round trip."""

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

_ONE = (
    select(
        *kernels.c,
        agents.c.address.label("agent_address"),
        *(c.label(f"s_{c.name}") for c in sessions.c),
        users.c.config.label("owner_config"),
    )
    .join(sessions, sessions.c.id == kernels.c.session_id)
    .outerjoin(agents, agents.c.id == kernels.c.agent_id)
    .outerjoin(users, users.c.name == sessions.c.owner)
    .where(kernels.c.session_id.in_(bindparam("ids", expanding=True)))
    .order_by(kernels.c.session_id, kernels.c.rank)
)
_KERNEL_KEYS = convert.names(tuple(c.name for c in kernels.c))
_SESSION_KEYS = convert.names(tuple(c.name for c in sessions.c))
_ADDRESS = len(_KERNEL_KEYS)  # then the session's columns, then the owner's config
_OWNER = _ADDRESS + 1 + len(_SESSION_KEYS)


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
    """Sessions with at least one kernel (each the orders are for has the kernel they are for)."""
    found = OrderSources({}, {}, {})
    for part in chunks(sorted(set(session_ids))):
        by_session: dict[str, list[KernelRecord]] = defaultdict(list)
        first: dict[str, Any] = {}
        for row in await conn.execute(_ONE, {"ids": part}):
            k = dict(zip(_KERNEL_KEYS, row[:_ADDRESS], strict=True))
            if k["agent_id"] and row[_ADDRESS] is not None:
                found.addresses[k["agent_id"]] = row[_ADDRESS]
            by_session[k["session_id"]].append(convert.kernel(k, owned=True))
            first.setdefault(k["session_id"], row)
        for sid, row in first.items():
            r = dict(zip(_SESSION_KEYS, row[_ADDRESS + 1 : _OWNER], strict=True))
            owner_config = row[_OWNER] or {}
            if owner_config.get("run_as"):
                found.run_as[r["owner"]] = dict(owner_config["run_as"])
            found.sessions[sid] = convert.session(r, tuple(by_session[sid]), owned=True)
    return found
