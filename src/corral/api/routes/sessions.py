"""/api/v1/sessions"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from corral.api.schemas import (
    ErrorRecordOut,
    HistoryOut,
    KernelOut,
    LogsOut,
    SessionCreate,
    SessionOut,
    errors_of,
)
from corral.api.state import AppState, Caller, State
from corral.domain.status import SessionStatus
from corral.protocol.types import INT64_MAX
from corral.services import logs as log_service
from corral.services import sessions as svc
from corral.services.errors import InvalidInput
from corral.store.records import SessionRecord

router = APIRouter(prefix="/api/v1/sessions", tags=["sessions"])


@router.post("", status_code=201, response_model=SessionOut)
async def create_session(body: SessionCreate, who: Caller, state: State, response: Response) -> SessionOut:
    fields = body.retry_policy.model_dump(mode="json", exclude_unset=True) if body.retry_policy else None
    asked = body.priority if "priority" in body.model_fields_set else None
    record, created = await svc.create(state.engine, who, body.to_spec(), fields, asked)
    if created:
        state.wakeup.scheduler()
    else:
        response.status_code = 200
    return (await _out(state, [record]))[0]


@router.get("", response_model=list[SessionOut])
async def list_sessions(
    who: Caller,
    state: State,
    status: Annotated[list[str] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=INT64_MAX)] = 0,
) -> list[SessionOut]:
    for s in status or []:
        if s not in set(SessionStatus):
            raise InvalidInput("status", f"unknown status {s!r}")
    found = await svc.list_visible(state.engine, who, status, limit, offset)
    return await _out(state, found)


async def _out(state: AppState, records: list[SessionRecord]) -> list[SessionOut]:
    chains = await svc.chain_rows(state.engine, records)
    return [SessionOut.of(s, chain=chains.get(s.root_session_id)) for s in records]


@router.get("/counts", response_model=dict[str, int], summary="Sessions per status")
async def session_counts(who: Caller, state: State) -> dict[str, int]:
    return await svc.counts(state.engine, who)


@router.get("/{session_id}", response_model=SessionOut)
async def get_session(session_id: str, who: Caller, state: State) -> SessionOut:
    record = await svc.get(state.engine, who, session_id)
    chains = await svc.chain_rows(state.engine, [record])
    return SessionOut.of(
        record,
        waiting_reason=await svc.waiting_reason(state.engine, record),
        chain=chains.get(record.root_session_id),
    )


@router.get("/{session_id}/attempts", response_model=list[SessionOut], summary="Every attempt of its chain")
async def get_attempts(session_id: str, who: Caller, state: State) -> list[SessionOut]:
    return await _out(state, await svc.attempts(state.engine, who, session_id))


@router.post("/{session_id}/retry", status_code=201, response_model=SessionOut, summary="Manual retry")
async def retry_session(session_id: str, who: Caller, state: State) -> SessionOut:
    """A new attempt after the chain's latest one (which must have ended), with a fresh budget."""
    record = await svc.retry(state.engine, who, session_id)
    state.wakeup.scheduler()
    return (await _out(state, [record]))[0]


@router.get("/{session_id}/kernels", response_model=list[KernelOut])
async def get_kernels(session_id: str, who: Caller, state: State) -> list[KernelOut]:
    return [KernelOut.of(k) for k in (await svc.get(state.engine, who, session_id)).kernels]


@router.get("/{session_id}/history", response_model=list[HistoryOut])
async def get_history(session_id: str, who: Caller, state: State) -> list[HistoryOut]:
    return [HistoryOut.of(h) for h in await svc.history(state.engine, who, session_id)]


@router.get("/{session_id}/errors", response_model=list[ErrorRecordOut])
async def get_errors(session_id: str, who: Caller, state: State) -> list[ErrorRecordOut]:
    """Every failed worker's error record, the root cause first, each marked primary or side effect."""
    return errors_of(await svc.get(state.engine, who, session_id))


@router.get("/{session_id}/logs", response_model=LogsOut)
async def get_logs(
    session_id: str,
    who: Caller,
    state: State,
    after: Annotated[int, Query(ge=0, le=INT64_MAX, description="the `next` of the previous page")] = 0,
    max_bytes: Annotated[int, Query(ge=1, le=64 << 20, description="page size in bytes (about)")] = 4 << 20,
) -> LogsOut:
    page = await log_service.read(state.engine, who, session_id, after, max_bytes)
    return LogsOut.of(page)


@router.post("/{session_id}/cancel", status_code=202, response_model=SessionOut)
async def cancel_session(session_id: str, who: Caller, state: State) -> SessionOut:
    record = await svc.cancel(state.engine, who, session_id)
    state.wakeup.scheduler()
    return (await _out(state, [record]))[0]
