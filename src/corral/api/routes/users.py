"""/api/v1/users (admin): users, their projects and API keys; /api/v1/me: who the caller is."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel, Field, StringConstraints

from corral.api.schemas import PriorityRulesIn
from corral.api.state import Admin, Caller, State
from corral.domain.records import ApiKeyRecord, UserRecord
from corral.protocol.types import STRICT, Name
from corral.services import users as svc

router = APIRouter(prefix="/api/v1", tags=["users"])

UserName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@\-]{0,127}$")]
Role = Literal["admin", "user"]


class UserIn(BaseModel):
    model_config = STRICT

    name: UserName
    role: Role = "user"
    projects: list[Name] = Field(default_factory=list, max_length=256, description="project names")


# Not 0: a mapping never makes anyone's kernels root (that takes an agent flag).
PosixId = Annotated[int, Field(ge=1, le=2**31 - 2)]


class RunAsIn(BaseModel):
    model_config = STRICT

    uid: PosixId = Field(description="the uid this user's kernels run as on agents started as root")
    gid: PosixId | None = Field(None, description="their group (default: the uid's primary group)")


class UserPatch(BaseModel):
    model_config = STRICT

    role: Role | None = None
    projects: list[Name] | None = Field(None, max_length=256, description="replaces the memberships")
    priority_rules: PriorityRulesIn | None = Field(
        None, description="override their projects' rules, merged field by field; null clears"
    )
    run_as: RunAsIn | None = Field(None, description="the account their kernels run as; null clears")
    default_project: Name | None = Field(
        None, description="where their sessions go when they name no project (one of theirs); null clears"
    )


class UserOut(BaseModel):
    name: str
    role: str
    projects: list[str]
    priority_rules: dict[str, Any] = Field(description="only the fields set on this user")
    run_as: dict[str, int] | None = Field(description="uid (and gid) their kernels run as, if mapped")
    default_project: str | None = Field(description="where their sessions go when they name no project")
    created_at: datetime

    @classmethod
    def of(cls, u: UserRecord) -> UserOut:
        return cls(
            name=u.name,
            role=u.role,
            projects=list(u.projects),
            priority_rules=u.config.get("priority_rules") or {},
            run_as=u.config.get("run_as") or None,
            default_project=u.config.get("default_project"),
            created_at=u.created_at,
        )


class KeyOut(BaseModel):
    id: str
    prefix: str = Field(description="the key's first characters, to tell keys apart")
    created_at: datetime

    @classmethod
    def of(cls, k: ApiKeyRecord) -> KeyOut:
        return cls(id=k.id, prefix=k.prefix, created_at=k.created_at)


class NewKeyOut(BaseModel):
    id: str
    key: str = Field(description="shown this once: only its hash is stored")


class CreatedUserOut(UserOut):
    key: NewKeyOut


@router.post("/users", status_code=201, response_model=CreatedUserOut)
async def create_user(body: UserIn, who: Admin, state: State) -> CreatedUserOut:
    user, key, key_id = await svc.create(state.engine, who, body.name, body.role, body.projects)
    return CreatedUserOut(**UserOut.of(user).model_dump(), key=NewKeyOut(id=key_id, key=key))


@router.get("/users", response_model=list[UserOut])
async def list_users(who: Admin, state: State) -> list[UserOut]:
    return [UserOut.of(u) for u in await svc.listed(state.reader)]


@router.get("/users/{name}", response_model=UserOut)
async def get_user(name: str, who: Admin, state: State) -> UserOut:
    return UserOut.of(await svc.get(state.reader, name))


@router.patch("/users/{name}", response_model=UserOut)
async def update_user(name: str, body: UserPatch, who: Admin, state: State) -> UserOut:
    rules: dict[str, Any] | svc.Unset | None = svc.UNSET
    if "priority_rules" in body.model_fields_set:
        rules = body.priority_rules.to_json() if body.priority_rules else None
    run_as: dict[str, Any] | svc.Unset | None = svc.UNSET
    if "run_as" in body.model_fields_set:
        run_as = body.run_as.model_dump(exclude_none=True) if body.run_as else None
    default: str | svc.Unset | None = (
        body.default_project if "default_project" in body.model_fields_set else svc.UNSET
    )
    return UserOut.of(
        await svc.update(state.engine, who, name, body.role, body.projects, rules, run_as, default)
    )


@router.post("/users/{name}/keys", status_code=201, response_model=NewKeyOut)
async def create_key(name: str, who: Admin, state: State) -> NewKeyOut:
    key, key_id = await svc.add_key(state.engine, who, name)
    return NewKeyOut(id=key_id, key=key)


@router.get("/users/{name}/keys", response_model=list[KeyOut])
async def list_keys(name: str, who: Admin, state: State) -> list[KeyOut]:
    return [KeyOut.of(k) for k in await svc.keys(state.reader, name)]


@router.delete("/users/{name}/keys/{key_id}", status_code=204)
async def revoke_key(name: str, key_id: str, who: Admin, state: State) -> Response:
    await svc.revoke(state.engine, who, name, key_id)
    return Response(status_code=204)


class MeOut(BaseModel):
    name: str
    role: str
    projects: list[str]
    priority: dict[str, dict[str, Any]] = Field(
        description="per project: the priority rules that apply to the caller (default, may_change, min, max)"
    )


@router.get("/me", response_model=MeOut)
async def me(who: Caller, state: State) -> MeOut:
    return MeOut(**await svc.me(state.reader, who))
