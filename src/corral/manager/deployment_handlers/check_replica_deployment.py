"""CheckReplicaDeployment: READY -> SCALING when the routes no longer match what is asked: another
`replicas`, or a new revision to roll out."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.deployment_records import DeploymentRecord
from corral.domain.deployment_status import DeploymentStatus, Outcome, OutcomeTransitions
from corral.manager.deployment_handlers import scaling
from corral.manager.deployment_handlers.base import Context, DeploymentHandler, Reported

D = DeploymentStatus


class CheckReplicaDeployment(DeploymentHandler):
    name = "CheckReplicaDeployment"
    target_statuses = frozenset({D.READY})

    @classmethod
    def status_transitions(cls) -> OutcomeTransitions:
        return OutcomeTransitions(success=D.SCALING)

    async def execute(self, ctx: Context, targets: Sequence[DeploymentRecord]) -> dict[str, Reported]:
        out: dict[str, Reported] = {}
        for dep in targets:
            live = [v for v in scaling.views(ctx, dep) if v.status != "TERMINATED" and not v.draining]
            current = sum(v.revision == dep.revision for v in live)
            if any(v.revision != dep.revision for v in live):
                out[dep.id] = Reported(Outcome.SUCCESS, f"rolling out revision {dep.revision}")
            elif current != dep.replicas:
                out[dep.id] = Reported(
                    Outcome.SUCCESS, f"scaling from {current} to {dep.replicas} replica(s)"
                )
        return out
