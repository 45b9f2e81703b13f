"""TerminateSessions: hands kill orders to agents; kernels end only when their agent confirms."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.scheduling import StatusTransitions, TransitionStatus
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult
from corral.store import kernels
from corral.store.records import SessionRecord

# No process exists yet for a kernel in these statuses: it is ended here, nothing to kill.
_NOT_STARTED = frozenset(
    {
        KernelStatus.PENDING,
        KernelStatus.SCHEDULED,
        KernelStatus.PREPARING,
        KernelStatus.PULLING,
        KernelStatus.PREPARED,
    }
)
_RUNNING = frozenset({KernelStatus.CREATING, KernelStatus.RUNNING})


class TerminateSessions(LifecycleHandler):
    name = "TerminateSessions"
    hands_orders = True
    target_session_statuses = frozenset({SessionStatus.TERMINATING})
    target_kernel_statuses = _NOT_STARTED | _RUNNING
    termination_requested = None

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        # success=None: handing over kill orders changes no status (the seed's own code does this).
        return StatusTransitions(
            success=None,
            need_retry=None,
            expired=TransitionStatus(SessionStatus.ERROR, KernelStatus.ERROR),
            give_up=TransitionStatus(SessionStatus.ERROR, KernelStatus.ERROR),
        )

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        result = LifecycleResult()
        never_started: list[str] = []
        to_kill: list[str] = []
        for s in targets:
            idle = [k.id for k in s.kernels if k.status in _NOT_STARTED]
            live = [k.id for k in s.kernels if k.status in _RUNNING]
            never_started += idle
            to_kill += live
            parts = []
            if live:
                parts.append(f"kill ordered for {len(live)} kernel(s)")
            if idle:
                parts.append(f"{len(idle)} kernel(s) never started")
            result.success(s.id, "; ".join(parts))
        await kernels.end_kernels(
            ctx.conn, never_started, KernelStatus.CANCELLED, ctx.now, termination_message="never started"
        )
        await kernels.order_kill(ctx.conn, to_kill)
        await kernels.move_to_terminating(ctx.conn, to_kill, ctx.now)
        return result
