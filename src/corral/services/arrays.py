"""Batch submission: job arrays (one request, N sessions sharing an array id) and bulk creates."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from corral.clock import utcnow
from corral.domain.arrays import describe, element_creation_id, element_name
from corral.domain.cause import TerminationReason
from corral.domain.errors import Duplicate
from corral.domain.history import HistoryRow
from corral.domain.records import NewSession, Principal, SessionRecord
from corral.domain.spec import SessionSpec
from corral.domain.status import TERMINAL_SESSION, SessionResult
from corral.services import admission, retry_chain
from corral.services.errors import Conflict, CorralError, InvalidInput, NotFound
from corral.store import arrays, journal, retries, sessions
from corral.store.db import reading, transaction
from corral.store.unit import Engine, Tx


@dataclass(frozen=True)
class ArrayView:
    """What a caller sees of an array."""

    array_id: str
    """Shared by its elements."""
    indices: str
    """The indices it was made with, as "a-b,c"."""
    session_ids: tuple[str, ...]
    """Each element's latest attempt, by index."""
    counts: Mapping[str, int]
    """Elements per status of their latest attempt."""
    succeeded: int = 0
    """Elements whose latest attempt succeeded."""
    settled: bool = False
    """Every element has ended and no retry of it is still to be decided."""


@dataclass(frozen=True)
class BulkItem:
    """One session of a bulk create, as the request gave it."""

    spec: SessionSpec
    """The validated request."""
    retry_fields: Mapping[str, Any] | None
    """The inline policy fields it set."""
    priority: int | None
    """The priority it asked for (None: none)."""


def _array_digest(spec: SessionSpec, indices: Sequence[int]) -> str:
    return hashlib.sha256(f"{spec.digest()}|{describe(tuple(indices))}".encode()).hexdigest()


async def create(
    engine: Engine,
    who: Principal,
    spec: SessionSpec,
    retry_fields: Mapping[str, Any] | None,
    requested_priority: int | None,
    indices: Sequence[int],
) -> tuple[ArrayView, bool]:
    """One session per index, in one transaction; False: the caller's earlier identical request
    with this creation_id (each element's key is the request's plus its index)."""
    try:
        return await _create(engine, who, spec, retry_fields, requested_priority, indices)
    except Duplicate:
        if not spec.creation_id:
            raise
        async with reading(engine) as conn:
            earlier = await _earlier(conn, who, spec, indices)
        if earlier is None:
            raise
        return earlier, False


async def _earlier(conn: Tx, who: Principal, spec: SessionSpec, indices: Sequence[int]) -> ArrayView | None:
    assert spec.creation_id is not None
    found = await sessions.find_creation(conn, who.name, element_creation_id(spec.creation_id, indices[0]))
    if found is None:
        return None
    session_id, digest = found
    first = await sessions.get(conn, session_id)
    if digest != _array_digest(spec, indices) or first is None or first.spec.array_id is None:
        raise Conflict(
            f"creation_id {spec.creation_id!r} was used for a different request",
            {"field": "creation_id", "session_id": session_id},
        )
    return await _view(conn, first.spec.array_id)


async def _create(
    engine: Engine,
    who: Principal,
    spec: SessionSpec,
    retry_fields: Mapping[str, Any] | None,
    requested_priority: int | None,
    indices: Sequence[int],
) -> tuple[ArrayView, bool]:
    now = utcnow()
    async with transaction(engine) as conn:
        if spec.creation_id:
            earlier = await _earlier(conn, who, spec, indices)
            if earlier is not None:
                return earlier, False
        digest = _array_digest(spec, indices)
        checked = await admission.prepared(conn, who, spec, retry_fields, requested_priority)
        array_id = str(uuid.uuid4())
        base = spec.name or f"array-{array_id[:8]}"
        news = [
            NewSession(
                id=str(uuid.uuid4()),
                name=element_name(base, i),
                owner=who.name,
                spec=replace(
                    checked,
                    array_id=array_id,
                    array_index=i,
                    creation_id=element_creation_id(spec.creation_id, i) if spec.creation_id else None,
                ),
                spec_hash=digest,
            )
            for i in indices
        ]
        await sessions.insert_many(conn, news, now)
    view = ArrayView(array_id, describe(tuple(indices)), tuple(s.id for s in news), {"PENDING": len(news)})
    return view, True


async def create_many(
    engine: Engine, who: Principal, items: Sequence[BulkItem]
) -> list[tuple[SessionRecord, bool]]:
    """Every item in one transaction (all or none); an item whose creation_id the caller used
    before for the same request is that earlier session, not a new one."""
    seen: set[str] = set()
    for n, item in enumerate(items):
        key = item.spec.creation_id
        if key is not None and key in seen:
            raise InvalidInput(f"sessions[{n}].creation_id", "used by another item of this request")
        if key is not None:
            seen.add(key)
    now = utcnow()
    async with transaction(engine) as conn:
        out: list[tuple[SessionRecord | None, bool]] = []
        news: list[NewSession] = []
        shared = admission.Shared()
        for n, item in enumerate(items):
            try:
                admitted = await admission.admit(
                    conn, who, item.spec, item.retry_fields, item.priority, shared
                )
            except CorralError as exc:
                raise _for_item(exc, n) from None
            if isinstance(admitted, NewSession):
                news.append(admitted)
                out.append((None, True))
            else:
                out.append((admitted, False))
        made = iter(await sessions.insert_sessions(conn, news, now))
    return [(record if record is not None else next(made), created) for record, created in out]


def _for_item(exc: CorralError, n: int) -> CorralError:
    """The same error, its field named inside the request's list."""
    field = exc.details.get("field")
    exc.details["field"] = f"sessions[{n}]" + (f".{field}" if field else "")
    return exc


async def _view(conn: Tx, array_id: str) -> ArrayView:
    latest = await arrays.latest(conn, array_id)
    counts: dict[str, int] = {}
    for s in latest:
        counts[s.status] = counts.get(s.status, 0) + 1
    indices = tuple(sorted({s.spec.array_index for s in latest if s.spec.array_index is not None}))
    return ArrayView(
        array_id,
        describe(indices),
        tuple(s.id for s in latest),
        counts,
        succeeded=sum(1 for s in latest if s.result is SessionResult.SUCCESS),
        # The retry engine writes its decision on every ended attempt (even "none").
        settled=all(s.status in TERMINAL_SESSION and s.retry_state is not None for s in latest),
    )


async def _visible(conn: Tx, who: Principal, array_id: str) -> None:
    project = await arrays.project_of(conn, array_id)
    if project is None or not (who.is_admin or project in who.projects):
        raise NotFound(f"no array {array_id[:80]}", {"field": "array_id"})


async def get(engine: Engine, who: Principal, array_id: str) -> ArrayView:
    async with reading(engine) as conn:
        await _visible(conn, who, array_id)
        return await _view(conn, array_id)


async def cancel(engine: Engine, who: Principal, array_id: str) -> ArrayView:
    """Stop every element: live attempts are cancelled, retries not yet made are not made."""
    message = f"cancelled by {who.name} (the whole array)"
    for _ in range(3):  # the retry engine may make a child between our read and our write: again
        now = utcnow()
        async with transaction(engine) as conn:
            await _visible(conn, who, array_id)
            latest = await arrays.latest(conn, array_id)
            ended = {s.id: s.status for s in latest if s.status in TERMINAL_SESSION and _undecided(s)}
            stopped = await retries.stop_undecided_many(conn, list(ended), f"retries stopped by {who.name}")
            await journal.add_history(
                conn,
                [
                    HistoryRow(sid, "Cancel", "FAIL", ended[sid], None, f"retries stopped by {who.name}")
                    for sid in stopped
                ],
                now,
            )
            live = [s.id for s in latest if s.status not in TERMINAL_SESSION]
            await sessions.request_terminations(conn, live, TerminationReason.USER_CANCELLED, message, now)
            escaped = len(stopped) < len(ended)
        if not escaped:
            break
    async with reading(engine) as conn:
        return await _view(conn, array_id)


def _undecided(s: SessionRecord) -> bool:
    return s.retry_state is None and retry_chain.may_retry(s)


async def retry(engine: Engine, who: Principal, array_id: str) -> tuple[ArrayView, int]:
    """A manual retry of every element whose latest attempt ended without success (a success is
    not run again; a live element is left alone); returns the array and how many were retried."""
    now = utcnow()
    made = 0
    async with transaction(engine) as conn:
        await _visible(conn, who, array_id)
        for s in await arrays.latest(conn, array_id):
            if s.status not in TERMINAL_SESSION or s.result is SessionResult.SUCCESS:
                continue
            try:
                await retry_chain.retry_latest(conn, who, s, now)
            except Conflict:
                continue  # the engine retried this one just now: it has its next attempt already
            made += 1
    if made == 0:
        raise Conflict(
            "no element of this array has ended without success: nothing to retry", {"field": "status"}
        )
    async with reading(engine) as conn:
        return await _view(conn, array_id), made
