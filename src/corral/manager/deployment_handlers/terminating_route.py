"""TerminatingRoute: TERMINATING -> TERMINATED once the replica's session has ended; until then
its session is asked to stop (a termination request, acted on by the session handlers)."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.deployment_records import RouteRecord
from corral.domain.deployment_status import Outcome, OutcomeTransitions, RouteStatus
from corral.domain.status import TERMINAL_SESSION
from corral.manager import replicas
from corral.manager.deployment_handlers.base import Context, Reported, RouteHandler

R = RouteStatus


class TerminatingRoute(RouteHandler):
    name = "TerminatingRoute"
    target_statuses = frozenset({R.TERMINATING})

    @classmethod
    def status_transitions(cls) -> OutcomeTransitions:
        return OutcomeTransitions(success=R.TERMINATED)

    async def execute(self, ctx: Context, targets: Sequence[RouteRecord]) -> dict[str, Reported]:
        out: dict[str, Reported] = {}
        for route in targets:
            session = ctx.sessions.get(route.session_id)
            if session is None or session.status in TERMINAL_SESSION:
                out[route.id] = Reported(Outcome.SUCCESS, "its replica's session ended")
            elif session.termination_reason is None:
                await replicas.stop(
                    ctx.conn, ctx.deployments[route.deployment_id], route, "route terminating", ctx.now
                )
        return out
