"""RouteEviction: UNHEALTHY -> TERMINATING.  An unhealthy route is out of traffic already; the
deployment starts a replacement as soon as it no longer counts (domain/rollout)."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.deployment_records import RouteRecord
from corral.domain.deployment_status import Outcome, OutcomeTransitions, RouteStatus
from corral.manager.deployment_handlers.base import Context, Reported, RouteHandler

R = RouteStatus


class RouteEviction(RouteHandler):
    name = "RouteEviction"
    target_statuses = frozenset({R.UNHEALTHY})

    @classmethod
    def status_transitions(cls) -> OutcomeTransitions:
        return OutcomeTransitions(success=R.TERMINATING)

    async def execute(self, ctx: Context, targets: Sequence[RouteRecord]) -> dict[str, Reported]:
        return {
            r.id: Reported(Outcome.SUCCESS, f"evicted: unhealthy ({r.health.detail or 'no detail'})")
            for r in targets
        }
