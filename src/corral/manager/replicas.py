"""Starting and stopping a deployment's replicas: inference sessions queued like any other, each
behind a route (DESIGN §7).  Used by the deployment handlers, in their transaction."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime

from corral.domain.cause import TerminationReason
from corral.domain.deployment_records import DeploymentRecord, RevisionRecord, RouteRecord
from corral.domain.records import NewSession
from corral.domain.spec import SessionType
from corral.store import routes, sessions
from corral.store.unit import Tx


async def start(conn: Tx, dep: DeploymentRecord, revision: RevisionRecord, now: datetime) -> str:
    """A new replica of the deployment's current revision: its session (PENDING, the deployment
    owner's) and its PROVISIONING route.  Returns the route's id."""
    route_id = str(uuid.uuid4())
    session_id = str(uuid.uuid4())
    spec = replace(revision.session, type=SessionType.INFERENCE, project=dep.project)
    name = f"{dep.name}-r{revision.number}-{route_id[:6]}"
    new = NewSession(
        id=session_id, name=name, owner=dep.owner, spec=replace(spec, name=name), chain_submitted_at=now
    )
    await sessions.insert_session(conn, new, now)
    await routes.insert_route(conn, route_id, dep, session_id, now)
    return route_id


async def stop(conn: Tx, dep: DeploymentRecord, route: RouteRecord, why: str, now: datetime) -> bool:
    """Ask the route's replica session to stop; False when it has ended already."""
    message = f"stopped by deployment {dep.name}: {why}"
    return await sessions.request_termination(
        conn, route.session_id, TerminationReason.USER_CANCELLED, message, now
    )
