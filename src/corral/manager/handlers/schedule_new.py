"""ScheduleNewSessions: PENDING -> SCHEDULED, placing whole gangs in queue order; a SUSPENDED session
whose turn has come and that fits is resumed (SUSPENDED -> PENDING -> SCHEDULED in one cycle)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from corral.domain.backfill import Hold, Occupant, head_hold, may_use_held
from corral.domain.capacity import FreeCapacity
from corral.domain.cause import Cause, TerminationReason
from corral.domain.history import HistoryRow
from corral.domain.placement import AgentSnapshot, place_gang
from corral.domain.preemption import (
    PreemptionMode,
    RunningSession,
    candidates,
    choose_victims,
    freed,
    group_settings,
)
from corral.domain.queue import QueueEntry, queue_order
from corral.domain.records import AgentCapacity, Move, RunningRecord, SessionRecord
from corral.domain.resources import CPU, ResourceSlots
from corral.domain.scheduling import Skip, StatusTransitions, TransitionStatus
from corral.domain.status import AgentStatus, KernelStatus, SessionStatus
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult, Step
from corral.manager.handlers.prepare import PrepareSessions
from corral.store import agents, journal, placement_view, preemption, retry_holds, routes, sessions
from corral.store.unit import Tx


class ScheduleNewSessions(LifecycleHandler):
    name = "ScheduleNewSessions"
    waits_for_room = True
    # A session placed is handed its prepare orders in the same transaction, as PrepareSessions
    # would a moment later: its agents (ALIVE, or it would not be placed there) see them at commit.
    hands_orders = True
    awaits_agents = SessionStatus.PREPARING
    then = (
        Step(
            PrepareSessions.name, SessionStatus.PREPARING, PrepareSessions.handed_over, KernelStatus.PREPARING
        ),
    )
    target_session_statuses = frozenset({SessionStatus.PENDING, SessionStatus.SUSPENDED})
    target_kernel_statuses = frozenset({KernelStatus.PENDING, KernelStatus.SUSPENDED})
    failure_cause = Cause.SCHEDULER_TIMEOUT
    # Placement looks at the head of the queue; sessions further back are reached as it drains.
    queue_window = 512
    # A busy cluster has room for a few: reading 512 to place them cost more than the placing, and
    # each session read and not placed costs its read and its SKIPPED row (64 at a time, a busy
    # cluster's cycle read twice the sessions it placed).
    queue_page = 32
    with_kernels = False

    async def read_before_targets(
        self, conn: Tx, resource_group: str, now: datetime
    ) -> list[retry_holds.Undecided]:
        return await retry_holds.read(conn, resource_group, now)

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return StatusTransitions(
            success=TransitionStatus(SessionStatus.SCHEDULED, KernelStatus.SCHEDULED),
            need_retry=None,
            expired=TransitionStatus(SessionStatus.CANCELLED, KernelStatus.CANCELLED),
            give_up=TransitionStatus(SessionStatus.CANCELLED, KernelStatus.CANCELLED),
        )

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        result = LifecycleResult(placements={}, moved={})
        assert result.placements is not None and result.moved is not None
        # Its agents' rows locked as they are read: placement in a group is serialised. With them,
        # the agents a preemptor holds while its victims stop: nobody else is placed there (DESIGN §6).
        registered, reserved = await placement_view.read(ctx.conn, ctx.resource_group)
        # Read once per cycle; each placement then updates it in memory (no re-sorting, no queries).
        free = FreeCapacity(AgentSnapshot(a.id, a.capacity - a.used) for a in registered if a.placeable)
        held_by = {aid: sid for sid, r in reserved.items() for aid in r.get("agents", [])}
        # Failed attempts whose retry is yet to be made keep their place in line for what they
        # freed: read before the targets (read_before_targets), dropped once their retry is here.
        undecided: list[retry_holds.Undecided] = list(ctx.before or ())
        elsewhere = _Images(ctx, [a.id for a in registered])
        # Backfill: a session that does not fit does not block smaller ones behind it, except on the
        # agents held for the first one that does not fit (no starvation; see README).
        unplaced: list[SessionRecord] = []
        hold: Hold | None = None
        running: list[RunningRecord] | None = None  # read once, when something does not fit
        page = list(targets)
        smallest = Decimal("Infinity")  # the least CPU a session read so far asks for in all
        while page:
            smallest = min(smallest, *(s.resources[CPU] * s.cluster_size for s in page))
            if undecided:
                chains = {s.root_session_id for s in page}
                undecided = [u for u in undecided if u.root not in chains]
            for s in _ready(page, result, ctx.now):
                while undecided and undecided[0].key < sessions.queue_key(s):
                    _keep_place(free, undecided.pop(0), set(held_by))
                if s.status is SessionStatus.SUSPENDED and s.termination_reason:
                    continue  # cancelled while suspended: ApplyTerminationRequests ends it
                needs = [s.resources] * s.cluster_size  # every kernel of a session asks for the same slots
                excluded = {aid for aid, owner in held_by.items() if owner != s.id} | await elsewhere(s)
                if hold is not None and not may_use_held(hold, s.spec.timeout, ctx.now):
                    excluded |= hold.agent_ids
                note = ""
                placement = None
                if s.avoid_agent:
                    # Soft anti-affinity: any other agent first; the avoided one rather than waiting.
                    placement = free.place(needs, s.spec.placement, excluded | {s.avoid_agent})
                    if placement is None:
                        note = f" (anti-affinity: no agent but {s.avoid_agent} had room)"
                if placement is None:
                    placement = free.place(needs, s.spec.placement, excluded)
                if placement is None:
                    unplaced.append(s)
                    if hold is None and s.id not in reserved:
                        if running is None:
                            running = await preemption.running_in(ctx.conn, ctx.resource_group)
                        hold = _hold_for(ctx, s, registered, held_by, running, await elsewhere(s))
                    continue
                if s.status is SessionStatus.SUSPENDED:
                    if not await _resume(ctx, s):
                        continue
                    result.moved[s.id] = SessionStatus.PENDING
                    note += f" (resumed, resume {s.resume_count + 1})"
                free.take(needs, placement)
                result.placements[s.id] = placement
                result.success(s.id, "placed on " + ", ".join(placement.agent_ids) + note)
            if ctx.more is None:
                break
            if not free.cpu_left():
                # Nothing more fits: read on only for a session further back that could preempt.
                if running is None:
                    running = await preemption.running_in(ctx.conn, ctx.resource_group)
                if not await _victims_below(ctx, running, page[-1].priority):
                    break
            # As many as could still fit, were they all as small as the smallest read so far: under
            # load placement places dozens a cycle, and every page is a round trip.  Exactly that
            # many while all read so far fit (one more would only be read to be skipped, and the
            # skips written: a round trip or two in most runs of a busy cluster); at least a page
            # once one did not (a smaller one further back may fit).
            fit = int(free.cpu_free() // smallest) if smallest > 0 else 0
            page = await ctx.more(fit if not unplaced else max(fit, self.queue_page))
        placed = set(result.placements)
        await preemption.release(ctx.conn, [sid for sid in reserved if sid in placed])
        preempting = await _preempt(
            ctx, unplaced, free.snapshot(), reserved, held_by, result, running, elsewhere
        )
        for s in unplaced:
            why = preempting.get(s.id) or _why_waiting(s, registered, ctx.resource_group, await elsewhere(s))
            if hold is not None and hold.session_id == s.id and s.id not in preempting:
                until = f" until {hold.starts_by:%H:%M:%S}" if hold.starts_by else ""
                why += f"; agents {', '.join(sorted(hold.agent_ids))} held for it{until} (first in line)"
            result.skipped.append(Skip(s.id, why))
        return result


def _keep_place(free: FreeCapacity, u: retry_holds.Undecided, held: set[str]) -> None:
    """What a failed attempt freed is taken from those queued after its chain until its retry is
    decided (the retry, made at once, comes before them: store/retry_holds.py)."""
    placement = free.place(u.freed, excluded=held)
    if placement is not None:
        free.take(u.freed, placement)


def _ready(page: Sequence[SessionRecord], result: LifecycleResult, now: datetime) -> list[SessionRecord]:
    """The page's sessions whose retry time has come, in queue order (the others are noted)."""
    by_id = {s.id: s for s in page}
    ready = queue_order(
        (QueueEntry(s.id, s.priority, s.chain_submitted_at, s.retry_after) for s in page), now
    )
    ready_ids = {e.session_id for e in ready}
    for s in page:
        if s.id not in ready_ids:
            result.skipped.append(Skip(s.id, "waiting for its retry time"))
    return [by_id[e.session_id] for e in ready]


async def _victims_below(ctx: HandlerContext, running: Sequence[RunningRecord], priority: int) -> bool:
    """Some running session could be preempted by a waiting one of this priority or lower (the rest
    of the queue): the settings' bound and lower priority, not yet its minimum runtime."""
    settings = group_settings(ctx.preemption)
    return any(r.priority <= settings.preemptible_priority and r.priority < priority for r in running)


async def _resume(ctx: HandlerContext, s: SessionRecord) -> bool:
    """SUSPENDED -> PENDING with its kernels, as a new generation; False when another manager won."""
    move = Move(s.id, SessionStatus.SUSPENDED, SessionStatus.PENDING, KernelStatus.PENDING)
    if not await sessions.apply_moves(ctx.conn, [move], ctx.now):
        return False
    why = f"resumed at its place in the queue (resume {s.resume_count + 1}); kernels start afresh"
    await journal.add_history(
        ctx.conn,
        [HistoryRow(s.id, "Resume", "RESUMED", SessionStatus.SUSPENDED, SessionStatus.PENDING, why)],
        ctx.now,
    )
    return True


def _hold_for(
    ctx: HandlerContext,
    s: SessionRecord,
    registered: Sequence[AgentCapacity],
    held_by: dict[str, str],
    running: Sequence[RunningRecord],
    elsewhere: frozenset[str],
) -> Hold | None:
    """The agents held for the first session in line that does not fit, and when they will surely
    have room: every RUNNING session there ends by its start plus timeout; anything else there (no
    timeout, starting, stopping) leaves it unknown, and then nothing else may use them."""
    alive = [a for a in registered if a.placeable and a.id not in held_by and a.id not in elsewhere]
    occupants = []
    accounted: dict[str, ResourceSlots] = {}
    for r in running:
        ends = r.started_at + timedelta(seconds=r.timeout) if r.started_at and r.timeout else None
        on = frozenset(agent_id for agent_id, _ in r.kernels if agent_id)
        occupants.append(Occupant(on, ends))
        for agent_id, slots in r.kernels:
            if agent_id:
                accounted[agent_id] = accounted.get(agent_id, ResourceSlots()) + slots
    for a in alive:
        if not a.used.fits_in(accounted.get(a.id, ResourceSlots())):
            occupants.append(Occupant(frozenset({a.id}), None))  # something not yet (or no longer) running
    capacity = [AgentSnapshot(a.id, a.capacity) for a in alive]
    return head_hold(s.id, [s.resources] * s.cluster_size, s.spec.placement, capacity, occupants, ctx.now)


async def _preempt(
    ctx: HandlerContext,
    unplaced: Sequence[SessionRecord],
    snapshot: Sequence[AgentSnapshot],
    reserved: dict[str, dict[str, Any]],
    held_by: dict[str, str],
    result: LifecycleResult,
    running_now: Sequence[RunningRecord] | None,
    elsewhere: _Images,
) -> dict[str, str]:
    """For the first waiting session (in queue order) that running work of lower priority can make
    room for: ask a minimal set of victims to stop and hold the agents they free.  One preemptor per
    placement run (a cycle runs placement at its start and its own place, and between its handlers
    only while those runs place sessions: Coordinator.run_cycle); a preemptor whose victims are
    still stopping waits (no second round).  Returns why each preempting session waits."""
    waiting: dict[str, str] = {}
    for s in unplaced:
        hold = reserved.get(s.id)
        if hold is None:
            continue
        still = await preemption.live(ctx.conn, hold.get("victims", []))
        if still:
            waiting[s.id] = f"waiting for {len(still)} preempted session(s) to stop; agents held for it"
        else:  # its victims are gone and it still does not fit: let it choose again
            await preemption.release(ctx.conn, [s.id])
    fresh = [s for s in unplaced if s.id not in reserved]
    if not fresh:
        return waiting
    settings = group_settings(ctx.preemption)
    running = [
        RunningSession(r.id, r.priority, r.started_at, tuple((a, slots) for a, slots in r.kernels if a))
        for r in (
            running_now
            if running_now is not None
            else await preemption.running_in(ctx.conn, ctx.resource_group)
        )
        if r.started_at is not None
    ]
    view = [a for a in snapshot if a.agent_id not in held_by]
    by_priority: dict[int, list[RunningSession]] = {}  # a long queue has few distinct priorities
    for s in fresh:
        if s.priority not in by_priority:
            by_priority[s.priority] = candidates(running, s.priority, settings, ctx.now)
        ordered = by_priority[s.priority]
        if not ordered:
            continue
        needs = [s.resources] * s.cluster_size
        others = await elsewhere(s)
        offering = [a for a in view if a.agent_id not in others]
        victims = choose_victims(needs, s.spec.placement, offering, ordered)
        if victims is None:
            continue
        target = place_gang(needs, freed(offering, victims), s.spec.placement)
        assert target is not None  # choose_victims checked it
        ids = [v.session_id for v in victims]
        why = f"preempted by session {s.id} (priority {s.priority}) to make room for it"
        reason = TerminationReason.PREEMPTED
        if settings.preemption_mode is PreemptionMode.SUSPEND:
            reason = TerminationReason.SUSPENDED
            why += " (suspended: it resumes at its place in the queue)"
        # A deployment's replica is stopped and replaced, never suspended (its route cannot wait).
        replicas = (
            await routes.replica_sessions(ctx.conn, ids) if reason is TerminationReason.SUSPENDED else set()
        )
        for v in victims:
            own = TerminationReason.PREEMPTED if v.session_id in replicas else reason
            await sessions.request_termination(ctx.conn, v.session_id, own, why, ctx.now, preempted_by=s.id)
        result.requested += len(victims)
        await journal.add_history(
            ctx.conn,
            [
                HistoryRow(v.session_id, "Preemption", "PREEMPTED", SessionStatus.RUNNING, None, why)
                for v in victims
            ],
            ctx.now,
        )
        await preemption.reserve(ctx.conn, s.id, target.agent_ids, ids)
        agents_held = ", ".join(sorted(set(target.agent_ids)))
        waiting[s.id] = (
            f"preempting {len(ids)} session(s) of priority {min(v.priority for v in victims)}"
            f" ({settings.preemption_mode}): {', '.join(ids)}; agents {agents_held} held"
        )
        break  # one round per run: the next preemptor sees what this one freed and holds
    return waiting


def _why_waiting(
    s: SessionRecord, registered: Sequence[AgentCapacity], group: str, elsewhere: frozenset[str]
) -> str:
    if not registered:
        return f"unschedulable: no agent has joined resource group {group!r} yet"
    if s.spec.image and not any(a.status is AgentStatus.ALIVE and a.id not in elsewhere for a in registered):
        return f"no live agent of resource group {group!r} offers image {s.spec.image!r}"
    registered = [a for a in registered if a.id not in elsewhere]
    if not any(s.resources.fits_in(a.capacity) for a in registered):
        return "unschedulable: each kernel needs more than any agent of the group has"
    off = [a.id for a in registered if a.status is AgentStatus.ALIVE and not a.schedulable]
    if off:  # their reasons: `corral agent list`
        return f"no agent has room for it now; unschedulable: {', '.join(off)}"
    return "no agent has room for it now"


class _Images:
    """The group's agents that do not offer a session's image (none when it names none): read
    once per placement run, and only once a session in line names an image."""

    def __init__(self, ctx: HandlerContext, agent_ids: Sequence[str]) -> None:
        self._ctx, self._ids = ctx, frozenset(agent_ids)
        self._offering: dict[str, frozenset[str]] | None = None
        self._without: dict[str, frozenset[str]] = {}

    async def __call__(self, s: SessionRecord) -> frozenset[str]:
        image = s.spec.image
        if not image:
            return frozenset()
        if image not in self._without:
            if self._offering is None:
                self._offering = await agents.offering(self._ctx.conn, self._ctx.resource_group)
            self._without[image] = frozenset(a for a in self._ids if image not in self._offering.get(a, ()))
        return self._without[image]
