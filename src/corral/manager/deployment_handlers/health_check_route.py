"""HealthCheckRoute: HEALTHY, UNHEALTHY, DEGRADED -> HEALTHY after `healthy_threshold` good probes,
UNHEALTHY after `unhealthy_threshold` failed ones, DEGRADED (STALE) when its agent's last report
is older than three intervals."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.deployment_records import RouteRecord
from corral.domain.deployment_status import Outcome, OutcomeTransitions, RouteStatus
from corral.domain.route_health import checked
from corral.manager.deployment_handlers.base import Context, Reported, RouteHandler
from corral.store import deployments

R = RouteStatus


class HealthCheckRoute(RouteHandler):
    name = "HealthCheckRoute"
    target_statuses = frozenset({R.HEALTHY, R.UNHEALTHY, R.DEGRADED})

    @classmethod
    def status_transitions(cls) -> OutcomeTransitions:
        return OutcomeTransitions(success=R.HEALTHY, failure=R.UNHEALTHY, stale=R.DEGRADED)

    async def execute(self, ctx: Context, targets: Sequence[RouteRecord]) -> dict[str, Reported]:
        out: dict[str, Reported] = {}
        for route in targets:
            check = ctx.revisions[(route.deployment_id, route.revision)].health
            got = checked(route.status, route.health, ctx.now, check)
            if got is not None:
                out[route.id] = Reported(*got)
                if got[0] is Outcome.SUCCESS:
                    await deployments.replica_healthy(ctx.conn, route.deployment_id)
        return out
