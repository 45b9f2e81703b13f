"""/api/v1/sessions"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from corral.api.schemas import HistoryOut, KernelOut, LogsOut, SessionCreate, SessionOut
from corral.api.state import Caller, State
from corral.domain.status import SessionStatus
from corral.protocol.types import INT64_MAX
from corral.services import logs as log_service
from corral.services import sessions as svc
from corral.services.errors import InvalidInput

router = APIRouter(prefix="/api/v1/sessions", tags=["sessions"])


@router.post("", status_code=201, response_model=SessionOut)
async def create_session(body: SessionCreate, who: Caller, state: State, response: Response) -> SessionOut:
    record, created = await svc.create(state.engine, who, body.to_spec())
    if created:
        state.wakeup.scheduler()
    else:
        response.status_code = 200
    return SessionOut.of(record)


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
    return [SessionOut.of(s) for s in await svc.list_visible(state.engine, who, status, limit, offset)]


@router.get("/counts", response_model=dict[str, int], summary="Sessions per status")
async def session_counts(who: Caller, state: State) -> dict[str, int]:
    return await svc.counts(state.engine, who)


@router.get("/{session_id}", response_model=SessionOut)
async def get_session(session_id: str, who: Caller, state: State) -> SessionOut:
    record = await svc.get(state.engine, who, session_id)
    return SessionOut.of(record, waiting_reason=await svc.waiting_reason(state.engine, record))


@router.get("/{session_id}/kernels", response_model=list[KernelOut])
async def get_kernels(session_id: str, who: Caller, state: State) -> list[KernelOut]:
    return [KernelOut.of(k) for k in (await svc.get(state.engine, who, session_id)).kernels]


@router.get("/{session_id}/history", response_model=list[HistoryOut])
async def get_history(session_id: str, who: Caller, state: State) -> list[HistoryOut]:
    return [HistoryOut.of(h) for h in await svc.history(state.engine, who, session_id)]


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
    return SessionOut.of(record)
