"""DrainRoute: a route taken out of service (scale-down, rollout, deletion) is out of traffic from
its drain's start; PROVISIONING, DEGRADED, HEALTHY, UNHEALTHY -> TERMINATING once its in-flight
requests had their time: at once when it never served (PROVISIONING), else when no manager's
proxy has one open on it (this one's counted here, the others' by the hold they renew on the
route while they have: services/serve) after DRAIN_SETTLE (for proxies to see it left), or at
`drain_timeout` whatever is open."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.deployment_records import RouteRecord
from corral.domain.deployment_status import Outcome, OutcomeTransitions, RouteStatus
from corral.manager.deployment_handlers.base import Context, Reported, RouteHandler

R = RouteStatus

DRAIN_SETTLE = 1.5
"""Seconds a drained route is kept at least: every proxy's view of the routes in traffic is at
most a second old (api/serve), so none sends it a new request after this."""


class DrainRoute(RouteHandler):
    name = "DrainRoute"
    target_statuses = frozenset({R.PROVISIONING, R.DEGRADED, R.HEALTHY, R.UNHEALTHY})

    @classmethod
    def status_transitions(cls) -> OutcomeTransitions:
        return OutcomeTransitions(success=R.TERMINATING)

    async def execute(self, ctx: Context, targets: Sequence[RouteRecord]) -> dict[str, Reported]:
        out: dict[str, Reported] = {}
        for route in targets:
            if route.draining_since is None:
                continue
            waited = (ctx.now - route.draining_since).total_seconds()
            timeout = ctx.deployments[route.deployment_id].rollout.drain_timeout
            open_here = ctx.in_flight.get(route.id, 0)
            if route.status is R.PROVISIONING:
                out[route.id] = Reported(Outcome.SUCCESS, "drained: it never served")
            elif waited >= timeout:
                out[route.id] = Reported(
                    Outcome.SUCCESS, f"drained: {timeout:g} s passed, {open_here} request(s) open"
                )
            elif route.held_until is not None and route.held_until > ctx.now:
                continue  # another manager still has requests open on it (services/serve)
            elif open_here == 0 and waited >= min(DRAIN_SETTLE, timeout):
                out[route.id] = Reported(Outcome.SUCCESS, f"drained: no request open after {waited:.1f} s")
        return out
