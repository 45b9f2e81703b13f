"""/api/v1/agents (admin) and the agent protocol under /api/v1/agent."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from corral.api.schemas import AgentOut
from corral.api.state import Admin, AgentAuth, State
from corral.protocol.logs import LogShipment, LogsShipped
from corral.protocol.messages import HealthIn, HealthOut, LeaveIn, RegisterIn, RegisterOut
from corral.protocol.orders import OrdersIn, OrdersOut
from corral.protocol.replicas import ReplicasIn, ReplicasOut
from corral.protocol.reports import ReportsIn, ReportsOut, to_record
from corral.services import agents as agent_service
from corral.services.agent_protocol import heartbeat_interval

router = APIRouter(prefix="/api/v1", tags=["agents"])


@router.get("/agents", response_model=list[AgentOut])
async def list_agents(who: Admin, state: State) -> list[AgentOut]:
    return [AgentOut.of(a) for a in await agent_service.list_agents(state.reader, who)]


@router.post("/agent/register", response_model=RegisterOut, dependencies=[AgentAuth])
async def register(body: RegisterIn, state: State) -> RegisterOut:
    epoch = await state.protocol.register(
        body.agent_id,
        body.hostname,
        body.address,
        body.resource_group,
        body.capacity,
        {**body.info, "instance": body.instance},
        body.schedulable,
        body.unschedulable_reason,
    )
    cfg = state.scheduler
    return RegisterOut(
        epoch=epoch,
        agent_lease=cfg.agent_lease,
        fence_timeout=cfg.fence_timeout,
        heartbeat_interval=heartbeat_interval(cfg),
        long_poll=min(state.settings.long_poll, heartbeat_interval(cfg)),
        log_cap=state.settings.log_cap_bytes,
    )


@router.post("/agent/orders", response_model=OrdersOut, dependencies=[AgentAuth])
async def orders(body: OrdersIn, state: State) -> OrdersOut:
    fingerprint, found, recorded = await state.protocol.orders(
        body.agent_id, body.epoch, body.seen, body.wait, frozenset(body.started)
    )
    return OrdersOut(fingerprint=fingerprint, orders=found, recorded=recorded)


@router.post("/agent/health", response_model=HealthOut, dependencies=[AgentAuth])
async def health(body: HealthIn, state: State) -> HealthOut:
    """Whether kernels can start on the agent (its cgroups are usable), sent when that changes."""
    images = None if body.images is None else {k: v.model_dump() for k, v in body.images.items()}
    await state.protocol.health(
        body.agent_id, body.epoch, body.schedulable, body.unschedulable_reason, images
    )
    return HealthOut(schedulable=body.schedulable)


@router.post("/agent/replicas", response_model=ReplicasOut, dependencies=[AgentAuth])
async def replicas(body: ReplicasIn, state: State) -> ReplicasOut:
    """The ports and health of the deployment replicas the agent runs: after each round of probes,
    so a change reaches the manager within one health interval."""
    return ReplicasOut(recorded=await state.protocol.replicas(body.agent_id, body.epoch, body.replicas))


@router.post("/agent/leave", status_code=204, dependencies=[AgentAuth])
async def leave(body: LeaveIn, state: State) -> None:
    """A clean stop: the agent has killed and reported its kernels; its id is free at once."""
    await state.protocol.leave(body.agent_id, body.epoch)


@router.post("/agent/logs", response_model=LogsShipped, dependencies=[AgentAuth])
async def ship_logs(query: Annotated[LogShipment, Query()], request: Request, state: State) -> LogsShipped:
    """A piece of a kernel's output as raw bytes (the request body); size-limited by the server."""
    data = await request.body()
    stored, recorded = await state.protocol.ship_logs(query.agent_id, query.epoch, query, data)
    return LogsShipped(stored=stored, recorded=recorded)


@router.post("/agent/reports", response_model=ReportsOut, dependencies=[AgentAuth])
async def reports(body: ReportsIn, state: State) -> ReportsOut:
    # The wire's reports become the domain's here, once: nothing past this route sees the wire model.
    applied, refused, recorded = await state.protocol.report(
        body.agent_id, body.epoch, [to_record(r) for r in body.reports]
    )
    return ReportsOut(applied=applied, refused=refused, recorded=recorded)
