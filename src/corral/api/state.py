"""What the app holds while it runs, and the request dependencies that reach it."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from corral.clock import utcnow
from corral.domain.records import Principal
from corral.http1 import Upstream
from corral.services import Engine, users, web_sessions
from corral.services.agent_protocol import AgentProtocol
from corral.services.errors import Forbidden, Unauthorized
from corral.services.feed import Feed
from corral.services.intake import Intake
from corral.services.serve import Proxy
from corral.settings import ManagerSettings, SchedulerSettings
from corral.wakeup import Wakeup


@dataclass
class AppState:
    """The manager's long-lived parts."""

    engine: Engine
    reader: Engine
    """Read-only connections (`engine` itself on PostgreSQL): for GETs, so they never queue on
    SQLite's one writer."""
    settings: ManagerSettings
    scheduler: SchedulerSettings
    wakeup: Wakeup
    protocol: AgentProtocol
    intake: Intake
    """Single-session creates, written together when they arrive together."""
    feed: Feed
    """New events, handed to the streams subscribed (`/events/stream`)."""
    proxy: Proxy
    """`/serve/{deployment}/`: where requests go, and how many each route has open."""
    upstream: Upstream
    """The proxy's keep-alive connections to replicas."""


async def app_state(request: Request) -> AppState:
    # A coroutine, not a plain function: FastAPI runs those in its thread pool, and every request
    # asks for the state (a thread round trip each, and the GIL handed over while a cycle runs).
    state: AppState = request.app.state.corral
    return state


State = Annotated[AppState, Depends(app_state)]


def bearer(request: Request) -> str:
    """The request's API key (401 without one)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'", {"field": "authorization"})
    return token.strip()


async def principal(request: Request, state: State) -> Principal:
    """The one way in for people: every route a user calls takes its caller from here, looked up
    on every request (a revoked key is refused from its next request).  Dependencies are solved
    before a body is judged, so a caller nobody knows learns nothing of its body.  A GET may come
    from a signed-in browser instead (its cookie: an EventSource sends no header); a write never
    does, so no other site can make a browser write through the API."""
    if request.method == "GET" and "authorization" not in request.headers:
        cookie = request.cookies.get(web_sessions.COOKIE)
        viewer = await web_sessions.identify(state.reader, cookie, utcnow()) if cookie else None
        if viewer is not None:
            return viewer.who
    return await users.identify(state.reader, bearer(request))


Caller = Annotated[Principal, Depends(principal)]


async def admin(who: Caller) -> Principal:
    if not who.is_admin:
        raise Forbidden("admin only")
    return who


Admin = Annotated[Principal, Depends(admin)]


async def agent_auth(request: Request, state: State) -> None:
    token = bearer(request)
    expected = state.settings.agent_token
    if not expected or not hmac.compare_digest(token.encode(), expected.encode()):
        raise Unauthorized("unknown agent token", {"field": "authorization"})


AgentAuth = Depends(agent_auth)
