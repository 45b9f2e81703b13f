"""ProvisioningRoute: PROVISIONING -> DEGRADED at the first good probe; -> FAILED_TO_START when the
replica's session ends first, or no probe succeeds within the start limit from its start."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.deployment_records import RouteRecord
from corral.domain.deployment_status import Outcome, OutcomeTransitions, RouteStatus
from corral.domain.route_health import provisioning
from corral.domain.status import TERMINAL_SESSION
from corral.manager.deployment_handlers.base import Context, Reported, RouteHandler
from corral.store import deployments

R = RouteStatus


class ProvisioningRoute(RouteHandler):
    name = "ProvisioningRoute"
    target_statuses = frozenset({R.PROVISIONING})

    @classmethod
    def status_transitions(cls) -> OutcomeTransitions:
        return OutcomeTransitions(success=R.DEGRADED, failure=R.FAILED_TO_START)

    async def execute(self, ctx: Context, targets: Sequence[RouteRecord]) -> dict[str, Reported]:
        out: dict[str, Reported] = {}
        for route in targets:
            if route.draining_since is not None:
                continue  # DrainRoute's
            check = ctx.revisions[(route.deployment_id, route.revision)].health
            session = ctx.sessions.get(route.session_id)
            ended = session is None or session.status in TERMINAL_SESSION
            got = provisioning(route.health, route.started_at, ended, ctx.now, check)
            if got is not None:
                out[route.id] = Reported(*got)
                if got[0] is Outcome.FAILURE:
                    await deployments.replica_ended(ctx.conn, route.deployment_id, ctx.now)
        return out
