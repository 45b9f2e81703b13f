"""RunningRoute: DEGRADED, HEALTHY, UNHEALTHY, FAILED_TO_START -> TERMINATING when the replica's
session has ended (the route is of no use), and every FAILED_TO_START route (its session is asked
to stop, if it still runs)."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.deployment_records import RouteRecord
from corral.domain.deployment_status import Outcome, OutcomeTransitions, RouteStatus
from corral.domain.status import TERMINAL_SESSION
from corral.manager.deployment_handlers.base import Context, Reported, RouteHandler
from corral.store import deployments

R = RouteStatus


class RunningRoute(RouteHandler):
    name = "RunningRoute"
    target_statuses = frozenset({R.DEGRADED, R.HEALTHY, R.UNHEALTHY, R.FAILED_TO_START})

    @classmethod
    def status_transitions(cls) -> OutcomeTransitions:
        return OutcomeTransitions(failure=R.TERMINATING)

    async def execute(self, ctx: Context, targets: Sequence[RouteRecord]) -> dict[str, Reported]:
        out: dict[str, Reported] = {}
        for route in targets:
            session = ctx.sessions.get(route.session_id)
            if session is None or session.status in TERMINAL_SESSION:
                status = "gone" if session is None else f"{session.status} ({session.cause or 'no cause'})"
                out[route.id] = Reported(Outcome.FAILURE, f"the replica's session ended: {status}")
                if route.draining_since is None:
                    await deployments.replica_ended(ctx.conn, route.deployment_id, ctx.now)
            elif route.status is R.FAILED_TO_START:
                out[route.id] = Reported(Outcome.FAILURE, "failed to start: replaced")
        return out
