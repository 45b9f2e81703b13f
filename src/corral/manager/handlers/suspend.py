"""SuspendSessions: a session preempted in suspend mode goes SUSPENDED once every kernel has stopped.

It keeps its id, its place in the queue (its chain's submission time) and its checkpoint directory;
its allocations were released as each kernel stopped. ScheduleNewSessions resumes it. If a kernel
was lost instead of stopped (its agent died meanwhile) the suspension cannot keep the gang whole: the
stopped kernels end too, and the session ends like a preemption in terminate mode.
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.cause import TerminationReason
from corral.domain.records import SessionRecord
from corral.domain.scheduling import Skip, StatusTransitions, TransitionStatus
from corral.domain.status import TERMINAL_KERNEL, KernelStatus, SessionStatus
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult
from corral.store import kernels, sessions


class SuspendSessions(LifecycleHandler):
    name = "SuspendSessions"
    frees_room = True
    target_session_statuses = frozenset({SessionStatus.TERMINATING})
    target_kernel_statuses = frozenset({KernelStatus.SUSPENDED})
    termination_requested = True

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return StatusTransitions(success=TransitionStatus(SessionStatus.SUSPENDED))

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        result = LifecycleResult()
        suspended: list[str] = []
        broken: list[str] = []
        for s in targets:
            statuses = {k.status for k in s.kernels}
            if s.termination_reason != TerminationReason.SUSPENDED or statuses - TERMINAL_KERNEL - {
                KernelStatus.SUSPENDED
            }:
                continue  # not a suspension, or a kernel is still stopping
            if statuses == {KernelStatus.SUSPENDED}:
                suspended.append(s.id)
                result.success(
                    s.id,
                    f"suspended: {len(s.kernels)} kernel(s) stopped and their allocations released; "
                    "it keeps its id and checkpoint directory and resumes at its place in the queue",
                )
            else:
                broken += [k.id for k in s.kernels if k.status is KernelStatus.SUSPENDED]
                result.skipped.append(
                    Skip(s.id, "a kernel was lost while suspending: it ends as a preemption instead")
                )
        await sessions.clear_termination_request(ctx.conn, suspended)
        await kernels.end_kernels(
            ctx.conn,
            broken,
            KernelStatus.ERROR,
            ctx.now,
            killed_by_corral=True,
            termination_message="stopped to be suspended; a peer was lost meanwhile",
        )
        return result
