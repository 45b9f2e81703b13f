"""/api/v1/sessions"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Query, Response

from corral.api.schemas import HistoryOut, KernelOut, LogChunkOut, LogsOut, SessionCreate, SessionOut
from corral.api.state import Caller, State
from corral.domain.status import TERMINAL_SESSION, SessionStatus
from corral.protocol.types import INT64_MAX
from corral.services import sessions as svc
from corral.services.errors import InvalidInput
from corral.store import journal, logs

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
    return SessionOut.of(await svc.get(state.engine, who, session_id))


@router.get("/{session_id}/kernels", response_model=list[KernelOut])
async def get_kernels(session_id: str, who: Caller, state: State) -> list[KernelOut]:
    return [KernelOut.of(k) for k in (await svc.get(state.engine, who, session_id)).kernels]


@router.get("/{session_id}/history", response_model=list[HistoryOut])
async def get_history(session_id: str, who: Caller, state: State) -> list[HistoryOut]:
    await svc.get(state.engine, who, session_id)
    async with state.engine.connect() as conn:
        return [HistoryOut.of(h) for h in await journal.history_of(conn, session_id)]


@router.get("/{session_id}/logs", response_model=LogsOut)
async def get_logs(
    session_id: str,
    who: Caller,
    state: State,
    after: Annotated[int, Query(ge=0, le=INT64_MAX)] = 0,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
) -> LogsOut:
    # Read the status first: if it is terminal now, every chunk was stored before it.
    session = await svc.get(state.engine, who, session_id)
    async with state.engine.connect() as conn:
        chunks = await logs.read(conn, session_id, after, limit)
    ended = session.status in TERMINAL_SESSION
    return LogsOut(
        chunks=[
            LogChunkOut(**{k: v for k, v in asdict(c).items() if k in LogChunkOut.model_fields})
            for c in chunks
        ],
        next=chunks[-1].id if chunks else after,
        complete=ended and len(chunks) < limit,
    )


@router.post("/{session_id}/cancel", status_code=202, response_model=SessionOut)
async def cancel_session(session_id: str, who: Caller, state: State) -> SessionOut:
    record = await svc.cancel(state.engine, who, session_id)
    state.wakeup.scheduler()
    return SessionOut.of(record)
