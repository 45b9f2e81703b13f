"""ReconcileDeployment: READY -> SCALING (its FAILURE) when a route the deployment counts on is not
serving: not HEALTHY, out of traffic, or its replica gone; the deployment is not READY again until
it is replaced or recovers."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.deployment_records import DeploymentRecord
from corral.domain.deployment_status import DeploymentStatus, Outcome, OutcomeTransitions
from corral.manager.deployment_handlers import scaling
from corral.manager.deployment_handlers.base import Context, DeploymentHandler, Reported

D = DeploymentStatus


class ReconcileDeployment(DeploymentHandler):
    name = "ReconcileDeployment"
    target_statuses = frozenset({D.READY})

    @classmethod
    def status_transitions(cls) -> OutcomeTransitions:
        return OutcomeTransitions(failure=D.SCALING)

    async def execute(self, ctx: Context, targets: Sequence[DeploymentRecord]) -> dict[str, Reported]:
        out: dict[str, Reported] = {}
        for dep in targets:
            ready, starting, other = scaling.serving(ctx, dep)
            if ready < dep.replicas or starting or other:
                out[dep.id] = Reported(Outcome.FAILURE, f"{ready}/{dep.replicas} serving: reconciling")
        return out
