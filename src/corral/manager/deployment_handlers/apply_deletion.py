"""ApplyDeletion: a deletion request turns a PENDING, SCALING or READY deployment DESTROYING (the
seed has no row for deleting; DESIGN §7's completion)."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.deployment_records import DeploymentRecord
from corral.domain.deployment_status import LIVE_DEPLOYMENT, DeploymentStatus, Outcome, OutcomeTransitions
from corral.manager.deployment_handlers.base import Context, DeploymentHandler, Reported

D = DeploymentStatus


class ApplyDeletion(DeploymentHandler):
    name = "ApplyDeletion"
    target_statuses = LIVE_DEPLOYMENT

    @classmethod
    def status_transitions(cls) -> OutcomeTransitions:
        return OutcomeTransitions(success=D.DESTROYING)

    async def execute(self, ctx: Context, targets: Sequence[DeploymentRecord]) -> dict[str, Reported]:
        return {
            d.id: Reported(Outcome.SUCCESS, "deletion requested: draining every route")
            for d in targets
            if d.delete_requested_at is not None
        }
