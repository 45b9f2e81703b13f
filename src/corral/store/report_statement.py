"""An agent's report round on PostgreSQL in one statement: the agent's fence, every kernel's guarded
move (steps, endings, suspensions) and the allocations freed, as data-modifying CTEs.

The guards are those of store/kernels.py's statements, row by row: this agent at this epoch, the
kernel's current placement (generation), a legal source of the reported status.  An UPDATE
re-checks its WHERE on a row changed meanwhile, so no row needs locking first.  A round holds one
report per kernel, so no two CTEs write the same kernel."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, exists, func, literal, or_, select, union, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.cause import TerminationReason
from corral.domain.status import TERMINAL_KERNEL, KernelStatus
from corral.domain.transitions import kernel_sources
from corral.store import unnest
from corral.store.records import KernelReport
from corral.store.tables import agents, allocations, kernels, sessions

# A step's fields (a non-terminal report), and an ending's: kernels.py's _END_FIELDS with the
# generation, and the detail it keeps should its session be suspending (_suspend's).
STEP_FIELDS = ("id", "generation", "status", "master_port")
_SUSPEND_DETAIL = "suspend_detail"
_STARTS = (str(KernelStatus.RUNNING), str(KernelStatus.CREATING))


def _named(prefix: str, fields: Sequence[str]) -> tuple[tuple[str, Any], ...]:
    return tuple(
        (prefix + f, kernels.c.detail.type if f == _SUSPEND_DETAIL else kernels.c[f].type) for f in fields
    )


def _legal(reported: ColumnElement[Any], statuses: Sequence[KernelStatus]) -> ColumnElement[bool]:
    """The kernel's status is a legal source of the status reported in its row."""
    return or_(
        *(
            (reported == str(s)) & kernels.c.status.in_([str(src) for src in kernel_sources(s)])
            for s in statuses
        )
    )


@cache
def round_statement(end_fields: tuple[str, ...], statuses: tuple[KernelStatus, ...]) -> Select[Any]:
    """The statement: ('agent', id) when the agent is at this epoch (nothing is written otherwise),
    then ('moved', kernel id) for every kernel moved.  `end_fields` is kernels.py's _END_FIELDS
    (id first); `statuses` what agents may report.  The agent's contact is not written here: that
    UPDATE could wait on its row (locked by a placement) and the statement then read the sessions
    as they were before the wait, missing a suspension that placement wrote (service's report)."""
    now = bindparam("k_now", type_=kernels.c.status_changed_at.type)
    agent = bindparam("k_agent", type_=agents.c.id.type)
    epoch = bindparam("k_epoch", type_=agents.c.epoch.type)
    agent_ok = select(agents.c.id).where(agents.c.id == agent, agents.c.epoch == epoch).cte("agent_ok")
    at_epoch = select(agent_ok.c.id).exists()

    def placed(u: Any, prefix: str) -> list[ColumnElement[bool]]:
        return [
            # The ids as a list too, so the planner may look kernels up by key from either side.
            kernels.c.id.in_(bindparam(prefix + "ids", expanding=True)),
            kernels.c.id == u.c[prefix + "id"],
            kernels.c.generation == u.c[prefix + "generation"],
            # Not by the agent_id index: with a young table's statistics a generic plan took it for
            # two rows and read every kernel the agent ever ran (the same for every other CTE).
            func.coalesce(kernels.c.agent_id, "") == agent,
            at_epoch,
        ]

    step_names = _named("s_", STEP_FIELDS)
    steps = select(*unnest.rows(step_names).c).cte("steps")
    fields = (*end_fields, "generation", _SUSPEND_DETAIL)
    end_names = _named("e_", fields)
    given = unnest.rows(end_names)
    ends = select(*(unnest.picked(given, name, type_).label(name) for name, type_ in end_names)).cte("ends")
    stepped = (
        update(kernels)
        .where(
            *placed(steps, "s_"), _legal(steps.c.s_status, [s for s in statuses if s not in TERMINAL_KERNEL])
        )
        .values(
            status=steps.c.s_status,
            status_changed_at=now,
            started=or_(kernels.c.started, steps.c.s_status.in_(_STARTS)),
            master_port=func.coalesce(steps.c.s_master_port, kernels.c.master_port),
        )
        # The kernel has started from CREATING on; its session once a process runs (kernels.py).
        .returning(
            kernels.c.id,
            kernels.c.session_id,
            (steps.c.s_status == str(KernelStatus.RUNNING)).label("started"),
        )
        .cte("stepped")
    )

    # Suspend mode: the kernel of a session being suspended waits SUSPENDED instead of ending.
    suspending = (
        select(kernels.c.id)
        .join(sessions, sessions.c.id == kernels.c.session_id)
        .join(ends, ends.c.e_id == kernels.c.id)
        .where(*placed(ends, "e_"), sessions.c.termination_reason == str(TerminationReason.SUSPENDED))
        .cte("suspending")
    )
    values: dict[str, Any] = {}
    for field in end_fields[1:]:
        values[field] = _end_value(field, ends.c["e_" + field])
    ended = (
        update(kernels)
        .where(
            *placed(ends, "e_"),
            _legal(ends.c.e_status, [s for s in statuses if s in TERMINAL_KERNEL]),
            kernels.c.id.not_in(select(suspending.c.id)),
        )
        .values(status_changed_at=now, **values)
        .returning(kernels.c.id, kernels.c.session_id, ends.c.e_started.label("started"))
        .cte("ended")
    )
    suspended = (
        update(kernels)
        .where(
            *placed(ends, "e_"),
            kernels.c.id.in_(select(suspending.c.id)),
            kernels.c.status.in_([str(s) for s in kernel_sources(KernelStatus.SUSPENDED)]),
        )
        .values(
            status=str(KernelStatus.SUSPENDED),
            status_changed_at=now,
            detail=ends.c["e_" + _SUSPEND_DETAIL],
            logs_done=or_(kernels.c.logs_done, ends.c.e_logs_done),
        )
        .returning(kernels.c.id)
        .cte("suspended")
    )
    freed = (
        update(allocations)
        .where(
            allocations.c.kernel_id.in_(bindparam("e_ids", expanding=True)),  # by its index, as above
            allocations.c.kernel_id.in_(union(select(ended.c.id), select(suspended.c.id))),
            allocations.c.released_at.is_(None),
        )
        .values(released_at=now)
        .cte("freed")
    )

    # Only those not marked yet (as the statement read them): most reports need no second statement.
    def unmarked(session_id: ColumnElement[Any]) -> ColumnElement[bool]:
        return exists().where(sessions.c.id == session_id, sessions.c.started_at.is_(None))

    rows = [
        select(literal("agent").label("kind"), agent_ok.c.id),
        select(literal("moved").label("kind"), stepped.c.id),
        select(literal("moved").label("kind"), ended.c.id),
        select(literal("moved").label("kind"), suspended.c.id),
        # Sessions a process of which ran: marked started by the caller's next statement, not
        # here, where their rows would be locked after their kernels' (a move locks its sessions,
        # then their kernels: the two orders in one statement deadlocked).
        select(literal("started").label("kind"), stepped.c.session_id).where(
            stepped.c.started, unmarked(stepped.c.session_id)
        ),
        select(literal("started").label("kind"), ended.c.session_id).where(
            ended.c.started, unmarked(ended.c.session_id)
        ),
    ]
    return rows[0].union_all(*rows[1:]).subquery().select().add_cte(freed)


def _end_value(field: str, new: ColumnElement[Any]) -> ColumnElement[Any]:
    """kernels.py's _set, for a column of the `ends` CTE (JSON there is JSON already)."""
    if field in ("logs_done", "started"):
        return or_(kernels.c[field], new)
    if field == "master_port":
        return func.coalesce(new, kernels.c.master_port)
    return new


async def apply_round(
    conn: AsyncConnection,
    agent_id: str,
    epoch: int,
    steps: Sequence[KernelReport],
    endings: Sequence[tuple[Any, ...]],
    end_fields: tuple[str, ...],
    statuses: tuple[KernelStatus, ...],
    now: datetime,
) -> tuple[set[str], set[str]] | None:
    """One round (distinct kernels): the kernels moved and the sessions of which a process ran, or
    None when the agent's epoch is fenced (then nothing was written).  `endings` are kernels.py's
    _ending rows followed by the report's generation and its detail should it be suspended."""
    statement = round_statement(end_fields, statuses)
    step_rows = [(r.kernel_id, r.generation, str(r.status), r.master_port) for r in steps]
    params = {
        **unnest.arrays(_named("s_", STEP_FIELDS), step_rows),
        **unnest.arrays(_named("e_", (*end_fields, "generation", _SUSPEND_DETAIL)), endings),
        "s_ids": [r[0] for r in step_rows],
        "e_ids": [r[0] for r in endings],
        "k_now": now,
        "k_agent": agent_id,
        "k_epoch": epoch,
    }
    result = list(await conn.execute(statement, params))
    if not any(kind == "agent" for kind, _ in result):
        return None
    return {i for kind, i in result if kind == "moved"}, {i for kind, i in result if kind == "started"}
