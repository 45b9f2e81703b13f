"""Sessions as their callers may see them: one, a page, their history, counts, attempts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from corral.clock import utcnow
from corral.domain.records import HistoryRecord, Principal, SessionRecord
from corral.domain.status import SessionStatus
from corral.domain.waiting import Waiting, explain
from corral.services.errors import InvalidInput, NotFound
from corral.services.short_ids import full_id
from corral.store import agents, journal, preemption, retries, sessions
from corral.store.db import reading
from corral.store.sessions import listing
from corral.store.sessions.listing import Listing as Listing  # pages build it
from corral.store.unit import Engine


def _visible(who: Principal, s: SessionRecord) -> bool:
    return who.is_admin or s.spec.project in who.projects


async def get(engine: Engine, who: Principal, session_id: str) -> SessionRecord:
    """The session with this id, or with the only id the caller may see that starts with it."""
    async with reading(engine) as conn:
        full = await full_id(conn, who, session_id)
        found = await sessions.get(conn, full)
    if found is None or not _visible(who, found):
        raise NotFound(f"no session {session_id[:80]}", {"field": "id"})
    return found


async def list_visible(
    engine: Engine,
    who: Principal,
    statuses: list[str] | None,
    limit: int,
    offset: int,
    array_id: str | None = None,
) -> list[SessionRecord]:
    async with reading(engine) as conn:
        return await sessions.list_sessions(
            conn,
            projects=None if who.is_admin else who.projects,
            statuses=statuses,
            array_id=array_id,
            limit=limit,
            offset=offset,
        )


async def waiting_reason(engine: Engine, session: SessionRecord) -> str | None:
    """Why a pending session waits (e.g. "unschedulable: ..."), from the scheduler's last word."""
    if session.status is not SessionStatus.PENDING:
        return None
    if session.retry_after is not None and session.retry_after > utcnow():
        return f"a retry: not before {session.retry_after.isoformat(timespec='seconds')}"
    async with reading(engine) as conn:
        return await journal.latest_skip(conn, session.id)


async def history(engine: Engine, who: Principal, session_id: str) -> list[HistoryRecord]:
    found = await get(engine, who, session_id)
    async with reading(engine) as conn:
        return await journal.history_of(conn, found.id)


async def counts(engine: Engine, who: Principal) -> dict[str, int]:
    async with reading(engine) as conn:
        return await sessions.count_by_status(conn, None if who.is_admin else who.projects)


async def attempts(engine: Engine, who: Principal, session_id: str) -> list[SessionRecord]:
    """Every attempt of the session's retry chain, first to last."""
    found = await get(engine, who, session_id)
    async with reading(engine) as conn:
        return await retries.chain(conn, found.root_session_id)


async def chain_rows(engine: Engine, records: Sequence[SessionRecord]) -> dict[str, list[dict[str, Any]]]:
    """Light rows of the chains of these sessions, by root id (one query for a page).  None for a
    chain of one, a first attempt nothing followed (most sessions): the chain is the record itself,
    and reading it cost a follower's every poll a round trip."""
    roots = sorted({s.root_session_id for s in records if not _alone(s)})
    if not roots:
        return {}
    async with reading(engine) as conn:
        return await retries.chains(conn, roots)


def _alone(s: SessionRecord) -> bool:
    """Every later attempt is written with its parent's next_attempt_id, in one transaction."""
    return s.root_session_id == s.id and s.next_attempt_id is None


async def get_many(engine: Engine, who: Principal, session_ids: Sequence[str]) -> dict[str, SessionRecord]:
    """Those of the sessions with these (full) ids the caller may see, by id; one read for many."""
    async with reading(engine) as conn:
        found = await sessions.get_many(conn, sorted(set(session_ids)))
    return {s.id: s for s in found if _visible(who, s)}


async def chains_of(
    engine: Engine, who: Principal, root_ids: Sequence[str]
) -> dict[str, list[SessionRecord]]:
    """Every attempt of each of these chains the caller may see, first to last, by root id."""
    async with reading(engine) as conn:
        found = await retries.full_chains(conn, sorted(set(root_ids)))
    return {root: [s for s in chain if _visible(who, s)] for root, chain in found.items()}


def chain_rows_of(chain: Sequence[SessionRecord]) -> list[dict[str, Any]]:
    """The light rows `chain_rows` reads, made from a chain already read whole (`chains_of`)."""
    return [
        {
            "id": s.id,
            "root_session_id": s.root_session_id,
            "attempt": s.attempt,
            "status": str(s.status),
            "result": str(s.result),
            "retry_state": s.retry_state,
        }
        for s in chain
    ]


async def histories(
    engine: Engine, who: Principal, records: Sequence[SessionRecord]
) -> dict[str, list[HistoryRecord]]:
    """The history of each of these sessions the caller may see, by id (one read for a page)."""
    ids = sorted({s.id for s in records if _visible(who, s)})
    if not ids:
        return {}
    async with reading(engine) as conn:
        return await journal.histories_of(conn, ids)


def _cursor(text: str | None) -> tuple[datetime, str] | None:
    """A page's `before`: `CREATED_AT~ID` of the last row of the page before."""
    if not text:
        return None
    at, sep, last_id = text.partition("~")
    try:
        when = datetime.fromisoformat(at)
        if when.tzinfo is not None:
            when = when.astimezone(UTC)  # a far offset off year 1 or 9999 overflows: refused too
    except (ValueError, OverflowError):
        when = None
    if not sep or when is None or when.tzinfo is None or not last_id or len(last_id) > 36:
        raise InvalidInput("before", "before: not a page cursor (follow the page's own 'older' link)")
    return when, last_id


def cursor_of(s: SessionRecord) -> str:
    return f"{s.created_at.isoformat()}~{s.id}"


async def page(
    engine: Engine, who: Principal, where: Listing, before: str | None, limit: int
) -> list[SessionRecord]:
    """A page of the sessions the caller may see, newest first (keyset: `before` a cursor_of)."""
    for status in where.statuses:
        if status not in set(SessionStatus):
            raise InvalidInput("status", f"unknown status {status[:40]!r}: one of {', '.join(SessionStatus)}")
    below = _cursor(before)
    async with reading(engine) as conn:
        return await listing.page(conn, None if who.is_admin else who.projects, where, below, limit)


async def waiting(engine: Engine, session: SessionRecord) -> Waiting | None:
    """Why a PENDING session waits (domain/waiting): its queue position, needs, the largest free
    slot of its group, infeasible or not; None for a session that is not pending."""
    if session.status is not SessionStatus.PENDING:
        return None
    async with reading(engine) as conn:
        position = await listing.queue_position(conn, session)
        group = await agents.list_agents(conn, session.spec.resource_group)
        held = await preemption.holds(conn, session.spec.resource_group)
    hold = None
    if session.reservation:
        hold = "preempting: it holds agents while its victims stop"
    elif held and position == 1:  # the head waits for room that a preemptor holds
        # Neither the preemptor nor its agents are named: they may be another project's.
        hold = f"{sum(len(a) for _, a in held)} agent(s) of the group are held for a preemption in progress"
    return explain(session, position, group, utcnow(), hold)


async def queue(
    engine: Engine, who: Principal, resource_group: str, limit: int
) -> list[SessionRecord | None]:
    """A group's pending sessions in the scheduler's order; another project's is None (its place
    is shown, never what it is)."""
    async with reading(engine) as conn:
        found = await listing.queue(conn, resource_group, limit)
    return [s if _visible(who, s) else None for s in found]


async def victims(engine: Engine, who: Principal, session: SessionRecord) -> list[SessionRecord]:
    """Those its preemptions stopped that the caller may see (another project's: only counted in
    the preemptor's history, never shown)."""
    async with reading(engine) as conn:
        found = await listing.victims(conn, session.id)
    return [v for v in found if _visible(who, v)]


LISTED_PLACES = 1000
"""A list counts at most this many ahead of each waiting session (a page of them stays cheap
however long the queue); its own page counts them all."""


async def queue_positions(engine: Engine, pending: Sequence[SessionRecord]) -> dict[str, int]:
    """Each pending session's place in its group's queue (1: the head), or LISTED_PLACES + 1 for
    one further back (shown as "1001+"): one read of each group's queue head."""
    places: dict[str, int] = {}
    async with reading(engine) as conn:
        for group in sorted({s.spec.resource_group for s in pending}):
            head = await listing.queue_head(conn, group, LISTED_PLACES)
            places |= {sid: n for n, sid in enumerate(head, 1)}
    return {s.id: places.get(s.id, LISTED_PLACES + 1) for s in pending}
