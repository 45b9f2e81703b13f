"""How the coordinator finds a handler's targets: the filters its options declare, and the
sessions past their time limit that its own read leaves out."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from corral.domain.judge import PhaseLimits
from corral.domain.records import SessionRecord
from corral.domain.scheduling import KernelMatchType
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.handlers.base import LifecycleHandler, SessionPromotionHandler
from corral.store import sessions
from corral.store.unit import Tx

Handler = LifecycleHandler | SessionPromotionHandler


def _present_kernels(handler: Handler) -> frozenset[KernelStatus] | None:
    """A promotion on ANY kernel status: only sessions having such a kernel (filtered in SQL)."""
    if isinstance(handler, SessionPromotionHandler) and handler.match_type is KernelMatchType.ANY:
        return handler.check_kernel_statuses
    return None


def _absent_kernels(handler: Handler) -> frozenset[KernelStatus] | None:
    """A promotion on NOT_ANY: only sessions with no such kernel (filtered in SQL)."""
    if isinstance(handler, SessionPromotionHandler) and handler.match_type is KernelMatchType.NOT_ANY:
        return handler.check_kernel_statuses
    return None


def filters(handler: Handler) -> dict[str, Any]:
    """What a handler's targets are filtered by, besides their status (one for every read of them)."""
    return {
        "kernel_statuses": handler.target_kernel_statuses or _present_kernels(handler),
        "absent_kernel_statuses": _absent_kernels(handler),
        "terminating_requested": handler.termination_requested,
        "lost_agent_only": handler.lost_agent_only,
        "failed_kernel_only": handler.failed_kernel_only,
        "healthy_only": handler.healthy_only,
    }


def may_have_targets(handler: Handler, present: set[tuple[SessionStatus, bool]]) -> bool:
    """Whether any live session has a status, and a termination request or none, the handler
    targets (`present`: those of the group's live sessions)."""
    wanted = handler.termination_requested
    requested = (True, False) if wanted is None else (wanted,)
    return any((s, r) in present for s in handler.target_session_statuses for r in requested)


async def target_ids(
    conn: Tx, resource_group: str, handler: Handler, limit: int = 5000
) -> list[tuple[str, SessionStatus]]:
    """The handler's targets as (id, status), for a handler outside a queue window."""
    statuses = handler.target_session_statuses
    return await sessions.target_ids(conn, resource_group, statuses, **filters(handler), limit=limit)


async def overdue(
    conn: Tx,
    resource_group: str,
    handler: Handler,
    limits: PhaseLimits,
    targets: Sequence[SessionRecord],
    now: datetime,
    timed: bool = True,
) -> list[SessionRecord]:
    """Past their time limit but outside the handler's queue window, or not read because they
    wait on a live agent: judged all the same."""
    if isinstance(handler, SessionPromotionHandler):
        return []
    if handler.queue_window:
        statuses = handler.target_session_statuses
    else:  # time limits are judged in seconds: a cycle woken by a report need not look again
        statuses = handler.lost_agent_only if timed else frozenset()
    seen = {s.id for s in targets}
    found: list[SessionRecord] = []
    for status in statuses:
        limit = limits.timeouts.get(status)
        if limit is None:
            continue
        found += await sessions.for_handler(
            conn,
            resource_group,
            {status},
            terminating_requested=handler.termination_requested,
            with_kernels=False,
            changed_before=now - limit,
        )
    return [s for s in found if s.id not in seen]
