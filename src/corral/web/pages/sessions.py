"""/ui/sessions: the caller's sessions, newest first, filtered in the URL, a keyset page at a time;
its rows refresh over the event stream."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from corral.api.schemas.session_out import SessionOut
from corral.api.state import State
from corral.domain.status import SessionStatus
from corral.services import events
from corral.services import sessions as svc
from corral.services.errors import CorralError
from corral.services.sessions import Listing
from corral.web.auth import Seen
from corral.web.templating import page

router = APIRouter(include_in_schema=False)

PAGE = 50
Filter = Annotated[str | None, Query(max_length=128)]


@router.get("/ui/sessions")
async def sessions_page(
    request: Request,
    state: State,
    viewer: Seen,
    status: Annotated[list[str] | None, Query(max_length=16)] = None,
    project: Filter = None,
    owner: Filter = None,
    array: Filter = None,
    cause: Filter = None,
    q: Annotated[str | None, Query(max_length=128)] = None,
    before: Annotated[str | None, Query(max_length=100)] = None,
    block: Annotated[str | None, Query(pattern="^rows$")] = None,
) -> Response:
    where = Listing(
        tuple(s.strip().upper() for s in status or [] if s.strip()),
        project or None,
        owner or None,
        array or None,
        cause or None,
        (q or "").strip() or None,
    )
    try:
        since = await events.newest(state.reader)  # before the read: the stream misses nothing
        found = await svc.page(state.reader, viewer.who, where, before, PAGE + 1)
    except CorralError as exc:
        return page(request, "error.html", viewer, exc.status, error=exc)
    chains = await svc.chain_rows(state.reader, found[:PAGE])
    rows = [SessionOut.of(s, chain=chains.get(s.root_session_id)) for s in found[:PAGE]]
    places = await svc.queue_positions(state.reader, [s for s in found[:PAGE] if s.status == "PENDING"])
    older = svc.cursor_of(found[PAGE - 1]) if len(found) > PAGE else None
    query = [(k, v) for k, v in request.query_params.multi_items() if k not in ("before", "block")]
    return page(
        request,
        "sessions.html",
        viewer,
        block=block,
        rows=rows,
        places=places,
        cap=svc.LISTED_PLACES,
        where=where,
        statuses=list(SessionStatus),
        older=older,
        query=query,
        first_page=before is None,
        since=str(since),
    )
