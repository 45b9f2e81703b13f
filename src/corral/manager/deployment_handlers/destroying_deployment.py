"""DestroyingDeployment: DESTROYING -> DESTROYED once every route is TERMINATED, having drained them
(SUCCESS); or, when some are still not ended `DESTROY_WAIT` past their drain, DESTROYED regardless
(FAILURE, naming them: their sessions stay asked to stop, as any session's)."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.deployment_records import DeploymentRecord
from corral.domain.deployment_status import DeploymentStatus, Outcome, OutcomeTransitions, RouteStatus
from corral.manager.deployment_handlers import scaling
from corral.manager.deployment_handlers.base import Context, DeploymentHandler, Reported

D = DeploymentStatus
DESTROY_WAIT = 600.0


class DestroyingDeployment(DeploymentHandler):
    name = "DestroyingDeployment"
    target_statuses = frozenset({D.DESTROYING})

    @classmethod
    def status_transitions(cls) -> OutcomeTransitions:
        return OutcomeTransitions(success=D.DESTROYED, failure=D.DESTROYED)

    async def execute(self, ctx: Context, targets: Sequence[DeploymentRecord]) -> dict[str, Reported]:
        out: dict[str, Reported] = {}
        for dep in targets:
            left = [r for r in ctx.routes.get(dep.id, ()) if r.status is not RouteStatus.TERMINATED]
            if not left:
                out[dep.id] = Reported(Outcome.SUCCESS, "every route ended")
                continue
            await scaling.drain_all(ctx, dep, left, "deployment deleted")
            waited = (ctx.now - dep.status_changed_at).total_seconds()
            if waited > dep.rollout.drain_timeout + DESTROY_WAIT:
                names = ", ".join(r.session_id for r in left[:5])
                out[dep.id] = Reported(
                    Outcome.FAILURE, f"{len(left)} route(s) not ended after {waited:.0f} s: {names}"
                )
        return out
