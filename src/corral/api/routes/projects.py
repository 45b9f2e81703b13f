"""/api/v1/projects (admin): projects and their retry defaults and bound policies."""

from __future__ import annotations

from fastapi import APIRouter

from corral.api.schemas import ProjectIn, ProjectOut, ProjectPatch
from corral.api.state import Admin, State
from corral.domain.records import ProjectRecord
from corral.services import policies as svc

router = APIRouter(prefix="/api/v1/projects", tags=["projects"])


def _out(p: ProjectRecord) -> ProjectOut:
    return ProjectOut(
        name=p.name,
        retry_defaults=p.config.get("retry_defaults") or {},
        retry_policies=p.config.get("retry_policies") or [],
        priority_rules=p.config.get("priority_rules") or {},
        created_at=p.created_at,
    )


@router.post("", status_code=201, response_model=ProjectOut)
async def create_project(body: ProjectIn, who: Admin, state: State) -> ProjectOut:
    cfg = {
        "retry_defaults": body.retry_defaults.model_dump(mode="json", exclude_unset=True)
        if body.retry_defaults
        else {},
        "retry_policies": body.retry_policies,
        "priority_rules": body.priority_rules.to_json() if body.priority_rules else {},
    }
    return _out(await svc.create_project(state.engine, who, body.name, cfg))


@router.get("", response_model=list[ProjectOut])
async def list_projects(who: Admin, state: State) -> list[ProjectOut]:
    return [_out(p) for p in await svc.list_projects(state.reader)]


@router.get("/{name}", response_model=ProjectOut)
async def get_project(name: str, who: Admin, state: State) -> ProjectOut:
    return _out(await svc.get_project(state.reader, name))


@router.patch("/{name}", response_model=ProjectOut)
async def update_project(name: str, body: ProjectPatch, who: Admin, state: State) -> ProjectOut:
    changes: dict[str, object] = {}
    if "retry_defaults" in body.model_fields_set:
        d = body.retry_defaults
        changes["retry_defaults"] = d.model_dump(mode="json", exclude_unset=True) if d else None
    if body.retry_policies is not None:
        changes["retry_policies"] = body.retry_policies
    if "priority_rules" in body.model_fields_set:
        rules = body.priority_rules
        changes["priority_rules"] = rules.to_json() if rules else None
    return _out(await svc.update_project(state.engine, who, name, changes))
