"""/api/v1/resource-groups (admin): each group's preemption settings, effective from the next cycle."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from corral.api.state import Admin, State
from corral.protocol.types import STRICT
from corral.services import groups as svc

router = APIRouter(prefix="/api/v1/resource-groups", tags=["resource groups"])


class GroupPatch(BaseModel):
    model_config = STRICT

    preemptible_priority: int | None = Field(None, ge=0, le=100, description="only sessions at or below it")
    # Literals, not the enums: a strict model takes no string for an enum, and JSON has no enums.
    preemption_order: Literal["oldest", "newest"] | None = Field(None, description="oldest or newest first")
    preemption_mode: Literal["terminate", "suspend"] | None = Field(
        None,
        description="terminate (victims end and are requeued by the retry engine) or suspend (victims "
        "keep their ids, wait SUSPENDED at their place in the queue and are resumed)",
    )
    grace_period: float | None = Field(None, ge=0, le=3600, description="seconds from SIGTERM to SIGKILL")
    min_runtime: float | None = Field(None, ge=0, le=7 * 86400, description="younger sessions are spared")
    pending_timeout: float | None = Field(
        None, ge=0, le=365 * 86400, description="seconds a session may wait queued (0: for ever)"
    )
    max_reschedules: int | None = Field(
        None, ge=0, le=1000, description="returns to the queue before a session fails (scheduler_timeout)"
    )


class GroupOut(BaseModel):
    name: str
    preemptible_priority: int
    preemption_order: str
    preemption_mode: str
    grace_period: float
    min_runtime: float
    pending_timeout: float | None = Field(description="None: the manager's CORRAL_PENDING_TIMEOUT")
    max_reschedules: int | None = Field(description="None: the manager's CORRAL_MAX_RESCHEDULES")
    agents: list[str]


@router.get("", response_model=list[GroupOut])
async def list_groups(who: Admin, state: State) -> list[GroupOut]:
    return [GroupOut(**g) for g in await svc.listed(state.reader)]


@router.get("/{name}", response_model=GroupOut)
async def get_group(name: str, who: Admin, state: State) -> GroupOut:
    return GroupOut(**await svc.get(state.reader, name))


@router.patch("/{name}", response_model=GroupOut)
async def update_group(name: str, body: GroupPatch, who: Admin, state: State) -> GroupOut:
    changes: dict[str, Any] = body.model_dump(mode="json", exclude_unset=True)
    return GroupOut(**await svc.update(state.engine, who, name, changes))
