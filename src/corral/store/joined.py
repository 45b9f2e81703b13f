"""Sessions read with their kernels: a row per session, its columns and then its first kernel's
(rank 0, labelled k_<name>), then whatever else the statement reads; a gang's other kernels come in
one more statement.  Most sessions have one kernel, so most reads are one round trip, not two (on an
idle cluster a round trip is a sizeable part of the time from a submit to its kernel's start).  Only
the first kernel rides with its session: a row for every kernel, each repeating the session's
columns, makes a large gang's read slower than the two statements."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, and_, bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import KernelRecord, SessionRecord
from corral.store import convert
from corral.store.db import chunks
from corral.store.tables import agents, kernels, sessions

_KERNEL_COLUMNS = [c for c in kernels.c if c.computed is None]
COLUMNS = (*sessions.c, *(c.label(f"k_{c.name}") for c in _KERNEL_COLUMNS))
"""What such a statement selects first."""
FIRST_KERNEL = and_(kernels.c.session_id == sessions.c.id, kernels.c.rank == 0)
"""Its join of kernels (outer: a row per session, with or without one)."""
_SESSION_KEYS = convert.names(tuple(c.name for c in sessions.c))
_KERNEL_KEYS = convert.names(tuple(c.name for c in _KERNEL_COLUMNS))
_SPLIT = len(_SESSION_KEYS)
_CLUSTER_SIZE = _SESSION_KEYS.index("cluster_size")
END = _SPLIT + len(_KERNEL_KEYS)
"""The position of a statement's first column after COLUMNS."""
_LATER = (
    select(kernels, agents.c.address.label("agent_address"))
    .outerjoin(agents, agents.c.id == kernels.c.agent_id)
    .where(kernels.c.session_id.in_(bindparam("ids", expanding=True)), kernels.c.rank > 0)
    .order_by(kernels.c.session_id, kernels.c.rank)
)

Found = dict[str, tuple[SessionRecord, Sequence[Any]]]
"""By session id: the session with its kernels in rank order, and its row (for the columns after END)."""


async def read(
    conn: AsyncConnection, query: Select[Any], params: dict[str, Any]
) -> tuple[Found, dict[str, str]]:
    """The sessions `query` finds, and the address of each agent their later kernels are on."""
    rows = (await conn.execute(query, params)).all()
    later: dict[str, list[KernelRecord]] = defaultdict(list)
    addresses: dict[str, str] = {}
    for part in chunks([row[0] for row in rows if row[_CLUSTER_SIZE] > 1]):  # row[0]: sessions.c.id
        for k in convert.mappings(await conn.execute(_LATER, {"ids": part})):
            address = k.pop("agent_address")
            if k["agent_id"] and address is not None:
                addresses[k["agent_id"]] = address
            later[k["session_id"]].append(convert.kernel(k, owned=True))
    found: Found = {}
    for row in rows:
        first = dict(zip(_KERNEL_KEYS, row[_SPLIT:END], strict=True))
        ranks = ([convert.kernel(first, owned=True)] if first["id"] is not None else []) + later[row[0]]
        record = dict(zip(_SESSION_KEYS, row[:_SPLIT], strict=True))
        found[row[0]] = (convert.session(record, tuple(ranks), owned=True), row)
    return found, addresses
