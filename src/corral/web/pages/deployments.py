"""/ui/deployments and /ui/deployments/{name}: desired against ready replicas, whether /serve/NAME/
is reachable, each route's health and traffic flag, the revisions and every handler outcome; the
live part refreshes on the deployment's events.  Scaling is a form (as `corral deploy scale`).
Another project's deployment is a 404, exactly as in the API."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from corral.api.schemas.deployments import DeploymentHistoryOut, DeploymentOut
from corral.api.state import State
from corral.domain.deployments import MAX_REPLICAS
from corral.services import deployments as svc
from corral.services import events
from corral.services.errors import CorralError, InvalidInput
from corral.web.auth import Seen, form_of
from corral.web.templating import page

router = APIRouter(include_in_schema=False)

DONE = {"scaled": "Scale requested: the routes follow.", "deleted": "Deletion requested: every route drains."}


@router.get("/ui/deployments")
async def deployments_page(request: Request, state: State, viewer: Seen) -> Response:
    found = await svc.listed(state.reader, viewer.who)
    return page(request, "deployments.html", viewer, deployments=[DeploymentOut.of(v) for v in found])


@router.get("/ui/deployments/{name}")
async def deployment_page(
    request: Request,
    state: State,
    viewer: Seen,
    name: str,
    block: Annotated[str | None, Query(pattern="^live$")] = None,
    done: Annotated[str | None, Query(max_length=20)] = None,
) -> Response:
    try:
        since = await events.newest(state.reader)  # before the reads: the stream misses nothing
        view = await svc.get(state.reader, viewer.who, name[:63])
        history = await svc.history(state.reader, viewer.who, view.deployment.name)
    except CorralError as exc:
        return page(request, "error.html", viewer, exc.status, error=exc)
    return page(
        request,
        "deployment.html",
        viewer,
        block=block,
        d=DeploymentOut.of(view),
        revisions=sorted(view.revisions.values(), key=lambda r: -r.number),
        history=[DeploymentHistoryOut.of(h) for h in history][-200:],
        done=DONE.get(done or ""),
        since=str(since),
        max_replicas=MAX_REPLICAS,
    )


@router.post("/ui/deployments/{name}/{action}")
async def act(request: Request, state: State, viewer: Seen, name: str, action: str) -> Response:
    """Scale or delete, then back to the deployment with what happened."""
    form = await form_of(request, viewer)
    try:
        if action == "scale":
            raw = str(form.get("replicas", ""))
            if not raw.isdigit() or int(raw) > MAX_REPLICAS:
                raise InvalidInput("replicas", f"replicas: a whole number 0..{MAX_REPLICAS}")
            await svc.update(state.engine, viewer.who, name[:63], svc.Change(replicas=int(raw)))
            done = "scaled"
        elif action == "delete":
            await svc.delete(state.engine, viewer.who, name[:63])
            done = "deleted"
        else:
            return page(request, "error.html", viewer, 404, error=None, message=f"no action {action[:40]!r}")
    except CorralError as exc:
        return page(request, "error.html", viewer, exc.status, error=exc)
    state.wakeup.deployments()
    return RedirectResponse(f"/ui/deployments/{name[:63]}?done={done}", status_code=303)
