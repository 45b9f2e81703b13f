"""/ui/queue/{group}: a resource group's pending sessions in the scheduler's order, each with why it
waits; another project's session shows only that it is there."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from corral.api.state import State
from corral.services import sessions as svc
from corral.web.auth import Seen
from corral.web.templating import page

router = APIRouter(include_in_schema=False)

SHOWN = 200


@router.get("/ui/queue/{group}")
async def queue_page(request: Request, state: State, viewer: Seen, group: str) -> Response:
    found = await svc.queue(state.reader, viewer.who, group[:64], SHOWN)
    reasons = {s.id: await svc.waiting_reason(state.reader, s) for s in found if s is not None}
    return page(request, "queue.html", viewer, group=group[:64], rows=found, reasons=reasons, shown=SHOWN)
