"""/ui/arrays/{id}: a job array's progress per status and a grid of its elements (each element's
latest attempt)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from corral.api.schemas.arrays import ArrayOut
from corral.api.state import State
from corral.services import arrays, events
from corral.services import sessions as svc
from corral.services.errors import CorralError
from corral.web.auth import Seen
from corral.web.templating import page

router = APIRouter(include_in_schema=False)


@router.get("/ui/arrays/{array_id}")
async def array_page(
    request: Request,
    state: State,
    viewer: Seen,
    array_id: str,
    block: Annotated[str | None, Query(pattern="^live$")] = None,
) -> Response:
    try:
        since = await events.newest(state.reader)  # before the read: the stream misses nothing
        view = await arrays.get(state.reader, viewer.who, array_id[:64])
    except CorralError as exc:
        return page(request, "error.html", viewer, exc.status, error=exc)
    found = await svc.get_many(state.reader, viewer.who, list(view.session_ids))
    elements = [found.get(sid) for sid in view.session_ids]
    return page(
        request, "array.html", viewer, block=block, a=ArrayOut.of(view), elements=elements, since=str(since)
    )
