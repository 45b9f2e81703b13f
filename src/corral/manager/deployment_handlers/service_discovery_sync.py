"""ServiceDiscoverySync: HEALTHY routes with an address, not draining, are put in traffic (what the
proxy and GET /deployments/{name}/routes list).  It moves no status; routes leave traffic with the
move that makes them not HEALTHY, or when they start draining."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.deployment_records import RouteRecord
from corral.domain.deployment_status import Outcome, OutcomeTransitions, RouteStatus
from corral.manager.deployment_handlers.base import Context, Reported, RouteHandler
from corral.store import routes

R = RouteStatus


class ServiceDiscoverySync(RouteHandler):
    name = "ServiceDiscoverySync"
    target_statuses = frozenset({R.HEALTHY})

    @classmethod
    def status_transitions(cls) -> OutcomeTransitions:
        return OutcomeTransitions()

    async def execute(self, ctx: Context, targets: Sequence[RouteRecord]) -> dict[str, Reported]:
        out: dict[str, Reported] = {}
        for route in targets:
            if route.in_traffic or route.draining_since is not None or route.address is None:
                continue
            project = ctx.deployments[route.deployment_id].project
            if await routes.set_traffic(ctx.conn, route, project, True, "HEALTHY", ctx.now):
                out[route.id] = Reported(Outcome.SUCCESS, f"in traffic at {route.address}")
        return out
