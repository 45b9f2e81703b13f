"""The retry engine's storage seam: terminal events after a cursor, a claimed attempt, its chain."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Integer, and_, bindparam, case, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.events import Position
from corral.domain.records import SessionRecord
from corral.domain.status import TERMINAL_SESSION, SessionResult, SessionStatus
from corral.store import dialect, outbox
from corral.store import sessions as session_store
from corral.store.db import chunks
from corral.store.tables import cluster_config, kernel_logs, session_events, sessions

_TERMINAL = [str(s) for s in TERMINAL_SESSION]
DISPATCH_KEY = "retry.next_dispatch_at"


class Claim(StrEnum):
    DECIDED = "decided"
    BUSY = "busy"
    GONE = "gone"


_ENDED = and_(session_events.c.kind == "session.status_changed", session_events.c.to_status.in_(_TERMINAL))
_SINCE = (
    select(
        session_events.c.txid, session_events.c.id, case((_ENDED, session_events.c.session_id), else_=None)
    )
    .order_by(session_events.c.txid, session_events.c.id)
    .limit(bindparam("limit", type_=Integer))
)


async def since(conn: AsyncConnection, position: Position, limit: int) -> list[tuple[Position, str | None]]:
    """(position, session id if the event is a session's end, else None) of the first `limit`
    committed events after `position`, in commit order (store/outbox)."""
    query = outbox.committed(conn, _SINCE.where(outbox.after(position)))
    rows = await conn.execute(query, {"limit": limit})
    return [(Position(int(t), int(i)), None if s is None else str(s)) for t, i, s in rows]


async def undecided(conn: AsyncConnection, ended_before: datetime, limit: int) -> list[str]:
    """Attempts that ended before `ended_before` and were never decided on."""
    rows = await conn.execute(
        select(sessions.c.id)
        .where(
            sessions.c.retry_state.is_(None),
            sessions.c.status.in_(_TERMINAL),
            sessions.c.terminated_at < ended_before,
        )
        .order_by(sessions.c.terminated_at)
        .limit(limit)
    )
    return [str(r) for r in rows.scalars()]


_STILL_UNDECIDED = select(sessions.c.id).where(
    sessions.c.id.in_(bindparam("ids", expanding=True)), sessions.c.retry_state.is_(None)
)


async def still_undecided(conn: AsyncConnection, session_ids: Sequence[str]) -> set[str]:
    """Those of these attempts nobody has decided yet."""
    found: set[str] = set()
    for part in chunks(session_ids):
        found.update(str(i) for i in (await conn.execute(_STILL_UNDECIDED, {"ids": part})).scalars())
    return found


async def claim(conn: AsyncConnection, session_id: str) -> SessionRecord | Claim:
    """The ended, undecided attempt, row-locked for this transaction; or why not."""
    query = select(sessions.c.id).where(
        sessions.c.id == session_id, sessions.c.retry_state.is_(None), sessions.c.status.in_(_TERMINAL)
    )
    # Another manager deciding it holds the lock: leave it to them instead of queueing behind.
    query = dialect.of(conn).for_update(query, skip_locked=True)
    if (await conn.execute(query)).first() is None:
        state = await conn.execute(select(sessions.c.retry_state).where(sessions.c.id == session_id))
        found = state.first()
        if found is None:
            return Claim.GONE
        return Claim.DECIDED if found.retry_state is not None else Claim.BUSY
    record = await session_store.get(conn, session_id)
    return record if record is not None else Claim.GONE


_SETTLE_FIRST_SUCCESSES = (
    update(sessions)
    .where(
        sessions.c.id.in_(bindparam("ids", expanding=True)),
        sessions.c.retry_state.is_(None),
        sessions.c.status == str(SessionStatus.TERMINATED),
        sessions.c.result == str(SessionResult.SUCCESS),
        sessions.c.attempt == 1,
    )
    .values(retry_state="none", retry_reason="succeeded")
    .returning(sessions.c.id)
)


async def settle_first_successes(conn: AsyncConnection, session_ids: Sequence[str]) -> set[str]:
    """Decide, in one statement, those of these attempts that are first attempts and succeeded:
    nothing to retry and nothing to say (most ended sessions, on a busy cluster).  Returns them."""
    settled: set[str] = set()
    for part in chunks(session_ids):
        result = await conn.execute(_SETTLE_FIRST_SUCCESSES, {"ids": part})
        settled.update(result.scalars())
    return settled


async def decide(
    conn: AsyncConnection, session_id: str, state: str, reason: str, next_attempt_id: str | None = None
) -> None:
    await conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id)
        .values(retry_state=state, retry_reason=reason, next_attempt_id=next_attempt_id)
    )


async def stop_undecided(conn: AsyncConnection, session_id: str, reason: str) -> bool:
    """Decide an ended attempt "no retry" unless the engine has decided it already."""
    return bool(await stop_undecided_many(conn, [session_id], reason))


async def stop_undecided_many(conn: AsyncConnection, session_ids: Sequence[str], reason: str) -> list[str]:
    """`stop_undecided` for many attempts; returns those it decided."""
    stopped: list[str] = []
    for part in chunks(session_ids):
        result = await conn.execute(
            update(sessions)
            .where(sessions.c.id.in_(part), sessions.c.retry_state.is_(None))
            .values(retry_state="failed", retry_reason=reason)
            .returning(sessions.c.id)
        )
        stopped += result.scalars()
    return stopped


async def chain(conn: AsyncConnection, root_session_id: str) -> list[SessionRecord]:
    """Every attempt of a chain, first to last."""
    query = select(sessions).where(sessions.c.root_session_id == root_session_id).order_by(sessions.c.attempt)
    return await session_store.select_with_kernels(conn, query)


async def full_chains(conn: AsyncConnection, root_ids: Sequence[str]) -> dict[str, list[SessionRecord]]:
    """Every attempt of each chain with its kernels, first to last, by root id: one statement for
    the sessions and one for their kernels, however many chains (a page's attempts)."""
    out: dict[str, list[SessionRecord]] = {r: [] for r in root_ids}
    for part in chunks(root_ids):
        query = (
            select(sessions)
            .where(sessions.c.root_session_id.in_(part))
            .order_by(sessions.c.root_session_id, sessions.c.attempt)
        )
        for s in await session_store.select_with_kernels(conn, query):
            out[s.root_session_id].append(s)
    return out


async def chains(conn: AsyncConnection, root_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Light rows (id, attempt, status, result, retry_state) of the chains, by root id."""
    out: dict[str, list[dict[str, Any]]] = {r: [] for r in root_ids}
    for part in chunks(root_ids):
        rows = await conn.execute(
            select(
                sessions.c.id,
                sessions.c.root_session_id,
                sessions.c.attempt,
                sessions.c.status,
                sessions.c.result,
                sessions.c.retry_state,
            )
            .where(sessions.c.root_session_id.in_(part))
            .order_by(sessions.c.attempt)
        )
        for r in rows:
            out[r.root_session_id].append(dict(r._mapping))
    return out


async def log_tail(conn: AsyncConnection, kernel_id: str, max_bytes: int = 2048) -> str:
    rows = await conn.execute(
        select(kernel_logs.c.data)
        .where(kernel_logs.c.kernel_id == kernel_id)
        .order_by(kernel_logs.c.id.desc())
        .limit(16)
    )
    parts: list[bytes] = []
    size = 0
    for (data,) in rows:
        parts.append(bytes(data))
        size += len(data)
        if size >= max_bytes:
            break
    return b"".join(reversed(parts))[-max_bytes:].decode("utf-8", "replace")


_DISPATCH_SLOT = select(cluster_config.c.value).where(cluster_config.c.key == DISPATCH_KEY)


async def take_dispatch_slot(
    conn: AsyncConnection, rate: float, earliest: datetime, now: datetime
) -> datetime:
    """The storm guard: reserve the first start time at or after `earliest` that keeps retries
    `1/rate` seconds apart cluster-wide, and return it (a retry is delayed, never dropped).  One row
    shared by every manager (locked); a changed rate starts afresh."""
    query = dialect.of(conn).for_update(_DISPATCH_SLOT)
    row = (await conn.execute(query)).first()
    stored = row.value if row is not None and isinstance(row.value, dict) else {}
    next_at = float(stored.get("next_at", 0.0)) if stored.get("rate") == rate else now.timestamp()
    slot = max(next_at, earliest.timestamp())
    value = {"next_at": slot + 1.0 / rate, "rate": rate}
    if row is None:
        await conn.execute(insert(cluster_config).values(key=DISPATCH_KEY, value=value, updated_at=now))
    else:
        await conn.execute(
            update(cluster_config)
            .where(cluster_config.c.key == DISPATCH_KEY)
            .values(value=value, updated_at=now)
        )
    return datetime.fromtimestamp(slot, now.tzinfo)
