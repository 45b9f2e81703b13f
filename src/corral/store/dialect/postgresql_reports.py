"""An agent's report on PostgreSQL: its batch as rounds of chains (report_chains), each round
one statement (postgresql_report_statement.py) carrying the agent's fence, and a chain that raced
a change of its kernel's status tried again from its new one (apply_round)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import KernelReport
from corral.domain.status import KERNEL_STARTED, TERMINAL_KERNEL, KernelStatus
from corral.domain.transitions import kernel_chain, kernel_sources
from corral.store.dialect import unnest
from corral.store.dialect.postgresql_report_statement import ENDS_FROM, STEPS, ends_fields, round_statement
from corral.store.kernels.rows import AGENT_REPORTS, END_FIELDS, ending, suspended_detail


def report_chains(reports: Sequence[KernelReport]) -> tuple[list[str], list[list[list[KernelReport]]]]:
    """The kernels refused outright (a status no agent may report), and the rest in rounds of
    chains.  A chain is one kernel's reports in the order sent, of one generation, up to its first
    ending; round i holds every kernel's i-th chain (most reports: one round)."""
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
    """A batch given report_chains' result, with the agent's fence checked by the same
    statements: one per round.  Returns the refused kernel ids (`refused` and those of the
    rounds) and the sessions still to mark started (kernels.mark_started, by the caller after its
    transaction, if any: inside one, the round's kernels stay locked while that waits on a
    session a move holds, which waits on them).  None when `epoch` is fenced: the caller rolls
    back what earlier rounds wrote (more than one round takes a transaction; one round is a
    statement of its own, which wrote nothing, unless the fence came between it and a retry of a
    chain that raced: apply_round)."""
    refused = list(refused)
    started: set[str] = set()
    for chains in rounds or [[]]:  # an empty report still asks whether the agent is fenced
        found = await apply_round(conn, agent_id, epoch, chains, END_FIELDS, _end_row, now)
        if found is None:
            return None
        refused += found[0]
        started |= found[1]
    return refused, sorted(started)


def _end_row(report: KernelReport) -> tuple[Any, ...]:
    """An ending's row for the round statement: its values, its generation, its detail if
    suspended."""
    return (*ending(report), report.generation, suspended_detail(report))


def _chain_rows(
    chain: Sequence[KernelReport],
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """A chain's outcomes from every status where any of it applies: step rows and ends_from rows."""
    step_rows: list[tuple[Any, ...]] = []
    end_rows: list[tuple[Any, ...]] = []
    first = chain[0]
    for start in KernelStatus:
        done = [r for r, ok in zip(chain, kernel_chain(start, [r.status for r in chain]), strict=True) if ok]
        if not done:
            continue
        ends = done[-1].status in TERMINAL_KERNEL
        way = done[:-1] if ends else done
        port = next((r.master_port for r in reversed(way) if r.master_port is not None), None)
        started = any(r.status in KERNEL_STARTED for r in way)
        ran = any(r.status is KernelStatus.RUNNING for r in way)
        if ends:
            before = way[-1].status if way else start
            end_rows.append((first.kernel_id, str(start), str(before), port, started, ran))
        else:
            step_rows.append(
                (first.kernel_id, first.generation, str(start), str(done[-1].status), port, started, ran)
            )
    return step_rows, end_rows


# A chain that wrote nothing is tried again this many times: see apply_round.
AGAIN = 2


async def apply_round(
    conn: AsyncConnection,
    agent_id: str,
    epoch: int,
    chains: Sequence[Sequence[KernelReport]],
    end_fields: tuple[str, ...],
    ending: Callable[[KernelReport], tuple[Any, ...]],
    now: datetime,
) -> tuple[list[str], set[str]] | None:
    """One round (a chain per kernel): the refused kernel ids, one per refused report, and the
    sessions of which a process ran that are still to be marked started; None when the agent's
    epoch is fenced (then nothing was written).  `ending` gives an ending's row: rows.ending,
    then the report's generation and its detail should it be suspended.

    A chain's write is matched to the kernel's status as the statement found it.  When another
    transaction changes that status meanwhile (a cancel: RUNNING to TERMINATING), PostgreSQL
    re-checks the row against the same outcome row, not the one for its new status, and the
    kernel is left as it was though its reports may be legal from there (an ending from
    TERMINATING).  So such a chain is applied again from the status now, by a statement of its
    own, as writing each report on its own would.  A chain refused for good (no outcome from the
    status the statement found, or not this agent's placement) is not."""
    moved: dict[str, tuple[KernelStatus, bool]] = {}
    started: set[str] = set()
    missed = list(chains)
    for _ in range(1 + AGAIN):
        found = await _apply_once(conn, agent_id, epoch, missed, end_fields, ending, now)
        if found is None:
            return None  # fenced, if only since the first attempt (which stays, outside a transaction)
        moved |= found[0]
        started |= found[1]
        missed = [c for c in missed if _raced(c, found[2])]
        if not missed:
            break
    refused: list[str] = []
    for chain in chains:
        at = moved.get(chain[0].kernel_id)
        applied = kernel_chain(at[0], [r.status for r in chain]) if at else (False,) * len(chain)
        if at and not at[1]:
            applied = (*applied[:-1], False)  # halted: its ending refused
        refused += [r.kernel_id for r, ok in zip(chain, applied, strict=True) if not ok]
    return refused, started


async def _apply_once(
    conn: AsyncConnection,
    agent_id: str,
    epoch: int,
    chains: Sequence[Sequence[KernelReport]],
    end_fields: tuple[str, ...],
    ending: Callable[[KernelReport], tuple[Any, ...]],
    now: datetime,
) -> tuple[dict[str, tuple[KernelStatus, bool]], set[str], dict[str, tuple[KernelStatus, bool]]] | None:
    """The round statement: each moved kernel's status before and whether its whole chain applied
    (not when halted), the sessions left to mark, and the status of this placement's kernels that
    did not move as the statement found them, with whether their session is being suspended; None
    when fenced."""
    step_rows: list[tuple[Any, ...]] = []
    from_rows: list[tuple[Any, ...]] = []
    end_rows: list[tuple[Any, ...]] = []
    for chain in chains:
        steps, ends = _chain_rows(chain)
        step_rows += steps
        from_rows += ends
        if ends:
            end_rows.append(ending(chain[-1]))
    params = {
        **unnest.arrays(STEPS, step_rows),
        **unnest.arrays(ENDS_FROM, from_rows),
        **unnest.arrays(ends_fields(end_fields), end_rows),
        "s_ids": sorted({r[0] for r in step_rows}),
        "e_ids": [r[0] for r in end_rows],
        "k_ids": [c[0].kernel_id for c in chains],
        "k_now": now,
        "k_agent": agent_id,
        "k_epoch": epoch,
    }
    result = list(await conn.execute(round_statement(end_fields), params))
    if not any(kind == "agent" for kind, _, _ in result):
        return None
    moved = {
        i: (KernelStatus(start), kind == "moved") for kind, i, start in result if kind in ("moved", "halted")
    }
    missed = {
        i: (KernelStatus(status), kind == "held") for kind, i, status in result if kind in ("missed", "held")
    }
    return moved, {i for kind, i, _ in result if kind == "started"}, missed


def _raced(chain: Sequence[KernelReport], missed: dict[str, tuple[KernelStatus, bool]]) -> bool:
    """The chain wrote nothing though it had an outcome from the status the statement found (and
    one the statement writes: not an ending refused because its session is being suspended)."""
    if chain[0].kernel_id not in missed:
        return False
    found, suspending = missed[chain[0].kernel_id]
    applied = kernel_chain(found, [r.status for r in chain])
    if not any(applied):
        return False
    done = [r.status for r, ok in zip(chain, applied, strict=True) if ok]
    if suspending and done[-1] in TERMINAL_KERNEL:
        before = done[-2] if len(done) > 1 else found
        return before in kernel_sources(KernelStatus.SUSPENDED) or before != found
    return True
