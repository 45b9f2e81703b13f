"""The coordinator's judgement of a lifecycle handler's result (DESIGN §3): which moves to apply,
which try counts rise, which history rows to write.  Pure, with the clock passed in; the
coordinator reads the snapshot it judges and applies what it returns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from corral.domain.cause import Cause, TerminationReason
from corral.domain.final import FinalVerdict
from corral.domain.history import HistoryRow
from corral.domain.judge import PhaseLimits, gives_up, is_expired, reschedules_exhausted
from corral.domain.records import Move, SessionRecord
from corral.domain.scheduling import HandlerResult, SchedulingResult, StatusTransitions, TransitionStatus
from corral.domain.status import TERMINAL_SESSION, KernelStatus, SessionResult, SessionStatus

RUNS = "some of its kernels may already run: stopped, not re-queued"
"""Why a session sent back to the queue is stopped instead: re-queueing it would free the capacity
of kernels not yet confirmed dead."""
RESCHEDULED_TOO_OFTEN = "re-scheduled too often"


@dataclass(frozen=True)
class Step:
    """A status a handler's move passes under another handler's rule, in the same guarded update:
    one a promotion passes on its way (`through`), or one a lifecycle handler's successes go on to
    (`then`).  Each is recorded as its own event and history row (Move.via)."""

    handler: str
    """The handler whose rule (DESIGN §3) the step applies: its name is the history row's."""
    status: SessionStatus
    """The status the session passes."""
    message: str = ""
    """The history row's message."""
    kernel: KernelStatus | None = None
    """Where the session's kernels move with it (None: they stay)."""


@dataclass(frozen=True)
class Rules:
    """What a lifecycle handler declares that its outcomes are judged by."""

    handler: str
    """Its name, the history rows'."""
    transitions: StatusTransitions
    """Its `status_transitions()`."""
    failure_cause: Cause | None = None
    """Recorded when an expired or give-up move ends or stops the session."""
    then: tuple[Step, ...] = ()
    """Statuses its successes go on to at once, in the same update."""
    unrequested: bool = False
    """Its targets have no termination request (`termination_requested is False`): a success that
    goes on (`then`) is guarded by none having been written since, as the steps' rules ask."""


@dataclass(frozen=True)
class Snapshot:
    """What one judgement reads: the handler's rules and result, and its targets as read."""

    rules: Rules
    result: HandlerResult
    sessions: Sequence[SessionRecord]
    """The handler's targets, then the overdue sessions outside them, each once, as read before
    the handler ran; their `phase_tries` are the failures counted in their status so far."""
    limits: PhaseLimits
    now: datetime
    moved: Mapping[str, SessionStatus] = field(default_factory=dict)
    """Targets the handler itself moved first (a resumed session is PENDING now)."""
    finals: Mapping[str, FinalVerdict] = field(default_factory=dict)
    """How each success that ends its session ends."""
    running: frozenset[str] = frozenset()
    """Of `may_requeue`'s sessions, those a kernel of which may be running."""


@dataclass(frozen=True)
class Stop:
    """A termination request the coordinator writes itself."""

    session_id: str
    reason: TerminationReason
    message: str


@dataclass(frozen=True)
class Verdicts:
    """What a judgement decided, for the coordinator to apply in the handler's transaction."""

    moves: tuple[Move, ...] = ()
    move_rows: tuple[HistoryRow, ...] = ()
    """History rows of the moves: a row is written only if its session's move wins."""
    rows: tuple[HistoryRow, ...] = ()
    """History rows of outcomes without a move, written as they are."""
    tries: tuple[str, ...] = ()
    """Sessions whose failure count in their status rises by one (before the moves apply: a move
    starts the count again)."""
    stops: tuple[Stop, ...] = ()
    skipped: tuple[HistoryRow, ...] = ()
    """SKIPPED outcomes: they repeat each cycle, so the store collapses them (one row per session,
    handler and reason, with a count and the last time)."""
    expired: tuple[HistoryRow, ...] = ()
    """EXPIRED outcomes without a move: they repeat each cycle too, collapsed as SKIPPED are."""


def verdict_values(v: FinalVerdict) -> tuple[tuple[str, Any], ...]:
    """The session columns a final verdict sets."""
    return (
        ("result", str(v.result)),
        ("cause", str(v.cause) if v.cause else None),
        ("exit_code", v.exit_code),
        ("root_rank", v.root_rank),
    )


def passed_rows(
    session_id: str, kind: SchedulingResult, src: SessionStatus, steps: Sequence[Step]
) -> list[HistoryRow]:
    """The history rows of a move passing `steps` from `src`: one per step, under the handler
    whose rule it is."""
    froms = (src, *(step.status for step in steps))
    return [
        HistoryRow(session_id, step.handler, kind, a, step.status, step.message)
        for a, step in zip(froms, steps, strict=False)
    ]


def may_requeue(rules: Rules, result: HandlerResult, sessions: Sequence[SessionRecord]) -> list[str]:
    """The sessions a judgement may send back to the queue (its failures and the targets not
    attempted), if any outcome of the handler's does: the coordinator reads which of them may have
    a running kernel (`Snapshot.running`).  Empty when no outcome re-queues."""
    t = rules.transitions
    requeued = {to.session for to in (t.need_retry, t.give_up, t.expired) if to}
    if SessionStatus.PENDING not in requeued:
        return []
    attempted = _attempted(result)
    return [f.session_id for f in result.failures] + [s.id for s in sessions if s.id not in attempted]


def judge(snap: Snapshot) -> Verdicts:
    """Successes move as declared; failures count a try and give up once `max_tries` is reached,
    else need a retry; sessions neither succeeded nor failed that stayed past their status's time
    limit expire; skips are recorded only.  An outcome declared to move nowhere is history only."""
    rules, result, limits = snap.rules, snap.result, snap.limits
    by_id = {s.id: s for s in snap.sessions}
    for sid, status in snap.moved.items():
        by_id[sid] = replace(by_id[sid], status=status, phase_tries=0)  # a move starts the count again
    out = _Collected(rules, snap)
    t = rules.transitions
    for sid in result.successes:
        out.outcome(by_id[sid], SchedulingResult.SUCCESS, t.success, result.messages.get(sid, ""))
    failed = list(dict.fromkeys(f.session_id for f in result.failures))
    tries = {sid: by_id[sid].phase_tries + 1 for sid in failed}
    for f in result.failures:
        s = by_id[f.session_id]
        message = f"{f.message} (try {tries[s.id]})"
        if gives_up(tries[s.id], limits):
            out.outcome(s, SchedulingResult.GIVE_UP, t.give_up, message)
        else:
            out.outcome(s, SchedulingResult.NEED_RETRY, t.need_retry, message)
    attempted = _attempted(result)
    for s in snap.sessions:
        # A retry waiting for its time is not late for it: its status counts from then.
        since = max(s.status_changed_at, s.retry_after) if s.retry_after else s.status_changed_at
        if s.id not in attempted and is_expired(s.status, since, snap.now, limits):
            limit = limits.timeouts.get(s.status)
            out.outcome(s, SchedulingResult.EXPIRED, t.expired, f"in {s.status} longer than {limit}")
    skipped = [
        HistoryRow(
            k.session_id, rules.handler, SchedulingResult.SKIPPED, by_id[k.session_id].status, None, k.reason
        )
        for k in result.skipped
    ]
    return Verdicts(
        moves=tuple(out.moves),
        move_rows=tuple(h for h in out.history if h.to_status is not None),
        rows=tuple(h for h in out.history if h.to_status is None),
        tries=tuple(failed),
        stops=tuple(
            Stop(
                sid,
                TerminationReason.SCHEDULER_TIMEOUT,
                RUNS if sid in snap.running else RESCHEDULED_TOO_OFTEN,
            )
            for sid in out.stop
        ),
        skipped=tuple(skipped),
        expired=tuple(out.expired),
    )


def _attempted(result: HandlerResult) -> set[str]:
    return set(result.successes) | {f.session_id for f in result.failures}


class _Collected:
    """The moves and rows of one judgement, outcome by outcome."""

    def __init__(self, rules: Rules, snap: Snapshot) -> None:
        self.rules = rules
        self.snap = snap
        self.moves: list[Move] = []
        self.history: list[HistoryRow] = []
        self.stop: list[str] = []
        self.expired: list[HistoryRow] = []

    def row(
        self, s: SessionRecord, kind: SchedulingResult, dst: SessionStatus | None, message: str
    ) -> HistoryRow:
        return HistoryRow(s.id, self.rules.handler, kind, s.status, dst, message)

    def outcome(
        self, s: SessionRecord, kind: SchedulingResult, to: TransitionStatus | None, message: str
    ) -> None:
        rules, snap = self.rules, self.snap
        if to is None or to.session is None:
            (self.expired if kind is SchedulingResult.EXPIRED else self.history).append(
                self.row(s, kind, None, message)
            )
            return
        dst = to.session
        failed = kind is not SchedulingResult.SUCCESS
        if failed and dst is SessionStatus.PENDING:
            if s.id in snap.running:
                # Some of its kernels started at once (prepare and start): re-queueing would free
                # their capacity before they are confirmed dead. Stopped instead, as ExpireCreating.
                self.stop.append(s.id)
                self.history.append(self.row(s, kind, None, message + "; " + RUNS))
                return
            if reschedules_exhausted(s.reschedule_count, snap.limits):
                # Re-scheduled too often: stopped instead (it ends ERROR scheduler_timeout).
                self.stop.append(s.id)
                self.history.append(self.row(s, kind, None, message + "; reschedules exhausted"))
                return
        values: tuple[tuple[str, Any], ...] = ()
        if failed and rules.failure_cause and dst in TERMINAL_SESSION:
            values = (("result", str(SessionResult.FAILURE)), ("cause", str(rules.failure_cause)))
        if failed and rules.failure_cause and dst is SessionStatus.TERMINATING:
            # Stopped by the coordinator itself: recorded as a termination request would be.
            values = (
                ("termination_reason", str(rules.failure_cause)),
                ("termination_message", message),
                ("termination_requested_at", snap.now),
            )
        if not failed and s.id in snap.finals:
            values = verdict_values(snap.finals[s.id])
        self.history.append(self.row(s, kind, dst, message))
        if failed or not rules.then:
            self.moves.append(Move(s.id, s.status, dst, to.kernel, values))
            return
        # Its successes go on at once (`then`): one update passing each step, a row each.
        self.history.extend(passed_rows(s.id, kind, dst, rules.then))
        hops = (dst, *(step.status for step in rules.then))
        kernel_path = [k for k in (to.kernel, *(step.kernel for step in rules.then)) if k is not None]
        kernel = kernel_path.pop() if kernel_path else None
        self.moves.append(
            Move(s.id, s.status, hops[-1], kernel, values, hops[:-1], tuple(kernel_path), rules.unrequested)
        )
