"""/api/v1/events: the outbox in commit order, scoped to the caller's projects; and its live stream."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from corral.api.schemas import EventOut
from corral.api.state import Caller, State, principal
from corral.domain.events import Position
from corral.domain.records import EventRecord
from corral.protocol.types import Name
from corral.services import event_stream
from corral.services import events as svc
from corral.services.errors import Unauthorized

router = APIRouter(prefix="/api/v1/events", tags=["events"])

HEARTBEAT = 15
"""Seconds between the stream's comment lines: proxies keep a connection that speaks."""
SEND_TIMEOUT = 30
"""Seconds a stream's write may wait for its client to read before the stream is closed."""

After = Annotated[
    str | None,
    Query(max_length=60, description="the `position` of the last event seen (none: from the first)"),
]


def wanted(
    type: Annotated[
        list[Name] | None, Query(description="event types, or globs of them: session.retry_*")
    ] = None,
    session: Annotated[Name | None, Query(description="one session's events (its id or a short id)")] = None,
    array: Annotated[Name | None, Query(description="a job array's events (its elements')")] = None,
    project: Annotated[Name | None, Query(description="one project's events")] = None,
) -> svc.Wanted:
    return svc.Wanted(tuple(type or ()), session, array, project)


Wanted = Annotated[svc.Wanted, Depends(wanted)]


@router.get("", response_model=list[EventOut])
async def list_events(
    who: Caller,
    state: State,
    what: Wanted,
    after: After = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    wait: Annotated[float, Query(ge=0, le=30, description="seconds to wait for a new event")] = 0,
    newest: Annotated[bool, Query(description="the last `limit` events after `after`, newest first")] = False,
) -> list[EventOut]:
    found = await svc.read(state.reader, who, svc.position(after), limit, what, wait, newest)
    return [EventOut.of(e) for e in found]


@router.get(
    "/stream",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}},
)
async def stream_events(
    who: Caller,
    state: State,
    what: Wanted,
    request: Request,
    after: After = None,
    last_event_id: Annotated[
        str | None, Header(max_length=60, description="resume after this event (as `after`)")
    ] = None,
) -> EventSourceResponse:
    """The events `GET /events` returns, as they commit (server-sent events): `id:` the event's
    position, `event:` its type, `data:` its JSON.  Without `Last-Event-ID` (or `after`) it starts
    after the newest event; with it, it goes on from there with nothing missed or repeated.  It
    opens with an `id:` alone (where it starts, for a reconnect; EventSource sends no message).  A
    comment every 15 s keeps it open; a client that falls a whole queue behind is sent
    `event: resync` with the position to resume from, and the stream ends."""
    field = "last-event-id" if last_event_id else "after"
    start = svc.position(last_event_id or after, field)
    where = await svc.scope(state.reader, who, what)  # a refused filter is a 4xx, before any byte

    async def messages() -> AsyncIterator[ServerSentEvent | bytes]:
        async def allowed() -> bool:  # a revoked key or an ended sign-in ends the stream
            try:
                await principal(request, state)
            except Unauthorized:
                return False
            return True

        async for item in event_stream.stream(
            state.feed, state.reader, where, start, allowed, state.settings.stream_recheck
        ):
            if isinstance(item, event_stream.Opened):
                yield ServerSentEvent(id=str(item.position))  # EventSource's last id, no message
            elif isinstance(item, event_stream.Resync):
                yield ServerSentEvent(data=json.dumps({"after": str(item.position)}), event="resync")
                return
            else:
                yield b"".join(_frame(e) for e in item)

    return EventSourceResponse(messages(), ping=HEARTBEAT, send_timeout=SEND_TIMEOUT)


_FRAMES: OrderedDict[Position, bytes] = OrderedDict()
FRAMES_KEPT = 20_000
"""Events kept encoded: every stream is sent the same new events, encoded once for all."""


def _frame(e: EventRecord) -> bytes:
    """An event as its stream message, encoded once (events never change)."""
    found = _FRAMES.get(e.position)
    if found is None:
        data = EventOut.of(e).model_dump_json()
        found = _FRAMES[e.position] = ServerSentEvent(data=data, event=e.kind, id=str(e.position)).encode()
        if len(_FRAMES) > FRAMES_KEPT:
            _FRAMES.popitem(last=False)
    return found
