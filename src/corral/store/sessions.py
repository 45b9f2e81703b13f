"""Sessions: insert, read, guarded status moves, termination requests."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from functools import cache, lru_cache
from itertools import groupby, pairwise
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Executable,
    Select,
    Table,
    and_,
    bindparam,
    case,
    exists,
    false,
    func,
    literal,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import ReturningUpdate, Update

from corral.domain.cause import TerminationReason
from corral.domain.errors import RefusedTransition
from corral.domain.records import KernelRecord, Move, NewSession, SessionRecord
from corral.domain.rendezvous import may_run
from corral.domain.status import (
    FAILED_KERNEL,
    KERNEL_PROCESS,
    TERMINAL_SESSION,
    AgentStatus,
    KernelStatus,
    SessionStatus,
)
from corral.domain.transitions import kernel_move_allowed, kernel_sources, session_move_allowed
from corral.store import agents as agent_store
from corral.store import bulk, convert, joined, journal
from corral.store.db import IN_CHUNK, autocommitting, chunks
from corral.store.tables import (
    agents,
    allocations,
    kernels,
    resource_groups,
    session_events,
    session_history,
    sessions,
)


async def insert_session(conn: AsyncConnection, new: NewSession, now: datetime) -> SessionRecord:
    """Insert a PENDING session with its kernels and its first event; returns what was written."""
    return (await insert_sessions(conn, [new], now))[0]


async def insert_sessions(
    conn: AsyncConnection, news: Sequence[NewSession], now: datetime
) -> list[SessionRecord]:
    """Insert PENDING sessions with their kernels and first events in one statement on PostgreSQL,
    three on SQLite (an array of a thousand costs what one session does, plus the rows); returns
    what was written."""
    return records_of(await insert_rows(conn, news, now))


Written = list[tuple[dict[str, Any], list[dict[str, Any]]]]
"""Each new session's row and its kernels' rows, as inserted."""


def records_of(written: Written) -> list[SessionRecord]:
    return [convert.session(row, tuple(convert.kernel(k) for k in ks)) for row, ks in written]


async def insert_many(conn: AsyncConnection, news: Sequence[NewSession], now: datetime) -> None:
    """insert_sessions without the records back (a job array answers with its ids)."""
    await insert_rows(conn, news, now)


async def insert_rows(conn: AsyncConnection, news: Sequence[NewSession], now: datetime) -> Written:
    """insert_sessions, the records left to make (records_of): for a caller that must tell a
    failure of the write from one after it."""
    if not news:
        return []
    rows = [_session_row(new, now) for new in news]
    kernel_rows = [_kernel_rows(new, row["resources"], now) for new, row in zip(news, rows, strict=True)]
    created: list[journal.EventRow] = [(new.id, "session.created", None, "PENDING", {}) for new in news]
    parts = [_every_column(sessions, rows), _every_column(kernels, [k for ks in kernel_rows for k in ks])]
    await bulk.insert_together(conn, [*parts, journal.events(created, now)])
    return list(zip(rows, kernel_rows, strict=True))


def _every_column(table: Table, rows: Sequence[dict[str, Any]]) -> bulk.Rows:
    names = tuple(c.name for c in table.columns if c.computed is None)  # the database computes the rest
    return bulk.Rows(table, names, [tuple(row[n] for n in names) for row in rows], {})


def _session_row(new: NewSession, now: datetime) -> dict[str, Any]:
    row: dict[str, Any] = {c.name: None for c in sessions.columns}
    row.update(convert.spec_columns(new.spec, new.spec_hash))
    row.update(
        id=new.id,
        name=new.name,
        status=str(SessionStatus.PENDING),
        status_changed_at=now,
        result="undefined",
        owner=new.owner,
        parent_session_id=new.parent_session_id,
        root_session_id=new.root_session_id or new.id,
        retry_count=new.retry_count,
        chain_submitted_at=new.chain_submitted_at or now,
        retry_after=new.retry_after,
        attempt=new.attempt,
        manual_retry=new.manual_retry,
        total_retries=new.total_retries,
        free_requeues=new.free_requeues,
        rule_counts=new.rule_counts or None,
        first_started_at=new.first_started_at,
        retry_cause=new.retry_cause,
        planned_attempts=new.planned_attempts,
        avoid_agent=new.avoid_agent,
        phase_tries=0,
        reschedule_count=0,
        resume_count=0,
        created_at=now,
    )
    return row


def _kernel_rows(new: NewSession, resources: Any, now: datetime) -> list[dict[str, Any]]:
    kernel_rows: list[dict[str, Any]] = []
    for rank in range(new.spec.cluster_size):
        k: dict[str, Any] = {c.name: None for c in kernels.columns if c.computed is None}
        k.update(
            id=str(uuid.uuid4()),
            session_id=new.id,
            rank=rank,
            role="main" if rank == 0 else "sub",
            status=str(KernelStatus.PENDING),
            status_changed_at=now,
            generation=0,
            resources=resources,
            kill_requested=False,
            kill_forced=False,
            logs_done=False,
            log_dropped=0,
            started=False,
            oom_killed=False,
            killed_by_corral=False,
            agent_lost=False,
            image_failed=False,
            conditions=[],
            detail={},
        )
        kernel_rows.append(k)
    return kernel_rows


async def find_creation(conn: AsyncConnection, owner: str, creation_id: str) -> tuple[str, str | None] | None:
    """(session id, spec hash) of the owner's session with this creation_id; never another owner's."""
    row = await conn.execute(
        select(sessions.c.id, sessions.c.spec_hash).where(
            sessions.c.owner == owner, sessions.c.creation_id == creation_id
        )
    )
    found = row.first()
    return (found.id, found.spec_hash) if found else None


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
        conn.dialect.name == "postgresql",
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
    session and its kernels cost ten times as much to read and build."""
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
        merged=conn.dialect.name == "postgresql",
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
    merged: bool = False,
) -> Select[Any]:
    """_handler_query's cached statement for these filters (as hashable text)."""
    return _handler_query(
        merged,
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
    merged: bool,
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
    if len(names) == 1 or not merged:
        return seek(names, *columns).order_by(sessions.c.created_at, sessions.c.id).limit(limit)
    # PostgreSQL: several statuses as one seek each (`status = X`), merged.  It plans `status IN
    # (...)` from its statistics, and a fresh database has none until autovacuum first analyzes it
    # (a minute or more): it read every session of the group, ended ones too, and dropped all but
    # the few it wanted, on every read.  SQLite seeks each value of an IN list by the index anyway,
    # and merging cost it more than it saved.
    union = union_all(*(seek((n,), *columns, *_SORT if narrow else ()) for n in names)).subquery()
    wanted = (union.c.id, union.c.status) if narrow else tuple(union.c)
    return select(*wanted).order_by(union.c.created_at, union.c.id).limit(limit)


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


async def apply_moves(
    conn: AsyncConnection, moves: Sequence[Move], now: datetime, history: Sequence[journal.HistoryRow] = ()
) -> list[Move]:
    """Guarded UPDATEs, grouped so a batch costs a few statements; returns the moves that won.
    Each won move's events are written, and its rows of `history` (only a won move's are)."""
    for m in moves:
        hops = (m.src, *m.via, m.dst)
        for a, b in pairwise(hops):
            if not session_move_allowed(a, b):
                raise RefusedTransition(f"{a} -> {b} is not a session transition")
        if set(m.via) & _SIDE_EFFECTS:
            raise RefusedTransition(f"{m.src} -> {m.dst} may not pass {m.via}: a status with side effects")
        if m.kernel_via and (m.kernel_dst is None or not _kernel_path_allowed((*m.kernel_via, m.kernel_dst))):
            raise RefusedTransition(f"kernels may not go {m.kernel_via} -> {m.kernel_dst}")
    groups: dict[tuple[Any, ...], list[Move]] = defaultdict(list)
    for m in moves:
        groups[(m.src, m.dst, m.kernel_dst, m.values, m.kernel_via, m.unrequested)].append(m)
    rows_of: dict[str, list[journal.HistoryRow]] = defaultdict(list)
    for row in history:
        rows_of[row.session_id].append(row)
    # On PostgreSQL a group's kernels, events and history ride in its UPDATE (data-modifying CTEs):
    # a round trip each saved, for every handler that moves sessions.
    together = conn.dialect.name == "postgresql"
    won: list[Move] = []
    for (src, dst, kernel_dst, values, kernel_via, unrequested), group in groups.items():
        ids = [m.session_id for m in group]
        names = tuple(name for name, _ in values)
        statement = (
            _move_journaled(src, dst, names, unrequested, kernel_dst, kernel_via)
            if together
            else _move(src, dst, names, unrequested)
        )
        params = {"m_now": now, **{f"m_{name}": value for name, value in values}}
        for chunk in range(0, len(ids), IN_CHUNK):
            part = ids[chunk : chunk + IN_CHUNK]
            if together:
                params.update(_journal_params(group[chunk : chunk + IN_CHUNK], rows_of))
            if dst is SessionStatus.PENDING and together:
                if autocommitting(conn):
                    raise RuntimeError("a move back to the queue takes a transaction: it locks first")
                # The guard reads kernels as of the statement's start: lock them first (the order
                # reports take too), so a report committing a start in between is seen, not missed.
                await conn.execute(
                    select(kernels.c.id).where(kernels.c.session_id.in_(part)).with_for_update()
                )
            moved = set((await conn.execute(statement, {**params, "m_ids": part})).scalars())
            won.extend(m for m in group if m.session_id in moved)
            if moved and kernel_dst is not None and not together:
                await move_kernels_of(conn, list(moved), kernel_dst, now, kernel_via)
            if moved and dst is SessionStatus.PENDING:
                await _back_to_queue(conn, list(moved), now, resumed=src is SessionStatus.SUSPENDED)
    if not together:
        await journal.add_events(conn, [event for m in won for event in _events(m)], now)
        await journal.add_history(conn, [row for m in won for row in rows_of[m.session_id]], now)
    return won


def _journal_params(group: Sequence[Move], rows_of: dict[str, list[journal.HistoryRow]]) -> dict[str, Any]:
    """_move_journaled's event and history arrays for these moves (kept only for those that win)."""
    events = [event for m in group for event in _events(m)]
    history = [row for m in group for row in rows_of.get(m.session_id, ())]
    return {
        **bulk.unnest_params(session_events, journal.EVENT_COLUMNS, "e_", events),
        **bulk.unnest_params(session_history, journal.HISTORY_COLUMNS, "h_", journal.history_values(history)),
    }


@lru_cache(maxsize=1024)
def _move_journaled(
    src: SessionStatus,
    dst: SessionStatus,
    names: tuple[str, ...],
    unrequested: bool,
    kernel_dst: KernelStatus | None,
    kernel_via: tuple[KernelStatus, ...],
) -> Select[str]:
    """_move on PostgreSQL, in one statement with what follows a won move: its kernels' move (to
    `kernel_dst`, through `kernel_via`), its events (e_ arrays) and its history rows (h_ arrays)."""
    moved = _move(src, dst, names, unrequested).cte("moved")
    now = bindparam("m_now", type_=sessions.c.status_changed_at.type)
    won = select(moved.c.id)
    then: list[Any] = []
    if kernel_dst is not None:
        kernel_move = update(kernels).where(
            kernels.c.session_id.in_(won), *_kernel_guard(kernel_dst, kernel_via)
        )
        then.append(kernel_move.values(status=str(kernel_dst), status_changed_at=now).cte("kernels_moved"))
    then.append(
        bulk.unnest_insert(
            session_events,
            journal.EVENT_COLUMNS,
            "e_",
            {"created_at": now},
            lambda e: e.c.e_session_id.in_(won),
        ).cte("events")
    )
    one = literal(1, type_=session_history.c.count.type)
    same = {"count": one, "created_at": now, "last_at": now}
    then.append(
        bulk.unnest_insert(
            session_history, journal.HISTORY_COLUMNS, "h_", same, lambda h: h.c.h_session_id.in_(won)
        ).cte("history")
    )
    return select(moved.c.id).add_cte(*then)


# Statuses whose move sets more than the status (see _move): never passed on the way to another.
_SIDE_EFFECTS = frozenset({SessionStatus.PENDING, SessionStatus.RUNNING}) | TERMINAL_SESSION


def _kernel_path_allowed(path: Sequence[KernelStatus]) -> bool:
    return all(kernel_move_allowed(a, b) for a, b in pairwise(path))


def _events(m: Move) -> list[tuple[str, str, str | None, str | None, dict[str, Any]]]:
    """A move's event rows, one per hop."""
    hops = (m.src, *m.via, m.dst)
    return [(m.session_id, "session.status_changed", a, b, {}) for a, b in pairwise(hops)]


_MAY_RUN = [str(s) for s in KERNEL_PROCESS]


@lru_cache(maxsize=1024)
def _move(
    src: SessionStatus, dst: SessionStatus, names: tuple[str, ...], unrequested: bool = False
) -> ReturningUpdate[str]:
    """The guarded UPDATE of a group of moves src -> dst setting the columns `names` too (bound as
    m_<name>; the ids as m_ids, the time as m_now), built once per shape; with `unrequested`,
    only of sessions no termination was requested for."""
    now = bindparam("m_now", type_=sessions.c.status_changed_at.type)
    extra: dict[str, Any] = {name: bindparam(f"m_{name}", type_=sessions.c[name].type) for name in names}
    if dst in TERMINAL_SESSION:
        extra.setdefault("terminated_at", now)
    if dst is SessionStatus.RUNNING:
        extra.setdefault("started_at", func.coalesce(sessions.c.started_at, now))
    guard = [sessions.c.status == str(src)]
    if unrequested:
        guard.append(sessions.c.termination_reason.is_(None))
    if dst is SessionStatus.PENDING:
        # Never re-queued while a kernel of it may run (prepare and start): that would free its
        # allocation before it is confirmed dead and could start a second copy beside it.
        guard.append(~exists().where(kernels.c.session_id == sessions.c.id, kernels.c.status.in_(_MAY_RUN)))
    return (
        update(sessions)
        .where(sessions.c.id.in_(bindparam("m_ids", expanding=True)), *guard)
        .values(status=str(dst), status_changed_at=now, phase_tries=0, **extra)
        .returning(sessions.c.id)
    )


async def with_running_kernels(conn: AsyncConnection, session_ids: Sequence[str]) -> set[str]:
    """Those of these sessions of which a process may exist (domain.rendezvous.may_run)."""
    found: set[str] = set()
    alive = await agent_store.alive_ids(conn) if session_ids else set()
    for part in chunks(session_ids):
        rows = await conn.execute(
            select(kernels.c.session_id, kernels.c.status, kernels.c.agent_id, kernels.c.master_port)
            .where(kernels.c.session_id.in_(part))
            .order_by(kernels.c.session_id, kernels.c.rank)
        )
        for sid, group in groupby(rows, key=lambda r: r.session_id):
            ranks = list(group)
            if may_run([(KernelStatus(r.status), r.agent_id) for r in ranks], ranks[0].master_port, alive):
                found.add(sid)
    return found


async def move_kernels_of(
    conn: AsyncConnection,
    session_ids: list[str],
    dst: KernelStatus,
    now: datetime,
    via: tuple[KernelStatus, ...] = (),
) -> None:
    """Move the sessions' kernels that may legally go to `dst`, or through `via` to it (those that
    may go to its first status, or are at one of its statuses already); others (e.g. ended) stay."""
    await conn.execute(_move_kernels(dst, via), {"ids": session_ids, "k_now": now})


@cache
def _move_kernels(dst: KernelStatus, via: tuple[KernelStatus, ...]) -> Update:
    return (
        update(kernels)
        .where(kernels.c.session_id.in_(bindparam("ids", expanding=True)), *_kernel_guard(dst, via))
        .values(status=str(dst), status_changed_at=bindparam("k_now"))
    )


def _kernel_guard(dst: KernelStatus, via: tuple[KernelStatus, ...]) -> list[ColumnElement[bool]]:
    """move_kernels_of's guard: kernels at a source of `dst` (of via[0], or one of `via`'s, with `via`)."""
    sources = sorted(str(s) for s in (kernel_sources(via[0]) | set(via) if via else kernel_sources(dst)))
    return [kernels.c.status.in_(sources)]


async def _back_to_queue(
    conn: AsyncConnection, session_ids: list[str], now: datetime, resumed: bool = False
) -> None:
    """Re-scheduling (or resuming a suspended session): allocations released, kernels detached from
    their agents, to be placed afresh as a new generation."""
    # Only the allocations of kernels that went back to PENDING: one that did not may still run.
    back = select(kernels.c.id).where(
        kernels.c.session_id.in_(session_ids), kernels.c.status == str(KernelStatus.PENDING)
    )
    await conn.execute(
        update(allocations)
        .where(allocations.c.kernel_id.in_(back), allocations.c.released_at.is_(None))
        .values(released_at=now)
    )
    await conn.execute(
        update(kernels)
        .where(kernels.c.session_id.in_(session_ids), kernels.c.status == str(KernelStatus.PENDING))
        .values(
            agent_id=None,
            master_port=None,
            kill_requested=False,
            kill_forced=False,
            logs_done=False,
            log_dropped=0,
            kill_grace=None,
            devices=None,
            generation=kernels.c.generation + 1,
        )
    )
    counter = sessions.c.resume_count if resumed else sessions.c.reschedule_count
    await conn.execute(update(sessions).where(sessions.c.id.in_(session_ids)).values({counter: counter + 1}))


async def bump_tries(conn: AsyncConnection, session_ids: list[str]) -> dict[str, int]:
    """Increment the failure count of the current status; returns the new counts."""
    if not session_ids:
        return {}
    await conn.execute(
        update(sessions).where(sessions.c.id.in_(session_ids)).values(phase_tries=sessions.c.phase_tries + 1)
    )
    rows = await conn.execute(
        select(sessions.c.id, sessions.c.phase_tries).where(sessions.c.id.in_(session_ids))
    )
    return {sid: n for sid, n in rows}


async def request_termination(
    conn: AsyncConnection, session_id: str, reason: str, message: str, now: datetime
) -> bool:
    """Record why a session must stop; False when it has already ended.  The first reason wins,
    except that a stop for good (a cancel, a deadline) replaces a suspension in progress."""
    return bool(await request_terminations(conn, [session_id], reason, message, now))


async def request_terminations(
    conn: AsyncConnection, session_ids: Sequence[str], reason: str, message: str, now: datetime
) -> list[str]:
    """`request_termination` for many sessions in one statement; returns those not yet ended."""
    suspending = and_(
        sessions.c.termination_reason == str(TerminationReason.SUSPENDED),
        literal(reason) != str(TerminationReason.SUSPENDED),
    )
    stopped: list[str] = []
    for part in chunks(session_ids):
        result = await conn.execute(
            update(sessions)
            .where(
                sessions.c.id.in_(part),
                sessions.c.status.not_in([str(s) for s in TERMINAL_SESSION]),
            )
            .values(
                termination_reason=case(
                    (suspending, reason), else_=func.coalesce(sessions.c.termination_reason, reason)
                ),
                termination_message=case(
                    (suspending, message), else_=func.coalesce(sessions.c.termination_message, message)
                ),
                termination_requested_at=func.coalesce(sessions.c.termination_requested_at, now),
            )
            .returning(sessions.c.id)
        )
        stopped += result.scalars()
    await journal.add_events(
        conn, [(sid, "session.termination_requested", None, None, {"reason": reason}) for sid in stopped], now
    )
    return stopped


async def clear_termination_request(conn: AsyncConnection, session_ids: list[str]) -> None:
    """A suspension is done: the session waits without a request, so a later cancel is its own."""
    if session_ids:
        await conn.execute(
            update(sessions)
            .where(sessions.c.id.in_(session_ids))
            .values(termination_reason=None, termination_message=None, termination_requested_at=None)
        )


# Running sessions with a time limit in a group (their time is judged in Python).
_TIMED_RUNNING = and_(
    sessions.c.resource_group == bindparam("group"),
    sessions.c.status == str(SessionStatus.RUNNING),
    sessions.c.timeout.is_not(None),
    sessions.c.termination_reason.is_(None),
)
_DEADLINES = select(sessions).where(_TIMED_RUNNING)
_SWEEP_DUE = select(
    exists().where(agent_store.STALE), exists().where(agent_store.FENCE_DUE), exists().where(_TIMED_RUNNING)
)


async def due_deadlines(conn: AsyncConnection, resource_group: str, now: datetime) -> list[SessionRecord]:
    """Running sessions with a timeout, for the deadline check."""
    return await select_with_kernels(conn, _DEADLINES, {"group": resource_group})


async def sweep_due(
    conn: AsyncConnection, resource_group: str, lease: timedelta, fence: timedelta, now: datetime
) -> bool:
    """Whether the sweep may find anything now: an agent for agents.mark_lost or fence_expired, or
    a session for due_deadlines.  One read, where finding nothing in a transaction was five round
    trips on PostgreSQL, several times a second."""
    params = {"group": resource_group, "before": now - lease, "silent_before": now - fence}
    return any((await conn.execute(_SWEEP_DUE, params)).one())


async def lock(conn: AsyncConnection, session_id: str) -> None:
    """Serialise writers of one session's rows (PostgreSQL row lock; SQLite has one writer anyway)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(select(sessions.c.id).where(sessions.c.id == session_id).with_for_update())
