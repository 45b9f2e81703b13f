"""An agent's report round on PostgreSQL in one statement: the agent's fence, every kernel's guarded
move (steps, endings, suspensions) and the allocations freed, as data-modifying CTEs.

A round holds one chain per kernel: its reports of one generation in the order sent, an ending (if
any) last.  A statement cannot write a row twice, so a chain is applied as one write whose outcome
was worked out here for every status the kernel may be in (domain `kernel_chain`): the row whose
`from` is the kernel's status applies.  What the row then holds is what the chain's statuses,
written one guarded UPDATE at a time (the portable path, store/kernels/reports.py), would have left.  The
guards are those of single reports: this agent at this epoch, the kernel's current placement
(generation), its current status.  An UPDATE re-checks its WHERE on a row changed meanwhile, so no
row needs locking first (a kernel whose status changed is tried again from its new one:
postgresql_reports.apply_round)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import (
    Boolean,
    ColumnElement,
    Select,
    String,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal,
    not_,
    null,
    or_,
    select,
    tuple_,
    union,
    union_all,
    update,
)
from sqlalchemy.types import TypeEngine

from corral.domain.cause import TerminationReason
from corral.domain.status import KernelStatus
from corral.domain.transitions import kernel_sources
from corral.store.dialect import unnest
from corral.store.tables import agents, allocations, kernels, sessions

_STATUS = kernels.c.status.type
_FLAG: TypeEngine[Any] = Boolean()
_PORT = kernels.c.master_port.type
# A chain's outcome that is a step (no ending applied): the status it reaches from `from`, the last
# port reported on the way, whether the kernel started (CREATING on) and whether a process ran.
STEPS = (
    ("s_id", kernels.c.id.type),
    ("s_generation", kernels.c.generation.type),
    ("s_from", _STATUS),
    ("s_status", _STATUS),
    ("s_port", _PORT),
    ("s_started", _FLAG),
    ("s_ran", _FLAG),
)
# A chain's outcome that ends it, from `from`: the status reached before its ending, and the same
# three as a step's for the steps on the way.  Its ending's own fields are in `ends`, once per chain.
ENDS_FROM = (
    ("f_id", kernels.c.id.type),
    ("f_from", _STATUS),
    ("f_before", _STATUS),
    ("f_port", _PORT),
    ("f_started", _FLAG),
    ("f_ran", _FLAG),
)
_SUSPEND_DETAIL = "suspend_detail"


def ends_fields(end_fields: Sequence[str]) -> tuple[tuple[str, Any], ...]:
    """An ending's fields (store/kernels/rows.py's END_FIELDS), its generation, and the detail it keeps should
    its session be suspending (_suspend's)."""
    fields = (*end_fields, "generation", _SUSPEND_DETAIL)
    return tuple(
        ("e_" + f, kernels.c.detail.type if f == _SUSPEND_DETAIL else kernels.c[f].type) for f in fields
    )


@cache
def round_statement(end_fields: tuple[str, ...]) -> Select[Any]:
    """The statement: ('agent', id) when the agent is at this epoch (nothing is written otherwise),
    ('moved', kernel id, from) for every kernel whose chain applied, ('halted', kernel id, from) for
    one whose steps applied but whose ending was refused (below), ('started', session id) for
    sessions left to mark started, and ('missed' or 'held', kernel id, status found) for this
    placement's kernels that did not move (apply_round).  `end_fields` is store/kernels/rows.py's
    END_FIELDS (id first).  The agent's contact is not written here: that UPDATE could wait on its
    row (locked by a placement) and the statement then read the sessions as they were before the
    wait, missing a suspension that placement wrote (Dialect.apply_report)."""
    now = bindparam("k_now", type_=kernels.c.status_changed_at.type)
    agent = bindparam("k_agent", type_=agents.c.id.type)
    epoch = bindparam("k_epoch", type_=agents.c.epoch.type)
    agent_ok = select(agents.c.id).where(agents.c.id == agent, agents.c.epoch == epoch).cte("agent_ok")
    at_epoch = select(agent_ok.c.id).exists()

    def placed(
        ids: str, kernel_id: Any, generation: Any, start: Any, *present: Any
    ) -> list[ColumnElement[bool]]:
        """The row guards, and that `present`'s rows exist: an uncorrelated EXISTS, tested once before
        any kernel is read (a report of steps alone reads no kernel for endings, none suspends)."""
        return [
            *(select(p).exists() for p in present),
            # The ids as a list too, so the planner may look kernels up by key from either side.
            kernels.c.id.in_(bindparam(ids, expanding=True)),
            kernels.c.id == kernel_id,
            kernels.c.generation == generation,
            # Not by the agent_id index: with a young table's statistics a generic plan took it for
            # two rows and read every kernel the agent ever ran (the same for every other CTE).
            func.coalesce(kernels.c.agent_id, "") == agent,
            kernels.c.status == start,
            at_epoch,
        ]

    # Materialized: a generic plan guesses the unnest's row count and would run it for every kernel.
    steps = select(*unnest.rows(STEPS).c).cte("steps").prefix_with("MATERIALIZED")
    end_names = ends_fields(end_fields)
    given = unnest.rows(end_names)
    ends = select(*(unnest.picked(given, name, type_).label(name) for name, type_ in end_names)).cte("ends")
    ends_from = select(*unnest.rows(ENDS_FROM).c).cte("ends_from")
    # The writes below meet one outcome per kernel, the one from its status as this statement's
    # snapshot has it: joined to all of a kernel's outcomes (one per status), the planner's nested
    # loop reads every outcome of the round for every kernel.  The writes keep their own guards: a kernel
    # whose status changes between the snapshot and the write's row lock is not written, and
    # apply_round tries it again from its new status (AGAIN times at most).
    now_at = kernels.alias("now_at")
    stepping = (
        select(*steps.c)
        .join(now_at, and_(now_at.c.id == steps.c.s_id, now_at.c.status == steps.c.s_from))
        .where(now_at.c.id.in_(bindparam("s_ids", expanding=True)))
        .cte("stepping")
    )
    stepped = (
        update(kernels)
        .where(*placed("s_ids", stepping.c.s_id, stepping.c.s_generation, stepping.c.s_from, steps.c.s_id))
        .values(
            status=stepping.c.s_status,
            status_changed_at=now,
            started=or_(kernels.c.started, stepping.c.s_started),
            master_port=func.coalesce(stepping.c.s_port, kernels.c.master_port),
        )
        .returning(kernels.c.id, kernels.c.session_id, stepping.c.s_from, stepping.c.s_ran)
        .cte("stepped")
    )

    # Each ending with its outcome from the status its kernel is in: read by the three writes below.
    at = (
        select(*ends.c, *ends_from.c)
        .join_from(ends, ends_from, ends_from.c.f_id == ends.c.e_id)
        .join(now_at, and_(now_at.c.id == ends.c.e_id, now_at.c.status == ends_from.c.f_from))
        .where(now_at.c.id.in_(bindparam("e_ids", expanding=True)))
        .cte("ending_at")
    )

    def ending(*where: ColumnElement[bool], present: Any = ends.c.e_id) -> list[ColumnElement[bool]]:
        return [
            *placed("e_ids", at.c.e_id, at.c.e_generation, at.c.f_from, present),
            *where,
        ]

    # Suspend mode: the kernel of a session being suspended waits SUSPENDED instead of ending.
    suspending = (
        select(kernels.c.id)
        .join(sessions, sessions.c.id == kernels.c.session_id)
        .join(ends, ends.c.e_id == kernels.c.id)
        .where(
            kernels.c.id.in_(bindparam("e_ids", expanding=True)),
            sessions.c.termination_reason == str(TerminationReason.SUSPENDED),
        )
        .cte("suspending")
    )
    is_suspending = kernels.c.id.in_(select(suspending.c.id))
    suspendable = at.c.f_before.in_([str(s) for s in kernel_sources(KernelStatus.SUSPENDED)])
    on_the_way = {
        "status_changed_at": now,
        "started": or_(kernels.c.started, at.c.f_started),
        "master_port": func.coalesce(at.c.f_port, kernels.c.master_port),
    }
    # `started` and `master_port` count the chain's steps too (below).
    values = {f: _end_value(f, at.c["e_" + f]) for f in end_fields[1:] if f not in ("started", "master_port")}
    ended = (
        update(kernels)
        .where(*ending(not_(is_suspending)))
        .values(
            **values,
            status_changed_at=now,
            started=or_(kernels.c.started, at.c.e_started, at.c.f_started),
            master_port=func.coalesce(at.c.e_master_port, at.c.f_port, kernels.c.master_port),
        )
        .returning(
            kernels.c.id,
            kernels.c.session_id,
            at.c.f_from,
            or_(at.c.e_started, at.c.f_ran).label("ran"),
        )
        .cte("ended")
    )
    suspended = (
        update(kernels)
        .where(*ending(is_suspending, suspendable, present=suspending.c.id))
        .values(
            **on_the_way,
            status=str(KernelStatus.SUSPENDED),
            detail=at.c["e_" + _SUSPEND_DETAIL],
            logs_done=or_(kernels.c.logs_done, at.c.e_logs_done),
        )
        .returning(kernels.c.id, kernels.c.session_id, at.c.f_from, at.c.f_ran)
        .cte("suspended")
    )
    # Suspending, but not from where the steps got to: those steps stand and the ending is refused,
    # as when each is written on its own.
    halted = (
        update(kernels)
        .where(
            *ending(is_suspending, not_(suspendable), at.c.f_before != at.c.f_from, present=suspending.c.id)
        )
        .values(**on_the_way, status=at.c.f_before)
        .returning(kernels.c.id, kernels.c.session_id, at.c.f_from, at.c.f_ran)
        .cte("halted")
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

    # Sessions a process of which ran are marked started here, but only those whose rows no one
    # else has locked: their rows are locked after their kernels', and a move locks its sessions,
    # then their kernels (waiting, the two orders deadlocked).  Those skipped, and those of a later
    # round in a report's transaction, are the caller's to mark, by a statement of its own.
    moves = (("moved", stepped), ("moved", ended), ("moved", suspended), ("halted", halted))
    ran = union_all(*(select(m.c.session_id).where(m.c[3]) for _, m in moves)).cte("ran")
    free = (
        select(sessions.c.id)
        .where(sessions.c.id.in_(select(ran.c.session_id)), sessions.c.started_at.is_(None))
        .with_for_update(of=sessions, skip_locked=True)
    )
    marked = (
        update(sessions)
        .where(sessions.c.id.in_(free.scalar_subquery()))
        .values(started_at=now)
        .returning(sessions.c.id)
        .cte("marked")
    )
    # The statement's reads all see the rows as they were before it: `marked` is read from its own.
    left = exists().where(
        sessions.c.id == ran.c.session_id,
        sessions.c.started_at.is_(None),
        sessions.c.id.not_in(select(marked.c.id)),
    )
    no_status = null().cast(String)
    rows: list[Select[Any]] = [select(literal("agent").label("kind"), agent_ok.c.id, no_status)]
    rows += [select(literal(kind), m.c[0], m.c[2]) for kind, m in moves]
    rows.append(select(literal("started"), ran.c.session_id, no_status).where(left).distinct())
    # This agent's reported kernels of the reported generation that did not move, with their status
    # as the statement found it: when the chain has an outcome from there, the kernel changed while
    # the statement ran (apply_round tries it again); when it has none, its reports are refused.
    reported = union(select(steps.c.s_id, steps.c.s_generation), select(ends.c.e_id, ends.c.e_generation))
    rows.append(
        select(
            # 'held': its session is being suspended (apply_round tells a refusal of its ending).
            case((is_suspending, literal("held")), else_=literal("missed")),
            kernels.c.id,
            kernels.c.status,
        ).where(
            kernels.c.id.in_(bindparam("k_ids", expanding=True)),
            func.coalesce(kernels.c.agent_id, "") == agent,
            tuple_(kernels.c.id, kernels.c.generation).in_(reported),
            kernels.c.id.not_in(union_all(*(select(m.c[0]) for _, m in moves))),
            at_epoch,
        )
    )
    return rows[0].union_all(*rows[1:]).subquery().select().add_cte(freed)


def _end_value(field: str, new: ColumnElement[Any]) -> ColumnElement[Any]:
    """store/kernels/rows.py's new_value, for a column of the `ends` CTE (JSON there is JSON already)."""
    if field == "logs_done":
        return or_(kernels.c[field], new)
    return new
