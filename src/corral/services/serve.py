"""Where `/serve/{deployment}/...` sends a request: round-robin over the deployment's routes in
traffic, as this manager last read them (at most `FRESH` seconds ago), and how many requests each
route has open here (a draining route is stopped once it has none: manager/deployment_handlers/
drain_route.py)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import structlog

from corral.clock import utcnow
from corral.domain.deployment_records import DeploymentRecord, RouteRecord
from corral.domain.deployment_status import DeploymentStatus
from corral.domain.deployments import NAME
from corral.domain.records import Principal
from corral.services.errors import NotFound, Unauthorized
from corral.store import deployments, routes
from corral.store.db import reading, transaction
from corral.store.unit import Engine

log = structlog.get_logger("corral.serve")

FRESH = 1.0
"""Seconds a deployment's routes are used as read: a route leaving traffic gets no new request
from this manager after this."""


@dataclass
class _Known:
    deployment: DeploymentRecord | None
    routes: list[RouteRecord]
    read_at: float
    turn: Iterator[int] = field(default_factory=itertools.count)


def _no_key() -> Unauthorized:
    return Unauthorized("missing API key: send 'Authorization: Bearer <key>'", {"field": "authorization"})


HOLD = 3.0
"""Seconds a draining route is held for by one report that this manager has requests open on it
(renewed every `HOLD_EVERY` while it has)."""
HOLD_EVERY = 1.0


class Proxy:
    """`run()` tells the drains which routes this manager still has requests open on, until
    `shutdown()` (idempotent)."""

    def __init__(self, engine: Engine, writer: Engine | None = None) -> None:
        self._engine = engine
        self._writer = writer or engine
        self._stopped = asyncio.Event()
        self._known: dict[str, _Known] = {}
        self._lock = asyncio.Lock()
        self.open: Counter[str] = Counter()
        """Requests open here, by route id."""

    def left_traffic(self) -> set[str]:
        """Routes this manager has requests open on that are no longer among those it sends to."""
        serving = {r.id for k in self._known.values() for r in k.routes}
        return {route_id for route_id, n in self.open.items() if n and route_id not in serving}

    async def run(self) -> None:
        while not self._stopped.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), HOLD_EVERY)
            held = self.left_traffic()
            if not held:
                continue
            try:
                async with transaction(self._writer) as conn:
                    await routes.hold(conn, held, utcnow() + timedelta(seconds=HOLD))
            except Exception:
                log.exception("could not hold draining routes with requests open")

    async def shutdown(self) -> None:
        self._stopped.set()

    def in_flight(self) -> dict[str, int]:
        return {k: v for k, v in self.open.items() if v}

    async def _read(self, name: str) -> _Known:
        known = self._known.get(name)
        if known is not None and time.monotonic() - known.read_at < FRESH:
            return known
        async with self._lock:  # one read per deployment and period, however many requests wait
            known = self._known.get(name)
            if known is not None and time.monotonic() - known.read_at < FRESH:
                return known
            async with reading(self._engine) as conn:
                dep = await deployments.get(conn, name)
                found = [] if dep is None else await routes.in_traffic(conn, dep.id)
            turn = known.turn if known is not None else itertools.count()
            known = self._known[name] = _Known(dep, found, time.monotonic(), turn)
            if len(self._known) > 10_000:  # names asked for and forgotten: keep the table bounded
                self._known.pop(next(iter(self._known)))
            return known

    async def target(self, name: str, who: Principal | None) -> tuple[DeploymentRecord, list[RouteRecord]]:
        """The deployment and its routes in traffic, the next one's turn first.  `who` None: the
        caller gave no key (only a public deployment answers, else 401).  404 for a deployment
        the caller may not see (as for any deployment route)."""
        if who is None and not NAME.match(name):
            raise _no_key()
        if not NAME.match(name):  # no such deployment can exist: no read, nothing remembered
            raise NotFound(f"no deployment {name[:63]!r}", {"field": "deployment"})
        known = await self._read(name)
        dep = known.deployment
        if who is None and (dep is None or not dep.public):
            raise _no_key()  # told nothing of a deployment, not even whether it exists
        visible = dep is not None and (
            dep.public or who is None or who.is_admin or dep.project in who.projects
        )
        if dep is None or not visible or dep.status is DeploymentStatus.DESTROYED:
            raise NotFound(f"no deployment {name!r}", {"field": "deployment"})
        found = known.routes
        if not found:
            return dep, []
        start = next(known.turn) % len(found)
        return dep, found[start:] + found[:start]

    def opened(self, route_id: str) -> Opened:
        """A request open on the route from now until `Opened.close()` (idempotent)."""
        self.open[route_id] += 1
        return Opened(self, route_id)


@dataclass(eq=False)
class Opened:
    proxy: Proxy
    route_id: str
    closed: bool = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.proxy.open[self.route_id] -= 1
            if self.proxy.open[self.route_id] <= 0:
                del self.proxy.open[self.route_id]
