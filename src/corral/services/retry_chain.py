"""A retry chain as a user acts on it: cancel (the live attempt, or the retry not yet made) and
retry by hand."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime

from corral.clock import utcnow
from corral.domain.cause import NEVER_RETRIABLE, TerminationReason
from corral.domain.errors import Duplicate
from corral.domain.history import HistoryRow
from corral.domain.records import NewSession, Principal, SessionRecord
from corral.domain.retry import attempt_creation_id, attempt_name
from corral.domain.spec import SessionType
from corral.domain.status import TERMINAL_SESSION, SessionResult
from corral.services.errors import Conflict
from corral.services.sessions import get
from corral.store import config, journal, retries, sessions
from corral.store.db import savepoint, transaction
from corral.store.unit import Engine, Tx


async def cancel(engine: Engine, who: Principal, session_id: str) -> SessionRecord:
    """Stop a session; for an attempt that has ended, stop its chain: the live attempt after it is
    cancelled, or a retry not yet decided is not made.  Returns the attempt that was stopped."""
    found = await get(engine, who, session_id)
    if found.status not in TERMINAL_SESSION:
        async with transaction(engine) as conn:
            ok = await sessions.request_termination(
                conn, found.id, TerminationReason.USER_CANCELLED, f"cancelled by {who.name}", utcnow()
            )
        if ok:
            return await get(engine, who, found.id)
    stopped = await _stop_chain(engine, who, found.root_session_id)
    if stopped is None:
        raise Conflict(f"session {found.id} and its retries have ended ({found.status})", {"field": "status"})
    return await get(engine, who, stopped)


def may_retry(s: SessionRecord) -> bool:
    """Whether the engine could still make a retry of this ended attempt."""
    return (
        s.result is not SessionResult.SUCCESS
        and s.cause not in NEVER_RETRIABLE
        and s.spec.type is SessionType.BATCH
    )


async def _stop_chain(engine: Engine, who: Principal, root_session_id: str) -> str | None:
    for _ in range(3):  # the engine may decide between our read and our write: look again
        now = utcnow()
        async with transaction(engine) as conn:
            latest = (await retries.chain(conn, root_session_id))[-1]
            if latest.status not in TERMINAL_SESSION:
                reason = f"cancelled by {who.name}"
                if await sessions.request_termination(
                    conn, latest.id, TerminationReason.USER_CANCELLED, reason, now
                ):
                    return latest.id
            elif latest.retry_state is not None or not may_retry(latest):
                return None
            elif await retries.stop_undecided(conn, latest.id, f"retries stopped by {who.name}"):
                await journal.add_history(
                    conn,
                    [
                        HistoryRow(
                            latest.id, "Cancel", "FAIL", latest.status, None, f"retries stopped by {who.name}"
                        )
                    ],
                    now,
                )
                return latest.id
    return None


async def retry(engine: Engine, who: Principal, session_id: str, force: bool = False) -> SessionRecord:
    """A manual retry: a new attempt after the chain's latest one, which must have ended (and not
    succeeded, unless `force`: running a finished job again is rarely what was meant)."""
    found = await get(engine, who, session_id)
    async with transaction(engine) as conn:
        latest = (await retries.chain(conn, found.root_session_id))[-1]
        if latest.result is SessionResult.SUCCESS and not force:
            raise Conflict(
                f"session {latest.id} succeeded: retry with --force (API: ?force=true) to run it again",
                {"field": "force", "session_id": latest.id},
            )
        child_id = await retry_latest(conn, who, latest, utcnow())
    return await get(engine, who, child_id)


async def retry_latest(conn: Tx, who: Principal, latest: SessionRecord, now: datetime) -> str:
    """Make the manual retry after `latest`, the last attempt of its chain; returns the child's id."""
    await sessions.lock(conn, latest.id)
    if latest.spec.type is not SessionType.BATCH:
        raise Conflict(f"only batch sessions are retried ({latest.spec.type})", {"field": "type"})
    if latest.status not in TERMINAL_SESSION or latest.next_attempt_id is not None:
        raise Conflict(
            f"the latest attempt {latest.id} of this chain has not ended ({latest.status})",
            {"field": "status", "session_id": latest.id},
        )
    child_id = str(uuid.uuid4())
    attempt = latest.attempt + 1
    child = NewSession(
        id=child_id,
        name=attempt_name(latest.name, attempt),
        owner=latest.owner,
        spec=replace(
            latest.spec,
            creation_id=attempt_creation_id(latest.spec.creation_id, latest.root_session_id, attempt),
        ),
        parent_session_id=latest.id,
        root_session_id=latest.root_session_id,
        chain_submitted_at=latest.chain_submitted_at,
        attempt=attempt,
        manual_retry=True,
        # A fresh budget (retry_count and rule counters start again; the cluster's cap on the
        # chain does not): the attempts so far lie outside it ("attempt N of M" counts on).
        total_retries=latest.total_retries,
        free_requeues=latest.attempt,
        first_started_at=None,
        retry_cause=str(latest.cause) if latest.cause else None,
    )
    try:
        async with savepoint(conn):
            await sessions.insert_session(conn, child, now)
    except Duplicate:
        raise Conflict("the retry engine has just retried this attempt", {"field": "status"}) from None
    state = latest.retry_state or "failed"
    await retries.decide(conn, latest.id, state, latest.retry_reason or "manually retried", child_id)
    reason = f"manual, {latest.cause or 'unknown'}, attempt {attempt}"
    await journal.add_history(
        conn,
        [
            HistoryRow(
                latest.id,
                "ManualRetry",
                "RETRY",
                latest.status,
                None,
                f"{reason} by {who.name}; next attempt {child_id}",
            )
        ],
        now,
    )
    await config.audit(conn, who.name, "retry.manual", child_id, reason, now)
    await journal.add_events(
        conn,
        [
            journal.session_event(
                latest.id,
                latest.spec.project,
                "session.retry_scheduled",
                payload={"attempt": attempt, "child_id": child_id, "manual": True},
            )
        ],
        now,
    )
    return child_id
