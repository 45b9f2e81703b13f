"""Sessions as the handlers read them: each handler's targets in queue order (priority, arrival)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    BindParameter,
    Select,
    and_,
    bindparam,
    false,
    or_,
    select,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import SessionRecord
from corral.domain.status import (
    KernelStatus,
    SessionStatus,
)
from corral.store import convert, dialect
from corral.store.sessions.read import _SORT, _filtered, select_with_kernels
from corral.store.tables import (
    sessions,
)

QueueKey = tuple[int, datetime, str]
"""A session's place in its group's queue: (-priority, chain submission, id) sorts in queue order."""


def queue_key(s: SessionRecord) -> QueueKey:
    """Sorts sessions in queue order (highest priority, then earliest chain submission, then id)."""
    return (-s.priority, s.chain_submitted_at, s.id)


async def for_handler(
    conn: AsyncConnection,
    resource_group: str,
    statuses: Collection[SessionStatus],
    *,
    kernel_statuses: Collection[KernelStatus] | None = None,
    absent_kernel_statuses: Collection[KernelStatus] | None = None,
    terminating_requested: bool | None = None,
    queue_window: int | None = None,
    with_kernels: bool = True,
    limit: int = 5000,
    changed_before: datetime | None = None,
    ready_at: datetime | None = None,
    lost_agent_only: Collection[SessionStatus] = (),
    failed_kernel_only: Collection[SessionStatus] = (),
    healthy_only: bool = False,
    after: QueueKey | None = None,
) -> list[SessionRecord]:
    """A handler's targets: sessions in `statuses` (optionally with a kernel in `kernel_statuses`);
    those in `lost_agent_only` only when a kernel of theirs is on an agent not ALIVE, those in
    `failed_kernel_only` only when a kernel of theirs has failed; with `healthy_only`, only those
    none of whose kernels has failed or is on an agent not ALIVE.

    With `queue_window`, only that many from the head of the queue (priority, chain submission,
    id), so a long queue is not re-read in full every cycle; with `after` too, the next that many
    behind that place in the queue (the key of the last one read).
    """
    if queue_window is not None and len(statuses) > 1:
        # The head of each status's queue by index (ix_sessions_queue), merged: never a sort of the
        # whole queue, however long it is.
        found: list[SessionRecord] = []
        for status in sorted(statuses):
            found += await for_handler(
                conn,
                resource_group,
                [status],
                kernel_statuses=kernel_statuses,
                absent_kernel_statuses=absent_kernel_statuses,
                terminating_requested=terminating_requested,
                queue_window=queue_window,
                with_kernels=with_kernels,
                changed_before=changed_before,
                ready_at=ready_at,
                lost_agent_only=lost_agent_only,
                failed_kernel_only=failed_kernel_only,
                healthy_only=healthy_only,
                after=after,
            )
        found.sort(key=queue_key)
        return found[:queue_window]
    query = _query(
        False,
        statuses,
        kernel_statuses,
        absent_kernel_statuses,
        terminating_requested,
        lost_agent_only,
        limit,
        queue_window,
        failed_kernel_only,
        changed_before is not None,
        ready_at is not None,
        after is not None,
        healthy_only,
        dialect.of(conn).seeks_each_status,
    )
    params: dict[str, Any] = {"resource_group": resource_group}
    if changed_before is not None:
        params["changed_before"] = changed_before
    if ready_at is not None:
        params["ready_at"] = ready_at
    if after is not None:
        params.update(after_priority=-after[0], after_submitted=after[1], after_id=after[2])
    if not with_kernels:
        return [convert.session(r, owned=True) for r in convert.mappings(await conn.execute(query, params))]
    return await select_with_kernels(conn, query, params)


async def target_ids(
    conn: AsyncConnection,
    resource_group: str,
    statuses: Collection[SessionStatus],
    *,
    kernel_statuses: Collection[KernelStatus] | None,
    absent_kernel_statuses: Collection[KernelStatus] | None,
    terminating_requested: bool | None,
    lost_agent_only: Collection[SessionStatus] = (),
    failed_kernel_only: Collection[SessionStatus] = (),
    healthy_only: bool = False,
    limit: int = 5000,
) -> list[tuple[str, SessionStatus]]:
    """for_handler's targets (outside a queue window) as (id, status) only: for a promotion its
    kernel-status filter decides alone, or to learn whether a handler has anything to do.  A whole
    session and its kernels cost many times as much to read and build."""
    query = _query(
        True,
        statuses,
        kernel_statuses,
        absent_kernel_statuses,
        terminating_requested,
        lost_agent_only,
        limit,
        failed_kernel_only=failed_kernel_only,
        healthy_only=healthy_only,
        seeks=dialect.of(conn).seeks_each_status,
    )
    rows = await conn.execute(query, {"resource_group": resource_group})
    return [(sid, convert.session_status(status)) for sid, status in rows]


def _query(
    narrow: bool,
    statuses: Collection[SessionStatus],
    kernel_statuses: Collection[KernelStatus] | None,
    absent_kernel_statuses: Collection[KernelStatus] | None,
    terminating_requested: bool | None,
    lost_agent_only: Collection[SessionStatus],
    limit: int,
    queue_window: int | None = None,
    failed_kernel_only: Collection[SessionStatus] = (),
    changed_before: bool = False,
    ready_at: bool = False,
    after: bool = False,
    healthy_only: bool = False,
    seeks: bool = False,
) -> Select[Any]:
    """_handler_query's cached statement for these filters (as hashable text)."""
    return _handler_query(
        seeks,
        narrow,
        tuple(sorted({str(s) for s in statuses})),
        frozenset(str(s) for s in kernel_statuses) if kernel_statuses is not None else None,
        frozenset(str(s) for s in absent_kernel_statuses) if absent_kernel_statuses is not None else None,
        terminating_requested,
        queue_window,
        limit,
        tuple(sorted(str(s) for s in lost_agent_only)),
        tuple(sorted(str(s) for s in failed_kernel_only)),
        changed_before,
        ready_at,
        after,
        healthy_only,
    )


@lru_cache(maxsize=512)
def _handler_query(
    seeks: bool,
    narrow: bool,
    names: tuple[str, ...],
    kernel_statuses: frozenset[str] | None,
    absent_kernel_statuses: frozenset[str] | None,
    terminating_requested: bool | None,
    queue_window: int | None,
    limit: int,
    lost_agent_only: tuple[str, ...],
    failed_kernel_only: tuple[str, ...],
    changed_before: bool,
    ready_at: bool,
    after: bool,
    healthy_only: bool,
) -> Select[Any]:
    """for_handler's statement, built once per shape (a handler's reads differ only in the bound
    values: group, times, place in the queue): building it cost more than running it."""

    def seek(statuses: tuple[str, ...], *columns: Any) -> Select[Any]:
        status = sessions.c.status
        query = select(*columns).where(
            sessions.c.resource_group == bindparam("resource_group"),
            status == statuses[0] if len(statuses) == 1 else status.in_(statuses),
        )
        return _filtered(
            query,
            statuses,
            kernel_statuses,
            absent_kernel_statuses,
            terminating_requested,
            lost_agent_only,
            failed_kernel_only,
            changed_before,
            ready_at,
            healthy_only,
        )

    columns = (sessions.c.id, sessions.c.status) if narrow else (sessions,)
    if not names:
        return select(*columns).where(false())
    if queue_window is not None:
        # One status by equality, so the queue index serves the ORDER BY as well as the WHERE
        # (for_handler reads a window status by status).
        query = seek(names, *columns).order_by(
            sessions.c.priority.desc(), sessions.c.chain_submitted_at, sessions.c.id
        )
        return (_after(query) if after else query).limit(queue_window)
    if len(names) == 1 or not seeks:
        return seek(names, *columns).order_by(sessions.c.created_at, sessions.c.id).limit(limit)
    # Several statuses as one seek each (`status = X`), merged (Dialect.seeks_each_status).
    union = union_all(*(seek((n,), *columns, *_SORT if narrow else ()) for n in names)).subquery()
    wanted = (union.c.id, union.c.status) if narrow else tuple(union.c)
    return select(*wanted).order_by(union.c.created_at, union.c.id).limit(limit)


def _after(query: Select[Any]) -> Select[Any]:
    """The queue behind a place in it (the key of the last session read)."""
    priority: BindParameter[int] = bindparam("after_priority")
    submitted: BindParameter[datetime] = bindparam("after_submitted")
    return query.where(
        or_(
            sessions.c.priority < priority,
            and_(
                sessions.c.priority == priority,
                or_(
                    sessions.c.chain_submitted_at > submitted,
                    and_(sessions.c.chain_submitted_at == submitted, sessions.c.id > bindparam("after_id")),
                ),
            ),
        )
    )
