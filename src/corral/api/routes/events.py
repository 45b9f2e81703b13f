"""/api/v1/events: the outbox, scoped to the caller's projects."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from corral.api.schemas import EventOut
from corral.api.state import Caller, State
from corral.protocol.types import INT64_MAX, Name
from corral.services import events as svc

router = APIRouter(prefix="/api/v1/events", tags=["events"])


@router.get("", response_model=list[EventOut])
async def list_events(
    who: Caller,
    state: State,
    after: Annotated[int, Query(ge=0, le=INT64_MAX, description="the id of the last event seen")] = 0,
    type: Annotated[list[Name] | None, Query(description="e.g. session.retry_scheduled")] = None,
    session: Annotated[Name | None, Query(description="one session's events")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    wait: Annotated[float, Query(ge=0, le=30, description="seconds to wait for a new event")] = 0,
    newest: Annotated[bool, Query(description="the last `limit` events after `after`, newest first")] = False,
) -> list[EventOut]:
    found = await svc.read(state.reader, who, after, limit, type, session, wait, newest)
    return [EventOut.of(e) for e in found]
