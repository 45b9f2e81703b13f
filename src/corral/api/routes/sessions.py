"""/api/v1/sessions"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from corral.api.routes.events import HEARTBEAT, SEND_TIMEOUT
from corral.api.schemas import (
    ArrayOut,
    BulkCreate,
    BulkItemOut,
    BulkOut,
    ErrorRecordOut,
    HistoryOut,
    KernelOut,
    LogsOut,
    SessionCreate,
    SessionOut,
    errors_of,
)
from corral.api.state import AppState, Caller, State, bearer
from corral.domain.records import SessionRecord
from corral.domain.status import SessionStatus
from corral.protocol.types import INT64_MAX
from corral.services import arrays as array_service
from corral.services import log_stream, retry_chain
from corral.services import logs as log_service
from corral.services import sessions as svc
from corral.services.arrays import BulkItem
from corral.services.errors import InvalidInput
from corral.services.intake import Ask

router = APIRouter(prefix="/api/v1/sessions", tags=["sessions"])


def _asked(body: SessionCreate) -> tuple[dict[str, Any] | None, int | None]:
    """The inline policy fields and the priority the request itself set."""
    fields = body.retry_policy.model_dump(mode="json", exclude_unset=True) if body.retry_policy else None
    return fields, body.priority if "priority" in body.model_fields_set else None


@router.post(
    "",
    status_code=201,
    response_model=SessionOut | ArrayOut,
    description="One session, or with `array` a job array (the response is then the array).",
)
async def create_session(
    body: SessionCreate, who: Caller, state: State, request: Request, response: Response
) -> SessionOut | ArrayOut:
    fields, asked = _asked(body)
    indices = body.indices()
    if indices is not None:
        view, created = await array_service.create(state.engine, who, body.to_spec(), fields, asked, indices)
        out: SessionOut | ArrayOut = ArrayOut.of(view)
    else:
        # Its key is read again where the session is written, with the others of its batch.
        ask = Ask(body.to_spec(), fields, asked, who=who, key=bearer(request))
        record, created = await state.intake.create(ask)
        # Just made, it is the only attempt of its chain: no chain to read back.
        out = SessionOut.of(record) if created else (await _out(state, [record]))[0]
    if created:
        state.wakeup.scheduler()
    else:
        response.status_code = 200
    return out


@router.post("/bulk", status_code=201, response_model=BulkOut, summary="Many sessions in one transaction")
async def create_sessions(body: BulkCreate, who: Caller, state: State) -> BulkOut:
    """All or none; an item with a creation_id the caller used before for the same request is that
    earlier session (`created: false`), so a replayed request creates nothing new."""
    items: list[BulkItem] = []
    for item in body.sessions:
        if item.array is not None:
            raise InvalidInput(f"sessions[{len(items)}].array", "a bulk create takes single sessions")
        fields, asked = _asked(item)
        items.append(BulkItem(item.to_spec(), fields, asked))
    made = await array_service.create_many(state.engine, who, items)
    if any(created for _, created in made):
        state.wakeup.scheduler()
    outs = await _out(state, [record for record, _ in made])
    return BulkOut(sessions=[BulkItemOut(created=c, session=o) for (_, c), o in zip(made, outs, strict=True)])


@router.get("", response_model=list[SessionOut])
async def list_sessions(
    who: Caller,
    state: State,
    status: Annotated[list[str] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=INT64_MAX)] = 0,
    array: Annotated[
        str | None, Query(max_length=64, description="only this job array's elements, by index")
    ] = None,
) -> list[SessionOut]:
    status = [s.upper() for s in status or []]
    for s in status:
        if s not in set(SessionStatus):
            raise InvalidInput("status", f"unknown status {s[:40]!r}: one of {', '.join(SessionStatus)}")
    found = await svc.list_visible(state.reader, who, status, limit, offset, array_id=array)
    return await _out(state, found)


async def _out(state: AppState, records: list[SessionRecord]) -> list[SessionOut]:
    chains = await svc.chain_rows(state.reader, records)
    return [SessionOut.of(s, chain=chains.get(s.root_session_id)) for s in records]


@router.get("/counts", response_model=dict[str, int], summary="Sessions per status")
async def session_counts(who: Caller, state: State) -> dict[str, int]:
    return await svc.counts(state.reader, who)


@router.get("/{session_id}", response_model=SessionOut)
async def get_session(session_id: str, who: Caller, state: State) -> SessionOut:
    record = await svc.get(state.reader, who, session_id)
    chains = await svc.chain_rows(state.reader, [record])
    return SessionOut.of(
        record,
        waiting_reason=await svc.waiting_reason(state.reader, record),
        chain=chains.get(record.root_session_id),
        waiting=await svc.waiting(state.reader, record),
        victims=[v.id for v in await svc.victims(state.reader, who, record)],
    )


@router.get("/{session_id}/attempts", response_model=list[SessionOut], summary="Every attempt of its chain")
async def get_attempts(session_id: str, who: Caller, state: State) -> list[SessionOut]:
    return await _out(state, await svc.attempts(state.reader, who, session_id))


@router.post("/{session_id}/retry", status_code=201, response_model=SessionOut, summary="Manual retry")
async def retry_session(
    session_id: str,
    who: Caller,
    state: State,
    force: Annotated[bool, Query(description="retry a chain whose latest attempt succeeded")] = False,
) -> SessionOut:
    """A new attempt after the chain's latest one (which must have ended), with a fresh budget; a
    chain that succeeded only with `force`."""
    record = await retry_chain.retry(state.engine, who, session_id, force)
    state.wakeup.scheduler()
    return (await _out(state, [record]))[0]


@router.get("/{session_id}/kernels", response_model=list[KernelOut])
async def get_kernels(session_id: str, who: Caller, state: State) -> list[KernelOut]:
    return [KernelOut.of(k) for k in (await svc.get(state.reader, who, session_id)).kernels]


@router.get("/{session_id}/history", response_model=list[HistoryOut])
async def get_history(session_id: str, who: Caller, state: State) -> list[HistoryOut]:
    return [HistoryOut.of(h) for h in await svc.history(state.reader, who, session_id)]


@router.get("/{session_id}/errors", response_model=list[ErrorRecordOut])
async def get_errors(session_id: str, who: Caller, state: State) -> list[ErrorRecordOut]:
    """Every failed worker's error record, the root cause first, each marked primary or side effect."""
    return errors_of(await svc.get(state.reader, who, session_id))


@router.get("/{session_id}/logs", response_model=LogsOut)
async def get_logs(
    session_id: str,
    who: Caller,
    state: State,
    after: Annotated[int, Query(ge=0, le=INT64_MAX, description="the `next` of the previous page")] = 0,
    max_bytes: Annotated[int, Query(ge=1, le=64 << 20, description="page size in bytes (about)")] = 4 << 20,
) -> LogsOut:
    page = await log_service.read(state.reader, who, session_id, after, max_bytes)
    return LogsOut.of(page)


@router.get(
    "/{session_id}/logs/stream",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}},
    summary="One kernel's output, live",
)
async def stream_logs(
    session_id: str,
    who: Caller,
    state: State,
    kernel: Annotated[int, Query(ge=0, le=INT64_MAX, description="the kernel's rank")] = 0,
    after: Annotated[
        str | None, Query(max_length=80, description="a position: `GENERATION-STDOUT-STDERR-PREPARE`")
    ] = None,
    last_event_id: Annotated[
        str | None, Header(max_length=80, description="resume from this position (as `after`)")
    ] = None,
) -> EventSourceResponse:
    """One kernel's output (the kernel of rank `kernel`) as server-sent events: what is stored,
    then what it writes, live, until no more can come.  Positions are byte offsets: `id:` is
    `GENERATION-STDOUT-STDERR-PREPARE`, the kernel's placement (a resumed kernel writes from offset
    0 again) and the bytes of its stdout, stderr and image build read in it, so a reconnect with
    `Last-Event-ID` (or `after`; left-out parts are 0, `0-120` is after 120 bytes of stdout), even
    at an offset inside a piece, goes on from exactly there.  Without either it starts at the
    beginning.  It opens with an `id:` alone (where it starts); then `event: output`, `data:`
    `{position, rank, generation, stream, offset, text}` (the bytes from `offset` of `stream` as
    UTF-8, invalid sequences as U+FFFD), in the order they were stored; and once the session has
    ended and all of the kernel's output has been sent, `event: end` `{position, status, dropped}`
    (bytes the log cap dropped), after which the server closes the stream.  A comment every 15 s
    keeps it open; output arrives within 0.2 s of being stored."""
    field = "last-event-id" if last_event_id else "after"
    start = log_stream.Position.parse(last_event_id or after, field)
    session = await log_stream.kernel_of(state.reader, who, session_id, kernel)

    async def messages() -> AsyncIterator[ServerSentEvent]:
        yield ServerSentEvent(id=str(start))  # EventSource's last id, no message
        async for item in log_stream.stream(state.reader, session.id, kernel, start, _stopping(state)):
            at = str(item.position)
            if isinstance(item, log_stream.End):
                end = {"position": at, "status": item.status, "dropped": item.dropped}
                yield ServerSentEvent(data=json.dumps(end), event="end", id=at)
                return
            text = item.data.decode("utf-8", "replace")
            out = {"position": at, "rank": kernel, "generation": item.generation}
            out |= {"stream": item.stream, "offset": item.offset, "text": text}
            yield ServerSentEvent(data=json.dumps(out), event="output", id=at)

    return EventSourceResponse(messages(), ping=HEARTBEAT, send_timeout=SEND_TIMEOUT)


def _stopping(state: AppState) -> Callable[[], bool]:
    """The manager shuts down (its feed stops): a log stream ends there, and its client resumes."""
    return lambda: state.feed.stopped


@router.post("/{session_id}/cancel", status_code=202, response_model=SessionOut)
async def cancel_session(session_id: str, who: Caller, state: State) -> SessionOut:
    record = await retry_chain.cancel(state.engine, who, session_id)
    state.wakeup.scheduler()
    return (await _out(state, [record]))[0]
