"""Kernels: placement rows, kill orders, agent reports (epoch-fenced), declaring kernels gone."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from decimal import Decimal
from functools import cache
from typing import Any

import structlog
from sqlalchemy import (
    BindParameter,
    ColumnElement,
    String,
    and_,
    bindparam,
    cast,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Select
from sqlalchemy.sql.dml import ReturningUpdate

from corral.domain.cause import TerminationReason
from corral.domain.devices import assign_devices
from corral.domain.placement import Placement
from corral.domain.records import KernelRecord, KernelReport, OrderedKernel
from corral.domain.rendezvous import pick_port, port_range
from corral.domain.status import (
    KERNEL_ON_AGENT,
    KERNEL_STARTED,
    TERMINAL_KERNEL,
    TERMINAL_SESSION,
    KernelStatus,
)
from corral.domain.transitions import kernel_sources
from corral.store import convert, report_statement, unnest
from corral.store.db import chunks
from corral.store.tables import LIVE_KERNEL, UNSHIPPED, agents, allocations, kernels, sessions

log = structlog.get_logger("corral.store.kernels")

# What an agent may say of its kernel: how its preparation and its process went.  The rest
# (PENDING, SCHEDULED, TERMINATING, SUSPENDED) is the manager's to decide, never a report's.
AGENT_REPORTS = frozenset(
    {
        KernelStatus.PREPARING,
        KernelStatus.PULLING,
        KernelStatus.PREPARED,
        KernelStatus.CREATING,
        KernelStatus.RUNNING,
        *TERMINAL_KERNEL,
    }
)


async def write_placements(conn: AsyncConnection, placed: dict[str, Placement], now: datetime) -> None:
    """Allocation rows and agent assignment for sessions that just moved to SCHEDULED."""
    if not placed:
        return
    if conn.dialect.name == "postgresql":
        rows = await _place_in_one(conn, placed, now)
    else:
        rows = await _place_by_agent(conn, placed, now)
    await _assign_gpus(conn, [r for r in rows if int(Decimal(str(r["slots"].get("gpu", 0)))) > 0])
    await _assign_rendezvous(conn, placed)


_PLACED = (
    ("p_session", kernels.c.session_id.type),
    ("p_rank", kernels.c.rank.type),
    ("p_agent", kernels.c.agent_id.type),
)


async def _place_in_one(
    conn: AsyncConnection, placed: dict[str, Placement], now: datetime
) -> list[dict[str, Any]]:
    """PostgreSQL: the allocations and the kernels' agents in one statement (four round trips
    before, and an INSERT text of its own for every number of kernels placed)."""
    ranks = [(sid, rank, agent) for sid, p in placed.items() for rank, agent in enumerate(p.agent_ids)]
    params = {**unnest.arrays(_PLACED, ranks), "p_now": now}
    rows = [dict(r._mapping) for r in await conn.execute(_placements_statement(), params)]
    _all_placed(placed, len(rows), rows[0]["kernels_of_placed"] if rows else 0)
    for r in rows:
        del r["kernels_of_placed"]
    return rows


def _all_placed(placed: dict[str, Placement], allocated: int, kernels_found: int) -> None:
    """A rank without a kernel, or a kernel without a rank, is never placed: the placement's
    transaction fails instead (a half-placed gang would hold its CPUs and never start)."""
    ranks = sum(len(p.agent_ids) for p in placed.values())
    if allocated != ranks or kernels_found != ranks:
        named = ", ".join(sorted(placed)[:5]) + (", ..." if len(placed) > 5 else "")
        raise RuntimeError(
            f"placement of {ranks} kernels found {kernels_found} ({allocated} placed); sessions {named}"
        )


@cache
def _placements_statement() -> Select[Any]:
    """INSERT the allocations of the kernels at (session, rank) on their agents, returning them;
    and UPDATE those kernels' agent."""
    placed = select(*unnest.rows(_PLACED).c).cte("placed")
    at = and_(kernels.c.session_id == placed.c.p_session, kernels.c.rank == placed.c.p_rank)
    now = bindparam("p_now", type_=allocations.c.created_at.type)
    chosen = select(kernels.c.id, kernels.c.session_id, placed.c.p_agent, kernels.c.resources, now).where(at)
    columns = ["kernel_id", "session_id", "agent_id", "slots", "created_at"]
    returned = [allocations.c[c] for c in columns[:-1]]
    added = insert(allocations).from_select(columns, chosen).returning(*returned).cte("added")
    assigned = update(kernels).where(at).values(agent_id=placed.c.p_agent, devices=None).cte("assigned")
    # Every kernel of the placed sessions, ranked or not: one without a rank is caught too.
    found = (
        select(func.count())
        .select_from(kernels)
        .where(kernels.c.session_id.in_(select(placed.c.p_session)))
        .scalar_subquery()
    )
    return select(*added.c, found.label("kernels_of_placed")).add_cte(assigned)


_PLACED_KERNELS = select(kernels.c.id, kernels.c.session_id, kernels.c.rank, kernels.c.resources).where(
    kernels.c.session_id.in_(bindparam("ids", expanding=True))
)
_ASSIGN_AGENT = (
    update(kernels)
    .where(kernels.c.id.in_(bindparam("ids", expanding=True)))
    .values(agent_id=bindparam("agent"), devices=None)
)


async def _place_by_agent(
    conn: AsyncConnection, placed: dict[str, Placement], now: datetime
) -> list[dict[str, Any]]:
    rows = []
    kernels_found = 0
    for part in chunks(list(placed)):
        found = (await conn.execute(_PLACED_KERNELS, {"ids": part})).all()
        rows += [
            {
                "kernel_id": kid,
                "session_id": sid,
                "agent_id": ranked[rank],
                "slots": slots,
                "created_at": now,
            }
            for kid, sid, rank, slots in found
            if rank < len(ranked := placed[sid].agent_ids)
        ]
        kernels_found += len(found)
    _all_placed(placed, len(rows), kernels_found)
    await conn.execute(insert(allocations), rows)
    by_agent: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        by_agent[r["agent_id"]].append(r["kernel_id"])
    for agent_id, kernel_ids in sorted(by_agent.items()):  # a statement per agent, not per kernel
        for part in chunks(kernel_ids):
            await conn.execute(_ASSIGN_AGENT, {"ids": part, "agent": agent_id})
    return rows


async def _assign_rendezvous(conn: AsyncConnection, placed: dict[str, Placement]) -> None:
    """Rank 0's port, for gangs spread over agents whose rank-0 agent declares rendezvous ports:
    with it the rendezvous is known at placement and every rank starts once prepared.  A port no
    live gang holds on that agent's host (agents sharing an address share its ports; the group's
    lock serialises placements)."""
    spread = {sid: p.agent_ids[0] for sid, p in placed.items() if len(set(p.agent_ids)) > 1}
    if not spread:
        return
    declared = await conn.execute(
        select(agents.c.id, agents.c.info, agents.c.address).where(
            agents.c.id.in_(sorted(set(spread.values())))
        )
    )
    ranges: dict[str, tuple[int, int]] = {}
    host: dict[str, str] = {}
    for agent_id, info, address in declared:
        found = port_range(info)
        if found is not None:
            ranges[agent_id], host[agent_id] = found, address
    if not ranges:
        return
    held: dict[str, set[int]] = {address: set() for address in host.values()}
    rows = await conn.execute(
        select(agents.c.address, kernels.c.master_port)
        .join(kernels, kernels.c.agent_id == agents.c.id)
        .join(allocations, allocations.c.kernel_id == kernels.c.id)
        .where(
            agents.c.address.in_(sorted(held)),
            allocations.c.released_at.is_(None),
            LIVE_KERNEL,  # an ended kernel holds no port; and by the index of kernels on agents
            kernels.c.rank == 0,
            kernels.c.master_port.is_not(None),
        )
    )
    for address, port in rows:
        held[address].add(int(port))
    for sid, agent_id in sorted(spread.items()):
        if agent_id not in ranges:
            continue  # no ports declared: this gang takes the start order's round trip
        taken = held[host[agent_id]]
        port = pick_port(ranges[agent_id], taken, sid)
        if port is None:
            continue  # every port held: the same
        taken.add(port)
        await conn.execute(
            update(kernels).where(kernels.c.session_id == sid, kernels.c.rank == 0).values(master_port=port)
        )


async def _assign_gpus(conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
    """Whole devices by index for the kernels just placed that ask for GPUs: the lowest indexes no
    live kernel of their agent holds (the group's lock serialises placements)."""
    if not rows:
        return
    agent_ids = sorted({r["agent_id"] for r in rows})
    counts = {
        r.id: int(Decimal(str((r.capacity or {}).get("gpu", 0))))
        for r in await conn.execute(select(agents.c.id, agents.c.capacity).where(agents.c.id.in_(agent_ids)))
    }
    taken: dict[str, set[int]] = {a: set() for a in agent_ids}
    held = await conn.execute(
        select(allocations.c.agent_id, kernels.c.devices)
        .join(kernels, kernels.c.id == allocations.c.kernel_id)
        .where(
            allocations.c.agent_id.in_(agent_ids),
            allocations.c.released_at.is_(None),
            kernels.c.devices.is_not(None),
        )
    )
    for agent_id, devices in held:
        taken[agent_id].update(int(d) for d in devices or ())
    for r in rows:
        want = int(Decimal(str(r["slots"]["gpu"])))
        got = assign_devices(counts.get(r["agent_id"], 0), taken[r["agent_id"]], want)
        if got is None:  # capacity accounting said it fits: a bug, said loudly, not a wedge
            log.error("no free GPU index for a placed kernel", kernel=r["kernel_id"], agent=r["agent_id"])
            continue
        taken[r["agent_id"]].update(got)
        await conn.execute(update(kernels).where(kernels.c.id == r["kernel_id"]).values(devices=list(got)))


# Statements on the path of every report, built once (building one cost more than running it).
_NOW = bindparam("k_now", type_=kernels.c.status_changed_at.type)
_IDS: BindParameter[list[str]] = bindparam("k_ids", expanding=True)
_RELEASE = (
    update(allocations)
    .where(allocations.c.kernel_id.in_(_IDS), allocations.c.released_at.is_(None))
    .values(released_at=_NOW)
)


async def release(conn: AsyncConnection, kernel_ids: list[str], now: datetime) -> None:
    if kernel_ids:
        await conn.execute(_RELEASE, {"k_ids": kernel_ids, "k_now": now})


async def order_kill(conn: AsyncConnection, kernel_ids: list[str], grace: float | None = None) -> None:
    if kernel_ids:
        await conn.execute(
            update(kernels).where(kernels.c.id.in_(kernel_ids)).values(kill_requested=True, kill_grace=grace)
        )


async def close_output_of(conn: AsyncConnection, agent_id: str) -> None:
    """The agent left or a new incarnation registered: it will ship nothing more of the kernels that
    had ended, so their output is as complete as it will be.  Only rows not marked yet are written:
    every kernel the agent ever ran was (550 rows, 15 ms, at a registration after 1,000 sessions)."""
    await conn.execute(
        update(kernels)
        .where(
            kernels.c.agent_id == agent_id,
            kernels.c.status.in_([str(s) for s in TERMINAL_KERNEL]),
            UNSHIPPED,
        )
        .values(logs_done=True)
    )


async def order_force_kill(conn: AsyncConnection, kernel_ids: list[str]) -> None:
    """Escalation: the agent kills these at once (SIGKILL), without a grace period."""
    if kernel_ids:
        await conn.execute(
            update(kernels).where(kernels.c.id.in_(kernel_ids)).values(kill_requested=True, kill_forced=True)
        )


async def end_kernels(
    conn: AsyncConnection, kernel_ids: list[str], status: KernelStatus, now: datetime, **values: Any
) -> list[str]:
    """Move kernels to a terminal status (never handed out, or declared gone) and free capacity."""
    if not kernel_ids:
        return []
    result = await conn.execute(
        update(kernels)
        .where(kernels.c.id.in_(kernel_ids), kernels.c.status.in_([str(s) for s in kernel_sources(status)]))
        .values(status=str(status), status_changed_at=now, **values)
        .returning(kernels.c.id)
    )
    ended = list(result.scalars())
    await release(conn, ended, now)
    return ended


async def apply_reports(
    conn: AsyncConnection, agent_id: str, reports: Sequence[KernelReport], now: datetime
) -> list[str]:
    """A batch of reports, each kernel's in the order sent; returns the refused kernel ids.

    Kernels are independent rows, so the batch is applied in rounds: round i holds every kernel's
    i-th report, and a round's non-terminal reports go in one guarded UPDATE per status (the same
    guard as a single report: this agent, this generation, a legal source).  An ending is its own
    guarded UPDATE (it carries its own outcome); allocations freed by endings are written once per
    round, and sessions whose first process started once per batch."""
    refused, rounds = report_rounds(reports)
    started: set[str] = set()
    for batch in rounds:
        steps = [r for r in batch if r.status not in TERMINAL_KERNEL]
        moved = await _apply_steps(conn, agent_id, steps, now, started)
        endings = [r for r in batch if r.status in TERMINAL_KERNEL]
        moved |= await _apply_endings(conn, agent_id, endings, now, started)
        refused += [r.kernel_id for r in batch if r.kernel_id not in moved]
    await mark_started(conn, sorted(started), now)
    return refused


def report_rounds(reports: Sequence[KernelReport]) -> tuple[list[str], list[list[KernelReport]]]:
    """The kernels refused outright (a status no agent may report), and the rest in rounds: round i
    holds every kernel's i-th report."""
    refused = [r.kernel_id for r in reports if r.status not in AGENT_REPORTS]
    rounds: list[list[KernelReport]] = []
    seen: dict[str, int] = defaultdict(int)
    for r in (r for r in reports if r.status in AGENT_REPORTS):
        i = seen[r.kernel_id]
        seen[r.kernel_id] += 1
        if i == len(rounds):
            rounds.append([])
        rounds[i].append(r)
    return refused, rounds


def report_chains(reports: Sequence[KernelReport]) -> tuple[list[str], list[list[list[KernelReport]]]]:
    """report_rounds for PostgreSQL's statement per round: the kernels refused outright, and the
    rest in rounds of chains.  A chain is one kernel's reports in the order sent, of one generation,
    up to its first ending; round i holds every kernel's i-th chain (most reports: one round)."""
    refused = [r.kernel_id for r in reports if r.status not in AGENT_REPORTS]
    chains: dict[str, list[list[KernelReport]]] = defaultdict(list)
    for r in (r for r in reports if r.status in AGENT_REPORTS):
        mine = chains[r.kernel_id]
        if not mine or mine[-1][-1].generation != r.generation or mine[-1][-1].status in TERMINAL_KERNEL:
            mine.append([])
        mine[-1].append(r)
    rounds: list[list[list[KernelReport]]] = []
    for mine in chains.values():
        for i, chain in enumerate(mine):
            if i == len(rounds):
                rounds.append([])
            rounds[i].append(chain)
    return refused, rounds


async def apply_reports_at(
    conn: AsyncConnection,
    agent_id: str,
    epoch: int,
    refused: list[str],
    rounds: Sequence[Sequence[Sequence[KernelReport]]],
    now: datetime,
) -> tuple[list[str], list[str]] | None:
    """apply_reports on PostgreSQL, given report_chains' result, with the agent's fence checked by
    the same statements: one per round (store/report_statement.py).  Returns the refused kernel
    ids (`refused` and those of the rounds) and the sessions still to mark started (mark_started,
    by the caller after its transaction, if any: inside one, the round's kernels stay locked
    while that waits on a session a move holds, which waits on them).  None when `epoch` is
    fenced: the caller rolls back what earlier rounds wrote (more than one round takes a
    transaction; one round is a statement of its own, which wrote nothing, unless the fence came
    between it and a retry of a chain that raced: report_statement.apply_round)."""
    refused = list(refused)
    started: set[str] = set()
    for chains in rounds or [[]]:  # an empty report still asks whether the agent is fenced
        found = await report_statement.apply_round(conn, agent_id, epoch, chains, _END_FIELDS, _end_row, now)
        if found is None:
            return None
        refused += found[0]
        started |= found[1]
    return refused, sorted(started)


def _end_row(report: KernelReport) -> tuple[Any, ...]:
    """An ending's row for report_statement: its values, its generation, its detail if suspended."""
    return (*_ending(report), report.generation, _suspended_detail(report))


def _suspended_detail(report: KernelReport) -> dict[str, Any]:
    """What a kernel of a session being suspended keeps of how its process ended (its detail)."""
    ended = {"exit_code": report.exit_code, "signal": report.signal, "oom_killed": report.oom_killed}
    return {**(report.detail or {}), "suspended": ended}


async def _apply_steps(
    conn: AsyncConnection, agent_id: str, steps: Sequence[KernelReport], now: datetime, started: set[str]
) -> set[str]:
    """Non-terminal reports of distinct kernels, one guarded UPDATE per status; the moved.  Adds
    to `started` the sessions of kernels that started."""
    groups: dict[KernelStatus, list[KernelReport]] = defaultdict(list)
    for r in steps:
        groups[r.status].append(r)
    moved: set[str] = set()
    ports: list[tuple[Any, ...]] = []
    for status, group in groups.items():
        result = await conn.execute(_step(status), {**_guard_params(agent_id, group), "k_now": now})
        for kernel_id, session_id in result:
            moved.add(kernel_id)
            if status is KernelStatus.RUNNING:
                started.add(session_id)
        # Every rank 0 picks its own port: set apart, in one write (_write_many), for the kernels that moved.
        ports += [(r.kernel_id, r.master_port) for r in group if r.master_port is not None]
    ports = [p for p in ports if p[0] in moved]
    if ports:
        await _write_many(conn, _PORT_FIELDS, ports)
    return moved


def _guard(status: KernelStatus | None) -> list[ColumnElement[bool]]:
    """A report's guard: this agent's current placement (a re-placed kernel is a new generation,
    and reports about an earlier one are stale), from a legal source of the reported status
    (checked by the caller without `status`)."""
    guard = [
        # The ids alone too: that is what makes the planner look kernels up by key (the pair alone
        # made SQLite scan every kernel the agent ever ran).
        kernels.c.id.in_(_IDS),
        # The pair as one text, `id:generation`: a list of scalars is one parameter on PostgreSQL
        # (store/db.py), where a list of pairs is a statement of its own for every length.
        (kernels.c.id + ":" + cast(kernels.c.generation, String)).in_(bindparam("k_pairs", expanding=True)),
        kernels.c.agent_id == bindparam("k_agent"),
    ]
    if status is not None:
        guard.append(kernels.c.status.in_([str(s) for s in kernel_sources(status)]))
    return guard


def _guard_params(agent_id: str, group: Sequence[KernelReport]) -> dict[str, Any]:
    return {
        "k_ids": [r.kernel_id for r in group],
        "k_pairs": [f"{r.kernel_id}:{r.generation}" for r in group],
        "k_agent": agent_id,
    }


@cache
def _step(status: KernelStatus) -> ReturningUpdate[str, str]:
    """Kernels reported in a non-terminal `status` move there, through the guard."""
    values: dict[str, Any] = {"status": str(status), "status_changed_at": _NOW}
    if status in KERNEL_STARTED:
        values["started"] = True
    return (
        update(kernels).where(*_guard(status)).values(**values).returning(kernels.c.id, kernels.c.session_id)
    )


_STARTED = (
    update(sessions).where(sessions.c.id.in_(_IDS), sessions.c.started_at.is_(None)).values(started_at=_NOW)
)


async def mark_started(conn: AsyncConnection, session_ids: list[str], now: datetime) -> None:
    """A session has started when its first process has, even one that ended before a cycle
    promoted the session to RUNNING (its time budget and its history count from then)."""
    if session_ids:
        await conn.execute(_STARTED, {"k_ids": session_ids, "k_now": now})


async def _apply_endings(
    conn: AsyncConnection, agent_id: str, endings: Sequence[KernelReport], now: datetime, started: set[str]
) -> set[str]:
    """Terminal reports of distinct kernels through the single report's guard, set-wise: the rows
    that pass it are read (and locked) in one query, then written in one _write_many; the moved.
    A kernel of a session being suspended waits SUSPENDED instead (preemption in suspend mode).
    Adds to `started` the sessions of kernels whose process ran (an end with an exit code or a
    signal), for a session whose start was never reported."""
    if not endings:
        return set()
    found = await _ending_kernels(conn, agent_id, endings)
    suspending = {kid for kid, (_, _, suspended) in found.items() if suspended}
    moved: set[str] = set()
    for r in endings:
        if r.kernel_id in suspending and await _suspend(conn, agent_id, r, now):
            moved.add(r.kernel_id)
    passing = {
        r.kernel_id: found[r.kernel_id][0]
        for r in endings
        if r.kernel_id in found
        and r.kernel_id not in suspending
        and found[r.kernel_id][1] in kernel_sources(r.status)  # a legal source of the reported end
    }
    rows = [_ending(r) for r in endings if r.kernel_id in passing]
    started.update(passing[r[0]] for r in rows if r[-1])  # id first, `started` last (_END_FIELDS)
    if rows:
        await _write_many(conn, _END_FIELDS, rows, now)
    ended = sorted(r[0] for r in rows)
    moved.update(ended)
    await release(conn, ended, now)  # a suspended kernel's is freed by _suspend
    return moved


async def _ending_kernels(
    conn: AsyncConnection, agent_id: str, reports: Sequence[KernelReport]
) -> dict[str, tuple[str, KernelStatus, bool]]:
    """The reported kernels that are this agent's current placement (a re-placed kernel is a new
    generation), as (session id, status, whether its session is being suspended): one read for
    the guard of every ending, whatever its status, and for suspend mode's preemption.  On
    PostgreSQL the kernels' rows are locked, so what was read still holds when they are written."""
    lock = conn.dialect.name != "sqlite"  # SQLite: the writer holds the database's one write lock
    query = _ENDING_KERNELS.with_for_update(of=kernels) if lock else _ENDING_KERNELS
    rows = await conn.execute(query, _guard_params(agent_id, reports))
    return {kid: (sid, KernelStatus(status), bool(suspended)) for kid, sid, status, suspended in rows}


_ENDING_KERNELS = (
    select(
        kernels.c.id,
        kernels.c.session_id,
        kernels.c.status,
        sessions.c.termination_reason == str(TerminationReason.SUSPENDED),
    )
    .join(sessions, sessions.c.id == kernels.c.session_id)
    .where(*_guard(None))
)


# A terminal report's write, field by field (the guard was checked, and the rows locked, by
# _ending_kernels): the kernel's id, then the columns it sets.
_END_FIELDS = (
    "id",
    "status",
    "exit_code",
    "signal",
    "oom_killed",
    "killed_by_corral",
    "image_failed",
    "agent_lost",
    "exited_at_ns",
    "termination_message",
    "error_record",
    "conditions",
    "detail",
    "logs_done",
    "master_port",
    "started",
)
# A rank 0's port, reported with its start.
_PORT_FIELDS = ("id", "master_port")


def _ending(report: KernelReport) -> tuple[Any, ...]:
    """One terminal report's values, in _END_FIELDS' order."""
    return (
        report.kernel_id,
        str(report.status),
        report.exit_code,
        report.signal,
        report.oom_killed,
        report.killed_by_corral,
        report.image_failed,
        report.agent_lost,
        report.exited_at_ns,
        report.termination_message,
        report.error_record,
        ["oom_killed"] if report.oom_killed else [],
        report.detail,
        report.output_done,
        report.master_port,
        report.exit_code is not None or report.signal is not None,
    )


def _set(field: str, new: ColumnElement[Any]) -> ColumnElement[Any]:
    """What a field's column becomes given its reported value `new`."""
    if field in ("logs_done", "started"):
        return or_(kernels.c[field], new)  # never back once done / once started
    if field == "master_port":
        return func.coalesce(new, kernels.c.master_port)  # an ending without a port keeps the one set
    return new


async def _write_many(
    conn: AsyncConnection,
    fields: tuple[str, ...],
    rows: Sequence[tuple[Any, ...]],
    now: datetime | None = None,
) -> None:
    """Each row's values (id first) written to its kernel: on PostgreSQL one statement for all
    (store/unnest.py), elsewhere one executemany.  With `now`, the status changed then."""
    # Each kernel once (a round holds one report per kernel): an UPDATE ... FROM applies only one
    # of two rows for the same kernel, where the executemany applied both in turn.
    assert len({row[0] for row in rows}) == len(rows), "a kernel twice in one write"
    set_wise = conn.dialect.name == "postgresql"
    statement = _writes(fields, set_wise, now is not None)
    shared = {"k_now": now} if now is not None else {}
    named = _named(fields)
    if set_wise:
        await conn.execute(statement, {**unnest.arrays(named, rows), **shared})
    else:
        names = [name for name, _ in named]
        await conn.execute(statement, [{**dict(zip(names, row, strict=True)), **shared} for row in rows])


@cache
def _named(fields: tuple[str, ...]) -> tuple[tuple[str, Any], ...]:
    """Each field's parameter name and type: prefixed, as an UPDATE reserves its columns' names."""
    return tuple(("k_" + f, kernels.c[f].type) for f in fields)


@cache
def _writes(fields: tuple[str, ...], set_wise: bool, timed: bool) -> Any:
    """_write_many's statement: UPDATE ... FROM unnest(...) on PostgreSQL, else one per row."""
    named = _named(fields)
    given = unnest.rows(named) if set_wise else None
    values: dict[str, Any] = {}
    for field, (name, type_) in zip(fields, named, strict=True):
        new = unnest.picked(given, name, type_) if given is not None else bindparam(name, type_=type_)
        values[field] = _set(field, new)
    key = values.pop("id")
    if timed:
        values["status_changed_at"] = bindparam("k_now", type_=kernels.c.status_changed_at.type)
    return update(kernels).where(kernels.c.id == key).values(**values)


async def _guarded(
    conn: AsyncConnection, agent_id: str, report: KernelReport, status: KernelStatus, values: dict[str, Any]
) -> bool:
    """The report's move to `status`, only for this agent's current placement from a legal source."""
    result = await conn.execute(
        update(kernels)
        .where(
            kernels.c.id == report.kernel_id,
            kernels.c.agent_id == agent_id,
            # A re-placed kernel is a new generation: reports about an earlier placement are stale.
            kernels.c.generation == report.generation,
            kernels.c.status.in_([str(s) for s in kernel_sources(status)]),
        )
        .values(**values)
    )
    return bool(result.rowcount)


async def _suspend(conn: AsyncConnection, agent_id: str, report: KernelReport, now: datetime) -> bool:
    """A suspended session's kernel has stopped: it waits SUSPENDED, its allocation freed. How it
    ended is kept in its detail only: it is not an outcome (a resumed kernel starts afresh)."""
    values = {
        "status": str(KernelStatus.SUSPENDED),
        "status_changed_at": now,
        "detail": _suspended_detail(report),
        "logs_done": or_(kernels.c.logs_done, literal(report.output_done)),
    }
    moved = await _guarded(conn, agent_id, report, KernelStatus.SUSPENDED, values)
    if moved:
        await release(conn, [report.kernel_id], now)
    return moved


_ORDERS = (
    select(agents.c.epoch.label("agent_epoch"), *(kernels.c[f.name] for f in fields(OrderedKernel)))
    .select_from(
        agents.outerjoin(
            kernels,
            and_(
                kernels.c.agent_id == agents.c.id,
                LIVE_KERNEL,
                kernels.c.status.in_([str(s) for s in KERNEL_ON_AGENT]),
            ),
        )
    )
    .where(agents.c.id == bindparam("k_agent"))
    .order_by(kernels.c.session_id, kernels.c.rank)
)
_ORDER_STATUS = [f.name for f in fields(OrderedKernel)].index("status")


async def orders_for(conn: AsyncConnection, agent_id: str, epoch: int) -> list[OrderedKernel] | None:
    """The agent's kernels that it should hold a process (or preparation) for; None when `epoch`
    is not the agent's current one (fenced).  One query: every order poll asks."""
    rows = (await conn.execute(_ORDERS, {"k_agent": agent_id})).all()
    if not rows or rows[0][0] != epoch:
        return None
    mine = []
    for _, *values in rows:
        if values[0] is not None:  # the agent's row, joined to no kernel
            values[_ORDER_STATUS] = convert.kernel_status(values[_ORDER_STATUS])
            mine.append(OrderedKernel(*values))
    return mine


async def get(conn: AsyncConnection, kernel_id: str) -> KernelRecord | None:
    row = (await conn.execute(select(kernels).where(kernels.c.id == kernel_id))).first()
    return convert.kernel(row) if row else None


async def move_to_terminating(conn: AsyncConnection, kernel_ids: list[str], now: datetime) -> None:
    if kernel_ids:
        await conn.execute(
            update(kernels)
            .where(
                kernels.c.id.in_(kernel_ids),
                kernels.c.status.in_([str(s) for s in kernel_sources(KernelStatus.TERMINATING)]),
            )
            .values(status=str(KernelStatus.TERMINATING), status_changed_at=now)
        )


async def sessions_on(
    conn: AsyncConnection, agent_ids: list[str] | None = None, kernel_ids: list[str] | None = None
) -> list[tuple[str, str, str, int]]:
    """(session id, session status, agent id, rank) of live sessions' kernels on these agents, or of
    these kernels: who a sweep's history rows are about."""
    query = select(sessions.c.id, sessions.c.status, kernels.c.agent_id, kernels.c.rank).join(
        sessions, sessions.c.id == kernels.c.session_id
    )
    if agent_ids is not None:
        query = query.where(
            kernels.c.agent_id.in_(agent_ids),
            sessions.c.status.not_in([str(s) for s in TERMINAL_SESSION]),
            LIVE_KERNEL,
        )
    if kernel_ids is not None:
        query = query.where(kernels.c.id.in_(kernel_ids))
    rows = await conn.execute(query.order_by(sessions.c.id, kernels.c.rank))
    return [(sid, status, agent or "", rank) for sid, status, agent, rank in rows]
