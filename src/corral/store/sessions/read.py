"""Sessions as their owners and admins read them: by id, listed with filters, counted by status."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Executable,
    Select,
    and_,
    bindparam,
    exists,
    func,
    or_,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import KernelRecord, SessionRecord
from corral.domain.status import (
    FAILED_KERNEL,
    TERMINAL_SESSION,
    AgentStatus,
    SessionStatus,
)
from corral.store import convert, joined
from corral.store.db import chunks
from corral.store.tables import (
    agents,
    kernels,
    resource_groups,
    sessions,
)

# Every read of sessions reads their kernels with it: built once (IN expands per execution).
_KERNELS_OF = (
    select(kernels).where(kernels.c.session_id.in_(bindparam("ids", expanding=True))).order_by(kernels.c.rank)
)


async def select_with_kernels(
    conn: AsyncConnection, query: Select[Any], params: dict[str, Any] | None = None
) -> list[SessionRecord]:
    rows = convert.mappings(await conn.execute(query, params))
    if not rows:
        return []
    by_session: dict[str, list[KernelRecord]] = defaultdict(list)
    for part in chunks([r["id"] for r in rows]):
        for k in convert.mappings(await conn.execute(_KERNELS_OF, {"ids": part})):
            by_session[k["session_id"]].append(convert.kernel(k, owned=True))
    return [convert.session(r, tuple(by_session[r["id"]]), owned=True) for r in rows]


_BY_IDS = select(sessions).where(sessions.c.id.in_(bindparam("ids", expanding=True)))


async def get_many(conn: AsyncConnection, session_ids: list[str]) -> list[SessionRecord]:
    found: list[SessionRecord] = []
    for part in chunks(session_ids):
        found += await select_with_kernels(conn, _BY_IDS, {"ids": part})
    return found


# A client following a session reads it every poll: one statement, not two (store/joined.py).
_WITH_FIRST_KERNEL = (
    select(*joined.COLUMNS).outerjoin(kernels, joined.FIRST_KERNEL).where(sessions.c.id == bindparam("id"))
)


async def get(conn: AsyncConnection, session_id: str) -> SessionRecord | None:
    found, _ = await joined.read(conn, _WITH_FIRST_KERNEL, {"id": session_id})
    return found[session_id][0] if session_id in found else None


async def list_sessions(
    conn: AsyncConnection,
    *,
    projects: Collection[str] | None = None,
    statuses: Collection[str] | None = None,
    array_id: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[SessionRecord]:
    """Newest first; an array's elements by index (each element's attempts in order)."""
    query = select(sessions).limit(limit).offset(offset)
    if array_id is not None:
        query = query.where(sessions.c.array_id == array_id).order_by(
            sessions.c.array_index, sessions.c.attempt
        )
    else:
        query = query.order_by(sessions.c.created_at.desc(), sessions.c.id)
    if projects is not None:
        query = query.where(sessions.c.project.in_(list(projects)))
    if statuses:
        query = query.where(sessions.c.status.in_(list(statuses)))
    return await select_with_kernels(conn, query)


_SORT = (sessions.c.created_at,)
"""What a narrow read's merged seeks are sorted by, besides id."""


def _filtered(
    query: Select[Any],
    statuses: tuple[str, ...],
    kernel_statuses: frozenset[str] | None,
    absent_kernel_statuses: frozenset[str] | None,
    terminating_requested: bool | None,
    lost_agent_only: tuple[str, ...],
    failed_kernel_only: tuple[str, ...],
    changed_before: bool,
    ready_at: bool,
    healthy_only: bool,
) -> Select[Any]:
    """A handler's filters on the sessions read in `statuses`."""
    # A kernel of it is on an agent that is not ALIVE (or no longer registered).
    alive = select(agents.c.id).where(
        agents.c.id == kernels.c.agent_id, agents.c.status == str(AgentStatus.ALIVE)
    )
    on_lost_agent = (
        select(kernels.c.id)
        .where(kernels.c.session_id == sessions.c.id, kernels.c.agent_id.is_not(None), ~alive.exists())
        .exists()
    )
    query = query.where(*_only_if(statuses, lost_agent_only, on_lost_agent))
    # A kernel of it has failed: it ended in failure, or with a non-zero exit (KernelRecord.failed).
    failed = (
        select(kernels.c.id)
        .where(
            kernels.c.session_id == sessions.c.id,
            or_(
                kernels.c.status.in_(sorted(str(s) for s in FAILED_KERNEL)),
                and_(kernels.c.exit_code.is_not(None), kernels.c.exit_code != 0),
            ),
        )
        .exists()
    )
    query = query.where(*_only_if(statuses, failed_kernel_only, failed))
    if healthy_only:
        query = query.where(~failed, ~on_lost_agent)
    if changed_before:
        query = query.where(sessions.c.status_changed_at < bindparam("changed_before"))
    if ready_at:
        # Before the window's limit: retries waiting for their time never fill the window.
        query = query.where(
            or_(sessions.c.retry_after.is_(None), sessions.c.retry_after <= bindparam("ready_at"))
        )
    if terminating_requested is True:
        query = query.where(sessions.c.termination_reason.is_not(None))
    elif terminating_requested is False:
        query = query.where(sessions.c.termination_reason.is_(None))
    for wanted, of_kernels in ((True, kernel_statuses), (False, absent_kernel_statuses)):
        if of_kernels is not None:
            has_kernel = (
                select(kernels.c.id)
                .where(kernels.c.session_id == sessions.c.id, kernels.c.status.in_(sorted(of_kernels)))
                .exists()
            )
            query = query.where(has_kernel if wanted else ~has_kernel)
    return query


def _only_if(
    statuses: tuple[str, ...], only: tuple[str, ...], condition: ColumnElement[bool]
) -> tuple[ColumnElement[bool], ...]:
    """`condition` for the sessions read in a status of `only` (none when no status read is)."""
    if not set(statuses) & set(only):
        return ()
    if set(statuses) <= set(only):
        return (condition,)
    return (or_(~sessions.c.status.in_(only), condition),)


_LIVE_PAIRS = [
    (s, requested) for s in SessionStatus if s not in TERMINAL_SESSION for requested in (False, True)
]


@lru_cache(maxsize=1)
def _live_probes() -> Executable:
    """One probe per pair, each an index seek (ix_sessions_rg_status), and the group's config, in
    one statement.  Built once: its 26 sub-queries took longer to build (and key for the compiled
    cache) than to run."""
    group: BindParameter[str] = bindparam("resource_group")
    return select(
        *(
            exists().where(
                sessions.c.resource_group == group,
                sessions.c.status == str(status),
                sessions.c.termination_reason.is_not(None)
                if requested
                else sessions.c.termination_reason.is_(None),
            )
            for status, requested in _LIVE_PAIRS
        ),
        select(resource_groups.c.config).where(resource_groups.c.name == group).scalar_subquery(),
    )


async def live_statuses(
    conn: AsyncConnection, resource_group: str
) -> tuple[set[tuple[SessionStatus, bool]], dict[str, Any]]:
    """(status, has a termination request) pairs present among the group's live sessions, and the
    group's config ({} when unset): what a cycle reads first, in one round trip.  The cost does not
    grow with the queue (a DISTINCT over 100k pending sessions read all of them)."""
    *found, config = (await conn.execute(_live_probes(), {"resource_group": resource_group})).one()
    return {pair for pair, present in zip(_LIVE_PAIRS, found, strict=True) if present}, dict(config or {})


async def count_by_status(conn: AsyncConnection, projects: Collection[str] | None = None) -> dict[str, int]:
    query = select(sessions.c.status, func.count()).group_by(sessions.c.status)
    if projects is not None:
        query = query.where(sessions.c.project.in_(list(projects)))
    rows = await conn.execute(query)
    return {status: n for status, n in rows}
