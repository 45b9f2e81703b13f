"""The two handler kinds of the coordinator (seed: sokovan-status-transitions)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from corral.domain.cause import Cause
from corral.domain.final import FinalVerdict
from corral.domain.judge import PhaseLimits
from corral.domain.placement import Placement
from corral.domain.records import SessionRecord
from corral.domain.scheduling import HandlerResult, KernelMatchType, StatusTransitions, kernels_match
from corral.domain.status import KernelStatus, SessionStatus
from corral.domain.verdicts import Step as Step  # where handlers name their steps from
from corral.store.unit import Tx


@dataclass(frozen=True)
class HandlerContext:
    """What a handler may use: the cycle's transaction, its clock and its group."""

    conn: Tx
    """The transaction the coordinator applies the result in."""
    now: datetime
    """The cycle's clock."""
    resource_group: str
    """The group this loop schedules."""
    limits: PhaseLimits
    """Per-status limits (for handlers that need them)."""
    more: Callable[[int], Awaitable[list[SessionRecord]]] | None = None
    """The next part of a paged queue window: the number asked for (`queue_page` if none), within
    the window; empty once the window is read."""
    preemption: Mapping[str, Any] = field(default_factory=dict)
    """The group's stored preemption settings, as the cycle read them at its start."""
    before: Any = None
    """What the handler's `read_before_targets` returned."""


@dataclass
class LifecycleResult(HandlerResult):
    """HandlerResult plus what some successes carry into the same transaction."""

    placements: dict[str, Placement] | None = None
    """ScheduleNewSessions: where each placed session's kernels go."""
    finals: dict[str, FinalVerdict] | None = None
    """Handlers that end sessions: the verdict per session."""
    requested: int = 0
    """Termination requests it wrote (preemption): the next cycle, run at once, applies them."""
    moved: dict[str, SessionStatus] | None = None
    """Targets the handler itself moved first (a resumed session is PENDING now, not SUSPENDED)."""


class HandlerOptions:
    """What the coordinator reads from every handler, of either kind, to find its targets."""

    name: ClassVar[str]
    target_session_statuses: ClassVar[frozenset[SessionStatus]]
    target_kernel_statuses: ClassVar[frozenset[KernelStatus] | None] = None
    # None: any session; True: only with a termination request; False: only without one.
    termination_requested: ClassVar[bool | None] = False
    # Only this many targets from the head of the queue per cycle (None: all of them).
    queue_window: ClassVar[int | None] = None
    # Read the window this many at a time: the first page is the targets, the handler asks for the
    # next (`HandlerContext.more`) only while it can use more (placement: while room is left).
    queue_page: ClassVar[int | None] = None
    # Whether targets come with their kernels (a long queue is cheaper to read without).
    with_kernels: ClassVar[bool] = True
    # Whether its successes are orders agents pull (so their long polls are woken at once).
    hands_orders: ClassVar[bool] = False
    # The status in which the sessions it hands over wait for their agents (prepare orders):
    # nothing more can happen to them until a report, which wakes a cycle of its own, so the
    # cycle's later handlers do not look for them and no cycle runs again at once for them.  Its
    # other moves (a session given up, back to the queue) are not waiting for anyone.
    awaits_agents: ClassVar[SessionStatus | None] = None
    # A handler that only exists to bound a status: it is given only sessions past that status's
    # time limit (and is skipped when there is no limit), so it costs nothing in a busy cycle.
    expiry_only: ClassVar[bool] = False
    # Target statuses whose sessions only matter once an agent of theirs is lost (or past their
    # time limit, found by their own query): the rest are not read each cycle however many wait.
    lost_agent_only: ClassVar[frozenset[SessionStatus]] = frozenset()
    # Target statuses whose sessions are read only once a kernel of theirs has failed (FAILED_KERNEL,
    # or a non-zero exit): the handler acts on nothing else there.  A filter before `matches`,
    # which still decides.
    failed_kernel_only: ClassVar[frozenset[SessionStatus]] = frozenset()
    # Only sessions none of whose kernels has failed (failed_kernel_only's filter negated) or is on
    # an agent not ALIVE (what StartSessions' hand-over fails): a read's filter; `matches` checks
    # the first (it knows no agent).
    healthy_only: ClassVar[bool] = False
    # Placement: it can only do more than last time once room was made or the queue changed (see
    # Coordinator.run_cycle), so a cycle woken by an agent's progress report skips it.
    waits_for_room: ClassVar[bool] = False
    # It may free capacity without moving a session (kernels stopped, declared ended).
    frees_room: ClassVar[bool] = False


class LifecycleHandler(HandlerOptions, ABC):
    """Acts on sessions in its target statuses and reports outcomes; never changes a status."""

    # The cause recorded when an expired/give-up move ends the session.
    failure_cause: ClassVar[Cause | None] = None
    # Statuses its successes go on to, in order, in the same update (README: "Moves that follow at
    # once are made at once").
    then: ClassVar[tuple[Step, ...]] = ()

    @classmethod
    @abstractmethod
    def status_transitions(cls) -> StatusTransitions: ...

    @abstractmethod
    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult: ...

    async def read_before_targets(self, conn: Tx, resource_group: str, now: datetime) -> Any:
        """What `execute` must see as it was before its targets were read (`ctx.before`).  On a
        backend where each statement sees the newest commits, a read after the targets may see a
        change they missed (a session made since): read first, the targets show it too."""
        return None


class SessionPromotionHandler(HandlerOptions, ABC):
    """Promotes a session when its kernels meet a condition; kernels are not changed."""

    check_kernel_statuses: ClassVar[frozenset[KernelStatus]]
    match_type: ClassVar[KernelMatchType]
    termination_requested: ClassVar[bool | None] = None
    # Statuses passed before the success status, in order, in the same update; a session already
    # in one of them goes on from there.
    through: ClassVar[tuple[Step, ...]] = ()
    # How its final move (to the success status) is recorded, when under another handler's rule
    # (None: under its own name).
    last_step: ClassVar[Step | None] = None

    @classmethod
    @abstractmethod
    def success_session_status(cls) -> SessionStatus: ...

    def matches(self, session: SessionRecord) -> bool:
        if self.healthy_only and any(k.failed for k in session.kernels):
            return False
        return kernels_match((k.status for k in session.kernels), self.check_kernel_statuses, self.match_type)

    def verdict(self, session: SessionRecord) -> FinalVerdict | None:
        """For promotions that end a session: how it ends (overrides the success status)."""
        return None

    @property
    def decided_by_kernel_statuses(self) -> bool:
        """Whether the targets' read alone decides: a match on ANY or NOT_ANY kernel status is a
        filter the read applies, and, with the base class's `matches` and no verdict, every target
        read moves to the success status.  Its targets need no more than their ids and statuses."""
        cls = type(self)
        return (
            self.match_type in (KernelMatchType.ANY, KernelMatchType.NOT_ANY)
            and cls.matches is SessionPromotionHandler.matches
            and cls.verdict is SessionPromotionHandler.verdict
            and self.target_kernel_statuses is None
            and not self.lost_agent_only
            and not self.failed_kernel_only
            and not self.expiry_only
            and self.queue_window is None
        )
