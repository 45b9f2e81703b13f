"""/api/v1/retry-policies (admin): Armada-style named retry policies, applied without restarts."""

from __future__ import annotations

from fastapi import APIRouter, Response

from corral.api.schemas import PolicyDoc, PolicyOut
from corral.api.state import Admin, State
from corral.services import policies as svc

router = APIRouter(prefix="/api/v1/retry-policies", tags=["retry policies"])


@router.post("", status_code=201, response_model=PolicyOut, summary="Create or replace (apply)")
async def apply_policy(body: PolicyDoc, who: Admin, state: State, response: Response) -> PolicyOut:
    spec = body.spec.model_dump(mode="json", exclude_none=True)
    created = await svc.apply(state.engine, who, body.metadata.name, spec)
    if not created:
        response.status_code = 200
    return PolicyOut(**await svc.get(state.engine, body.metadata.name))


@router.get("", response_model=list[PolicyOut])
async def list_policies(who: Admin, state: State) -> list[PolicyOut]:
    return [PolicyOut(**p) for p in await svc.list_all(state.reader)]


@router.get("/{name}", response_model=PolicyOut)
async def get_policy(name: str, who: Admin, state: State) -> PolicyOut:
    return PolicyOut(**await svc.get(state.reader, name))


@router.delete("/{name}", status_code=204)
async def delete_policy(name: str, who: Admin, state: State) -> Response:
    await svc.delete(state.engine, who, name)
    return Response(status_code=204)
