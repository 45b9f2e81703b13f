"""TerminateSessions: hands kill orders to agents; kernels end only when their agent confirms.

TERMINATING is bounded: past `terminating_timeout` the kill is escalated to SIGKILL at once; if the
agent still has not confirmed after a further fence period, the agent is fenced (new epoch): it
must kill everything it runs before it may register again, and if it stays silent the fence rule
declares its kernels gone.  Capacity is released only when a kernel is confirmed or declared gone.
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.cause import TerminationReason
from corral.domain.preemption import group_settings
from corral.domain.records import SessionRecord
from corral.domain.rendezvous import start_at_once
from corral.domain.scheduling import StatusTransitions
from corral.domain.status import KERNEL_HANDED, KERNEL_NOT_STARTED, KernelStatus, SessionStatus
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult
from corral.store import agents, kernels
from corral.store.unit import Tx

_RUNNING = frozenset({KernelStatus.CREATING, KernelStatus.RUNNING})


class TerminateSessions(LifecycleHandler):
    name = "TerminateSessions"
    frees_room = True
    hands_orders = True
    target_session_statuses = frozenset({SessionStatus.TERMINATING})
    # Sessions whose kernels have all ended are PromoteToTerminated's; the rest are ours, those
    # with kernels already told to stop included (their time in TERMINATING is bounded here).
    target_kernel_statuses = (
        KERNEL_NOT_STARTED | _RUNNING | {KernelStatus.TERMINATING, KernelStatus.SUSPENDED}
    )
    termination_requested = None

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        # success=None: handing over kill orders changes no status (the seed's own code does this);
        # expiry only records that the session waits (the escalation is this handler's own success).
        return StatusTransitions(success=None, need_retry=None, expired=None, give_up=None)

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        result = LifecycleResult()
        never_started: list[str] = []
        to_kill: list[str] = []
        preempted: list[str] = []
        to_force: list[str] = []
        to_fence: set[str] = set()
        limit = ctx.limits.timeouts.get(SessionStatus.TERMINATING)
        # Handed to an agent that went silent, with "prepare and start": it may run, so it ends when
        # the fence declares it gone, not here (its capacity stays held until then).
        silent = await _silent_handed(ctx.conn, targets)
        for s in targets:
            # No process yet: ended here, nothing to kill.
            idle = [k.id for k in s.kernels if k.status in KERNEL_NOT_STARTED and k.id not in silent]
            if s.termination_reason != TerminationReason.SUSPENDED:
                # A suspended session cancelled (or past its deadline): its kernels have no process.
                idle += [k.id for k in s.kernels if k.status is KernelStatus.SUSPENDED]
            live = [k.id for k in s.kernels if k.status in _RUNNING]
            waited = ctx.now - s.status_changed_at
            stuck = [k for k in s.kernels if k.status is KernelStatus.TERMINATING]
            parts = []
            if live:
                parts.append(f"kill ordered for {len(live)} kernel(s)")
            if idle:
                parts.append(f"{len(idle)} kernel(s) never started")
            if limit is not None and waited > limit:
                force = [k.id for k in stuck if not k.kill_forced]
                if force:
                    parts.append(
                        f"still terminating after {waited}: SIGKILL ordered for {len(force)} kernel(s)"
                    )
                to_force += force
                fence = {
                    k.agent_id
                    for k in stuck
                    if k.kill_forced and k.agent_id and waited > limit + ctx.limits.declare_gone_after
                }
                if fence - to_fence:
                    parts.append(
                        "no confirmation of the SIGKILL: agent(s) fenced: " + ", ".join(sorted(fence))
                    )
                to_fence |= fence
            never_started += idle
            if s.termination_reason in (TerminationReason.PREEMPTED, TerminationReason.SUSPENDED):
                preempted += live
            else:
                to_kill += live
            if parts:
                result.success(s.id, "; ".join(parts))
        await kernels.end_kernels(
            ctx.conn, never_started, KernelStatus.CANCELLED, ctx.now, termination_message="never started"
        )
        await kernels.order_kill(ctx.conn, to_kill)
        if preempted:
            # The resource group's grace reaches the kill, whatever the agent's own default.
            settings = group_settings(ctx.preemption)
            await kernels.order_kill(ctx.conn, preempted, settings.grace_period)
            to_kill += preempted
        await kernels.move_to_terminating(ctx.conn, to_kill, ctx.now)
        await kernels.order_force_kill(ctx.conn, to_force)
        await agents.fence(ctx.conn, sorted(to_fence), ctx.now)
        return result


async def _silent_handed(conn: Tx, targets: Sequence[SessionRecord]) -> set[str]:
    """Kernels handed with a "prepare and start" order to an agent that is not alive."""
    handed = [
        k
        for s in targets
        if start_at_once([k.agent_id for k in s.kernels], s.kernels[0].master_port if s.kernels else None)
        for k in s.kernels
        if k.status in KERNEL_HANDED
    ]
    if not handed:
        return set()  # the common case: no agent to ask about
    alive = await agents.alive_ids(conn)
    return {k.id for k in handed if k.agent_id not in alive}
