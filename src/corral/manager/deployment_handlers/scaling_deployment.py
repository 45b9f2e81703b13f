"""ScalingDeployment: SCALING -> READY once `replicas` routes of the current revision are HEALTHY and
in traffic and no other route is left; else FAILURE (it stays SCALING), having carried out the
plan: replicas started, routes drained, a rollout stopped at its progress deadline."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.deployment_records import DeploymentRecord
from corral.domain.deployment_status import DeploymentStatus, Outcome, OutcomeTransitions
from corral.manager.deployment_handlers import scaling
from corral.manager.deployment_handlers.base import Context, DeploymentHandler, Reported

D = DeploymentStatus


class ScalingDeployment(DeploymentHandler):
    name = "ScalingDeployment"
    target_statuses = frozenset({D.SCALING})

    @classmethod
    def status_transitions(cls) -> OutcomeTransitions:
        return OutcomeTransitions(success=D.READY)

    async def execute(self, ctx: Context, targets: Sequence[DeploymentRecord]) -> dict[str, Reported]:
        out: dict[str, Reported] = {}
        for dep in targets:
            ready, starting, other = scaling.serving(ctx, dep)
            if ready == dep.replicas and starting == other == 0:
                out[dep.id] = Reported(Outcome.SUCCESS, f"{ready}/{dep.replicas} ready", {"message": ""})
                continue
            stalled = dep.rollout_stalled
            old = any(v.revision != dep.revision for v in scaling.views(ctx, dep) if not v.draining)
            started = dep.rollout_started_at
            if old and not stalled and started is not None:
                if (ctx.now - started).total_seconds() > dep.rollout.progress_deadline:
                    await scaling.stall(ctx, dep)
                    stalled = True
            added = await scaling.carry_out(ctx, dep, scaling.planned(ctx, dep, stalled))
            words = f"{ready}/{dep.replicas} ready, {starting + added} starting, {other} leaving or old"
            if stalled:
                out[dep.id] = Reported(Outcome.FAILURE, words + " (rollout stopped)")
                continue  # its message says why (scaling.stall)
            if dep.next_replica_at is not None and ctx.now < dep.next_replica_at:
                words += f" (next replica at {dep.next_replica_at:%H:%M:%S}: the last ones ended)"
            # What GET /deployments shows (`message`): written only when it changes.
            out[dep.id] = Reported(Outcome.FAILURE, words, {"message": words} if words != dep.message else {})
        return out
