"""ScheduleNewSessions: PENDING -> SCHEDULED, placing whole gangs in queue order."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.cause import Cause
from corral.domain.placement import AgentSnapshot, apply_placement, place_gang
from corral.domain.queue import QueueEntry, queue_order
from corral.domain.scheduling import Skip, StatusTransitions, TransitionStatus
from corral.domain.status import AgentStatus, KernelStatus, SessionStatus
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult
from corral.store import agents
from corral.store.records import AgentRecord, SessionRecord


class ScheduleNewSessions(LifecycleHandler):
    name = "ScheduleNewSessions"
    target_session_statuses = frozenset({SessionStatus.PENDING})
    target_kernel_statuses = frozenset({KernelStatus.PENDING})
    failure_cause = Cause.SCHEDULER_TIMEOUT
    # Placement looks at the head of the queue; sessions further back are reached as it drains.
    queue_window = 512
    with_kernels = False

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return StatusTransitions(
            success=TransitionStatus(SessionStatus.SCHEDULED, KernelStatus.SCHEDULED),
            need_retry=None,
            expired=TransitionStatus(SessionStatus.CANCELLED, KernelStatus.CANCELLED),
            give_up=TransitionStatus(SessionStatus.CANCELLED, KernelStatus.CANCELLED),
        )

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        result = LifecycleResult(placements={})
        assert result.placements is not None
        await agents.lock_group(ctx.conn, ctx.resource_group)
        registered = await agents.list_agents(ctx.conn, ctx.resource_group)
        snapshot = [
            AgentSnapshot(a.id, a.capacity - a.used) for a in registered if a.status is AgentStatus.ALIVE
        ]
        by_id = {s.id: s for s in targets}
        entries = [QueueEntry(s.id, s.priority, s.chain_submitted_at, s.retry_after) for s in targets]
        ready = queue_order(entries, ctx.now)
        ready_ids = {e.session_id for e in ready}
        for s in targets:
            if s.id not in ready_ids:
                result.skipped.append(Skip(s.id, "waiting for its retry time"))
        # Backfill: a session that does not fit does not block smaller ones behind it (see README).
        for entry in ready:
            s = by_id[entry.session_id]
            needs = [s.resources] * s.cluster_size  # every kernel of a session asks for the same slots
            note = ""
            placement = None
            if s.avoid_agent:
                # Soft anti-affinity: any other agent first; the avoided one rather than waiting.
                placement = place_gang(needs, snapshot, s.spec.placement, avoid=frozenset({s.avoid_agent}))
                if placement is None:
                    note = f" (anti-affinity: no agent but {s.avoid_agent} had room)"
            if placement is None:
                placement = place_gang(needs, snapshot, s.spec.placement)
            if placement is None:
                result.skipped.append(Skip(s.id, _why_waiting(s, registered, ctx.resource_group)))
                continue
            snapshot = apply_placement(snapshot, needs, placement)
            result.placements[s.id] = placement
            result.success(s.id, "placed on " + ", ".join(placement.agent_ids) + note)
        return result


def _why_waiting(s: SessionRecord, registered: Sequence[AgentRecord], group: str) -> str:
    if not registered:
        return f"unschedulable: no agent has joined resource group {group!r} yet"
    if not any(s.resources.fits_in(a.capacity) for a in registered):
        return "unschedulable: each kernel needs more than any agent of the group has"
    return "no agent has room for it now"
