"""/api/v1/arrays: a job array as a whole (each element is also a session of its own)."""

from __future__ import annotations

from fastapi import APIRouter

from corral.api.schemas import ArrayOut
from corral.api.state import Caller, State
from corral.services import arrays as svc

router = APIRouter(prefix="/api/v1/arrays", tags=["arrays"])


@router.get("/{array_id}", response_model=ArrayOut)
async def get_array(array_id: str, who: Caller, state: State) -> ArrayOut:
    return ArrayOut.of(await svc.get(state.reader, who, array_id))


@router.post("/{array_id}/cancel", status_code=202, response_model=ArrayOut)
async def cancel_array(array_id: str, who: Caller, state: State) -> ArrayOut:
    """Every live element is cancelled; an ended one is not retried any more."""
    view = await svc.cancel(state.engine, who, array_id)
    state.wakeup.scheduler()
    return ArrayOut.of(view)


@router.post("/{array_id}/retry", status_code=201, response_model=ArrayOut)
async def retry_array(array_id: str, who: Caller, state: State) -> ArrayOut:
    """A manual retry of every element that ended without success (409 if there is none)."""
    view, made = await svc.retry(state.engine, who, array_id)
    state.wakeup.scheduler()
    return ArrayOut.of(view, retried=made)
