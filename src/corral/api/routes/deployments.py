"""/api/v1/deployments: long-running services as health-checked replicas behind routes (DESIGN §7).

Every change is recorded and acted on by the deployment handlers: an answer shows what was asked
(`replicas`, `revision`), and `status`, `ready` and `routes` show how far the handlers got."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from corral.api.schemas.deployments import (
    DeploymentCreate,
    DeploymentHistoryOut,
    DeploymentOut,
    DeploymentPatch,
    RouteOut,
)
from corral.api.state import Caller, State
from corral.services import deployments as svc

router = APIRouter(prefix="/api/v1/deployments", tags=["deployments"])

Name = Annotated[str, Path(max_length=63, description="the deployment's name")]


@router.post("", status_code=201, response_model=DeploymentOut)
async def create_deployment(body: DeploymentCreate, who: Caller, state: State) -> DeploymentOut:
    view = await svc.create(state.engine, who, body.to_domain(), body.asked_priority)
    state.wakeup.scheduler()
    return DeploymentOut.of(view)


@router.get("", response_model=list[DeploymentOut])
async def list_deployments(who: Caller, state: State) -> list[DeploymentOut]:
    return [DeploymentOut.of(v) for v in await svc.listed(state.reader, who)]


@router.get("/{name}", response_model=DeploymentOut)
async def get_deployment(name: Name, who: Caller, state: State) -> DeploymentOut:
    return DeploymentOut.of(await svc.get(state.reader, who, name))


@router.patch(
    "/{name}",
    response_model=DeploymentOut,
    description="A new `session` or `health` is a new revision, rolled out without downtime "
    "(`max_surge`, `max_unavailable`); `replicas` scales.",
)
async def update_deployment(name: Name, body: DeploymentPatch, who: Caller, state: State) -> DeploymentOut:
    asked = body.session.priority if body.session and "priority" in body.session.model_fields_set else None
    change = svc.Change(
        replicas=body.replicas,
        session=body.session.to_replica() if body.session else None,
        priority=asked,
        health=body.health.to_domain() if body.health else None,
        rollout=body.rollout((await svc.get(state.reader, who, name)).deployment.rollout),
        public=body.public,
    )
    view = await svc.update(state.engine, who, name, change)
    state.wakeup.scheduler()
    return DeploymentOut.of(view)


@router.post("/{name}/rollout/undo", response_model=DeploymentOut, summary="Roll back to the revision before")
async def undo_rollout(name: Name, who: Caller, state: State) -> DeploymentOut:
    view = await svc.undo(state.engine, who, name)
    state.wakeup.scheduler()
    return DeploymentOut.of(view)


@router.delete(
    "/{name}",
    status_code=202,
    response_model=DeploymentOut,
    description="Drains and stops every route, then the deployment is DESTROYED.",
)
async def delete_deployment(name: Name, who: Caller, state: State) -> DeploymentOut:
    view = await svc.delete(state.engine, who, name)
    state.wakeup.scheduler()
    return DeploymentOut.of(view)


@router.get("/{name}/routes", response_model=list[RouteOut], summary="Service discovery")
async def list_routes(name: Name, who: Caller, state: State) -> list[RouteOut]:
    """Every route with its address, health and whether it is in traffic."""
    return [RouteOut.of(r) for r in (await svc.get(state.reader, who, name)).routes]


@router.get("/{name}/history", response_model=list[DeploymentHistoryOut])
async def deployment_history(name: Name, who: Caller, state: State) -> list[DeploymentHistoryOut]:
    """Every handler outcome for the deployment and its routes, oldest first."""
    return [DeploymentHistoryOut.of(h) for h in await svc.history(state.reader, who, name)]
