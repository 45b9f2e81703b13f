"""/api/v1/cluster-config and /api/v1/audit (admin), and /metrics (Prometheus, admin key)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from prometheus_client import CONTENT_TYPE_LATEST, Gauge, generate_latest

from corral.api.schemas import AuditOut, ClusterConfigIn
from corral.api.state import Admin, State
from corral.domain.status import SessionStatus
from corral.protocol.types import INT64_MAX, Name
from corral.services import cluster as svc
from corral.services import sessions as session_svc

router = APIRouter(tags=["cluster"])

SESSIONS = Gauge("corral_sessions", "Sessions per status (all projects)", ["status"])


@router.get("/api/v1/cluster-config", response_model=dict[str, Any])
async def get_config(who: Admin, state: State) -> dict[str, Any]:
    return await svc.current(state.reader)


@router.patch("/api/v1/cluster-config", response_model=dict[str, Any])
async def change_config(body: ClusterConfigIn, who: Admin, state: State) -> dict[str, Any]:
    """Only the fields given change; effective within one retry cycle, on every manager."""
    result = await svc.change(state.engine, who, body.changes())
    state.wakeup.retries()
    return result


@router.get("/api/v1/audit", response_model=list[AuditOut])
async def audit(
    who: Admin,
    state: State,
    after: Annotated[int, Query(ge=0, le=INT64_MAX)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    action: Annotated[Name | None, Query()] = None,
) -> list[AuditOut]:
    return [AuditOut.of(a) for a in await svc.audit(state.reader, after, limit, action)]


@router.get("/metrics", include_in_schema=False)
async def metrics(who: Admin, state: State) -> Response:
    counts = await session_svc.counts(state.reader, who)
    for status in SessionStatus:
        SESSIONS.labels(status=str(status)).set(counts.get(str(status), 0))
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
