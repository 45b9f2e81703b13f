"""CheckPendingDeployment: PENDING -> SCALING (a new deployment starts its replicas)."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.deployment_records import DeploymentRecord
from corral.domain.deployment_status import DeploymentStatus, Outcome, OutcomeTransitions
from corral.manager.deployment_handlers.base import Context, DeploymentHandler, Reported

D = DeploymentStatus


class CheckPendingDeployment(DeploymentHandler):
    name = "CheckPendingDeployment"
    target_statuses = frozenset({D.PENDING})

    @classmethod
    def status_transitions(cls) -> OutcomeTransitions:
        return OutcomeTransitions(success=D.SCALING)

    async def execute(self, ctx: Context, targets: Sequence[DeploymentRecord]) -> dict[str, Reported]:
        return {d.id: Reported(Outcome.SUCCESS, f"scaling to {d.replicas} replica(s)") for d in targets}
