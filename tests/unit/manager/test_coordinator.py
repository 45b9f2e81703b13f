"""The coordinator's judgement (domain/verdicts.py) over every lifecycle handler's declared moves:
the moves, try counts and history rows each outcome produces, with the clock passed in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.domain.cause import Cause, TerminationReason
from corral.domain.final import FinalVerdict
from corral.domain.history import HistoryRow
from corral.domain.judge import PhaseLimits
from corral.domain.records import Move, SessionRecord
from corral.domain.scheduling import (
    Failure,
    HandlerResult,
    SchedulingResult,
    Skip,
    StatusTransitions,
    TransitionStatus,
)
from corral.domain.spec import SessionSpec
from corral.domain.status import KernelStatus as K
from corral.domain.status import SessionResult
from corral.domain.status import SessionStatus as S
from corral.domain.verdicts import (
    RESCHEDULED_TOO_OFTEN,
    RUNS,
    Rules,
    Snapshot,
    Step,
    Stop,
    judge,
    may_requeue,
)
from corral.manager.apply import rules_of
from corral.manager.handlers import cycle_handlers
from corral.manager.handlers.base import LifecycleHandler, SessionPromotionHandler
from corral.manager.promotions import promote_found

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
LIMIT = timedelta(minutes=5)
LIMITS = PhaseLimits(timeouts=dict.fromkeys(S, LIMIT), max_tries=3, max_reschedules=2)
FRESH = NOW - timedelta(seconds=1)
"""A status entered well within its limit."""
STALE = NOW - LIMIT - timedelta(seconds=1)
"""A status entered longer ago than its limit."""

LIFECYCLE = [h for h in cycle_handlers() if isinstance(h, LifecycleHandler)]
PROMOTIONS = [h for h in cycle_handlers() if isinstance(h, SessionPromotionHandler)]
OUTCOMES = [
    SchedulingResult.SUCCESS,
    SchedulingResult.NEED_RETRY,
    SchedulingResult.EXPIRED,
    SchedulingResult.GIVE_UP,
]

# Where each outcome leaves a session, per handler (DESIGN §3's table; after any `then` steps).
# A missing outcome records history only.
WHERE = {
    "CancelPendingSessions": {SchedulingResult.SUCCESS: S.CANCELLED},
    "ApplyTerminationRequests": {SchedulingResult.SUCCESS: S.TERMINATING},
    "ExpirePulling": {SchedulingResult.EXPIRED: S.PENDING, SchedulingResult.GIVE_UP: S.PENDING},
    "ExpireCreating": {SchedulingResult.EXPIRED: S.TERMINATING, SchedulingResult.GIVE_UP: S.TERMINATING},
    "TerminateSessions": {},
    "SuspendSessions": {SchedulingResult.SUCCESS: S.SUSPENDED},
    "ScheduleNewSessions": {
        SchedulingResult.SUCCESS: S.PREPARING,
        SchedulingResult.EXPIRED: S.CANCELLED,
        SchedulingResult.GIVE_UP: S.CANCELLED,
    },
    "PrepareSessions": {
        SchedulingResult.SUCCESS: S.PREPARING,
        SchedulingResult.EXPIRED: S.PENDING,
        SchedulingResult.GIVE_UP: S.PENDING,
    },
    "StartSessions": {
        SchedulingResult.SUCCESS: S.CREATING,
        SchedulingResult.EXPIRED: S.PENDING,
        SchedulingResult.GIVE_UP: S.PENDING,
    },
}


def record(
    sid: str,
    status: S,
    since: datetime = FRESH,
    tries: int = 0,
    reschedules: int = 0,
    retry_after: datetime | None = None,
) -> SessionRecord:
    return SessionRecord(
        id=sid,
        name=sid,
        spec=SessionSpec(command=("true",)),
        status=status,
        status_changed_at=since,
        result=SessionResult.UNDEFINED,
        cause=None,
        exit_code=None,
        root_rank=None,
        owner="u",
        parent_session_id=None,
        root_session_id=sid,
        retry_count=0,
        chain_submitted_at=NOW - timedelta(hours=1),
        retry_after=retry_after,
        phase_tries=tries,
        reschedule_count=reschedules,
        resume_count=0,
        attempt=1,
        manual_retry=False,
        total_retries=0,
        free_requeues=0,
        rule_counts={},
        first_started_at=None,
        retry_cause=None,
        planned_attempts=None,
        avoid_agent=None,
        retry_state=None,
        retry_reason=None,
        next_attempt_id=None,
        reservation=None,
        termination_reason=None,
        termination_message=None,
        termination_requested_at=None,
        created_at=NOW - timedelta(hours=1),
        started_at=None,
        terminated_at=None,
    )


def snapshot(
    rules: Rules,
    result: HandlerResult,
    *sessions: SessionRecord,
    limits: PhaseLimits = LIMITS,
    moved: Mapping[str, S] | None = None,
    finals: Mapping[str, FinalVerdict] | None = None,
) -> Snapshot:
    return Snapshot(rules, result, sessions, limits, NOW, moved=moved or {}, finals=finals or {})


def outcome_of(handler: LifecycleHandler, kind: SchedulingResult) -> tuple[Snapshot, str]:
    """A snapshot in which one session of the handler's first target status meets `kind`, and the
    message its history row carries."""
    src = sorted(handler.target_session_statuses)[0]
    if kind is SchedulingResult.SUCCESS:
        result = HandlerResult()
        result.success("s", "done")
        return snapshot(rules_of(handler), result, record("s", src)), "done"
    if kind is SchedulingResult.EXPIRED:
        return snapshot(rules_of(handler), HandlerResult(), record("s", src, since=STALE)), (
            f"in {src} longer than {LIMIT}"
        )
    tries = LIMITS.max_tries - 1 if kind is SchedulingResult.GIVE_UP else 0
    result = HandlerResult(failures=[Failure("s", "no luck")])
    return snapshot(rules_of(handler), result, record("s", src, tries=tries)), f"no luck (try {tries + 1})"


def test_every_lifecycle_handler_has_its_expected_moves_listed() -> None:
    assert {h.name for h in LIFECYCLE} == set(WHERE)


@pytest.mark.parametrize("kind", OUTCOMES)
@pytest.mark.parametrize("handler", LIFECYCLE, ids=lambda h: h.name)
def test_each_outcome_moves_as_declared_with_its_history(
    handler: LifecycleHandler, kind: SchedulingResult
) -> None:
    snap, message = outcome_of(handler, kind)
    src = snap.sessions[0].status
    v = judge(snap)
    where = WHERE[handler.name].get(kind)
    assert v.tries == (("s",) if kind in (SchedulingResult.NEED_RETRY, SchedulingResult.GIVE_UP) else ())
    assert v.stops == () and v.skipped == ()
    if where is None:
        assert v.moves == () and v.move_rows == ()
        row = HistoryRow("s", handler.name, kind, src, None, message)
        # EXPIRED without a move repeats each cycle: it goes to the collapsed rows, not the plain ones.
        assert (v.expired, v.rows) == (((row,), ()) if kind is SchedulingResult.EXPIRED else ((), (row,)))
        return
    [move] = v.moves
    assert (move.session_id, move.src, move.dst) == ("s", src, where)
    declared = getattr(handler.status_transitions(), kind.lower())
    assert v.move_rows[0] == HistoryRow("s", handler.name, kind, src, declared.session, message)
    assert v.rows == () and v.expired == ()


def test_a_success_goes_on_through_its_then_steps_in_one_move_with_a_row_each() -> None:
    [schedule] = [h for h in LIFECYCLE if h.name == "ScheduleNewSessions"]
    result = HandlerResult()
    result.success("s", "placed on a")
    v = judge(snapshot(rules_of(schedule), result, record("s", S.PENDING)))
    assert v.moves == (
        Move("s", S.PENDING, S.PREPARING, K.PREPARING, (), (S.SCHEDULED,), (K.SCHEDULED,), True),
    )
    assert [(r.handler, r.from_status, r.to_status) for r in v.move_rows] == [
        ("ScheduleNewSessions", S.PENDING, S.SCHEDULED),
        ("PrepareSessions", S.SCHEDULED, S.PREPARING),
    ]


def test_a_success_without_then_steps_moves_its_kernels_as_declared() -> None:
    rules = Rules("H", StatusTransitions(success=TransitionStatus(S.CREATING, K.CREATING)))
    result = HandlerResult(successes=["s"])
    [move] = judge(snapshot(rules, result, record("s", S.PREPARED))).moves
    assert move == Move("s", S.PREPARED, S.CREATING, K.CREATING)


@given(tries=st.integers(0, 10), max_tries=st.integers(1, 6))
def test_a_failure_counts_a_try_and_gives_up_once_the_tries_reach_the_limit(
    tries: int, max_tries: int
) -> None:
    t = StatusTransitions(need_retry=TransitionStatus(S.PREPARED), give_up=TransitionStatus(S.TERMINATING))
    limits = replace(LIMITS, max_tries=max_tries)
    result = HandlerResult(failures=[Failure("s", "x")])
    v = judge(snapshot(Rules("H", t), result, record("s", S.CREATING, tries=tries), limits=limits))
    gave_up = tries + 1 >= max_tries
    assert v.tries == ("s",)
    [row] = v.move_rows
    assert row.result is (SchedulingResult.GIVE_UP if gave_up else SchedulingResult.NEED_RETRY)
    assert row.message == f"x (try {tries + 1})"
    assert [m.dst for m in v.moves] == [S.TERMINATING if gave_up else S.PREPARED]


def test_a_session_failing_twice_in_one_result_counts_one_try() -> None:
    result = HandlerResult(failures=[Failure("s", "a"), Failure("s", "b")])
    v = judge(snapshot(Rules("H", StatusTransitions()), result, record("s", S.PREPARED, tries=1)))
    assert v.tries == ("s",)
    assert [r.message for r in v.rows] == ["a (try 2)", "b (try 2)"]


@given(
    fates=st.lists(st.sampled_from(["success", "failure", "skipped", "untouched"]), min_size=1, max_size=8),
    stale=st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_only_sessions_neither_succeeded_nor_failed_expire(fates: list[str], stale: list[bool]) -> None:
    sessions = [record(f"s{i}", S.PREPARING, since=STALE if stale[i] else FRESH) for i in range(len(fates))]
    result = HandlerResult(
        successes=[s.id for s, f in zip(sessions, fates, strict=False) if f == "success"],
        failures=[Failure(s.id, "x") for s, f in zip(sessions, fates, strict=False) if f == "failure"],
        skipped=[Skip(s.id, "later") for s, f in zip(sessions, fates, strict=False) if f == "skipped"],
    )
    rules = Rules("H", StatusTransitions(expired=TransitionStatus(S.PENDING)))
    v = judge(snapshot(rules, result, *sessions))
    expired = {r.session_id for r in v.move_rows if r.result is SchedulingResult.EXPIRED}
    assert expired == {
        s.id
        for s, f, old in zip(sessions, fates, stale, strict=False)
        if old and f in ("skipped", "untouched")
    }
    assert {m.session_id for m in v.moves} == expired


@given(age=st.integers(0, 1000))
def test_expiry_is_judged_by_the_clock_passed_in(age: int) -> None:
    rules = Rules("H", StatusTransitions(expired=TransitionStatus(S.PENDING)))
    since = NOW - timedelta(seconds=age)
    v = judge(snapshot(rules, HandlerResult(), record("s", S.PREPARING, since=since)))
    assert bool(v.moves) is (timedelta(seconds=age) > LIMIT)


def test_a_retry_waiting_for_its_time_counts_its_status_from_then() -> None:
    rules = Rules("H", StatusTransitions(expired=TransitionStatus(S.CANCELLED)))
    waiting = record("s", S.PENDING, since=STALE, retry_after=NOW - timedelta(seconds=1))
    assert judge(snapshot(rules, HandlerResult(), waiting)).moves == ()
    assert judge(snapshot(rules, HandlerResult(), replace(waiting, retry_after=STALE))).moves != ()


def test_a_status_without_a_limit_never_expires() -> None:
    rules = Rules("H", StatusTransitions(expired=TransitionStatus(S.CANCELLED)))
    limits = PhaseLimits(timeouts={S.PENDING: None})
    v = judge(
        snapshot(rules, HandlerResult(), record("s", S.PENDING, since=NOW - timedelta(days=9)), limits=limits)
    )
    assert v == judge(snapshot(rules, HandlerResult(), limits=limits))


def test_skips_are_collapsed_history_only_one_per_session_and_reason() -> None:
    result = HandlerResult(skipped=[Skip("a", "no room"), Skip("b", "held")])
    rules = Rules("Sched", StatusTransitions(success=TransitionStatus(S.SCHEDULED)))
    v = judge(snapshot(rules, result, record("a", S.PENDING), record("b", S.SUSPENDED)))
    assert v.skipped == (
        HistoryRow("a", "Sched", SchedulingResult.SKIPPED, S.PENDING, None, "no room"),
        HistoryRow("b", "Sched", SchedulingResult.SKIPPED, S.SUSPENDED, None, "held"),
    )
    assert v.moves == () and v.rows == () and v.move_rows == () and v.tries == ()


def test_a_target_the_handler_moved_is_judged_in_its_new_status_with_its_count_restarted() -> None:
    rules = Rules("H", StatusTransitions(give_up=TransitionStatus(S.CANCELLED)))
    result = HandlerResult(failures=[Failure("s", "x")])
    v = judge(snapshot(rules, result, record("s", S.SUSPENDED, tries=5), moved={"s": S.PENDING}))
    [row] = v.rows
    assert (row.result, row.from_status, row.message) == (SchedulingResult.NEED_RETRY, S.PENDING, "x (try 1)")


@pytest.mark.parametrize("kind", [SchedulingResult.EXPIRED, SchedulingResult.GIVE_UP])
def test_a_session_that_may_run_is_stopped_not_requeued(kind: SchedulingResult) -> None:
    [start] = [h for h in LIFECYCLE if h.name == "StartSessions"]
    snap, message = outcome_of(start, kind)
    assert may_requeue(snap.rules, snap.result, snap.sessions) == ["s"]
    v = judge(replace(snap, running=frozenset({"s"})))
    assert v.moves == ()
    assert v.stops == (Stop("s", TerminationReason.SCHEDULER_TIMEOUT, RUNS),)
    assert v.rows == (HistoryRow("s", "StartSessions", kind, S.PREPARED, None, f"{message}; {RUNS}"),)


def test_a_session_rescheduled_too_often_is_stopped_not_requeued() -> None:
    [prepare] = [h for h in LIFECYCLE if h.name == "PrepareSessions"]
    snap, message = outcome_of(prepare, SchedulingResult.EXPIRED)
    tired = replace(snap, sessions=[replace(snap.sessions[0], reschedule_count=LIMITS.max_reschedules)])
    v = judge(tired)
    assert v.moves == ()
    assert v.stops == (Stop("s", TerminationReason.SCHEDULER_TIMEOUT, RESCHEDULED_TOO_OFTEN),)
    assert v.rows[0].message == message + "; reschedules exhausted"
    once_less = replace(
        snap, sessions=[replace(snap.sessions[0], reschedule_count=LIMITS.max_reschedules - 1)]
    )
    assert [m.dst for m in judge(once_less).moves] == [S.PENDING]


def test_only_handlers_that_requeue_ask_which_sessions_may_run() -> None:
    rules = Rules("H", StatusTransitions(give_up=TransitionStatus(S.CANCELLED)))
    result = HandlerResult(successes=["a"], failures=[Failure("b", "x")])
    sessions = [record("a", S.PENDING), record("b", S.PENDING), record("c", S.PENDING)]
    assert may_requeue(rules, result, sessions) == []
    requeues = Rules("H", StatusTransitions(expired=TransitionStatus(S.PENDING)))
    assert may_requeue(requeues, result, sessions) == ["b", "c"]


def test_a_failure_that_ends_a_session_records_the_handlers_cause() -> None:
    rules = Rules(
        "H", StatusTransitions(give_up=TransitionStatus(S.CANCELLED)), failure_cause=Cause.SCHEDULER_TIMEOUT
    )
    result = HandlerResult(failures=[Failure("s", "x")])
    [move] = judge(snapshot(rules, result, record("s", S.PENDING, tries=2))).moves
    assert move.values == (("result", "failure"), ("cause", "scheduler_timeout"))


def test_a_failure_that_stops_a_session_is_recorded_as_a_termination_request() -> None:
    [expire] = [h for h in LIFECYCLE if h.name == "ExpireCreating"]
    snap, message = outcome_of(expire, SchedulingResult.EXPIRED)
    [move] = judge(snap).moves
    assert move.values == (
        ("termination_reason", "scheduler_timeout"),
        ("termination_message", message),
        ("termination_requested_at", NOW),
    )


def test_a_success_that_ends_a_session_carries_its_final_verdict() -> None:
    rules = Rules("H", StatusTransitions(success=TransitionStatus(S.ERROR)))
    final = FinalVerdict(S.ERROR, SessionResult.FAILURE, Cause.OOM_KILLED, 1, 137)
    v = judge(
        snapshot(rules, HandlerResult(successes=["s"]), record("s", S.TERMINATING), finals={"s": final})
    )
    assert v.moves[0].values == (
        ("result", "failure"),
        ("cause", "oom_killed"),
        ("exit_code", 137),
        ("root_rank", 1),
    )


def test_the_same_snapshot_is_judged_the_same() -> None:
    rules = rules_of(LIFECYCLE[-1])
    result = HandlerResult(successes=["a"], failures=[Failure("b", "x")], skipped=[Skip("c", "later")])
    snap = snapshot(
        rules, result, record("a", S.PREPARED), record("b", S.PREPARED), record("c", S.PREPARED, STALE)
    )
    assert judge(snap) == judge(snap)


@pytest.mark.parametrize("handler", PROMOTIONS, ids=lambda h: h.name)
def test_a_promotion_records_each_status_it_passes(handler: SessionPromotionHandler) -> None:
    for src in sorted(handler.target_session_statuses):
        [move], rows = promote_found(handler, [("s", src)])
        hops = (src, *move.via, move.dst)
        assert move.dst is handler.success_session_status()
        assert [(r.from_status, r.to_status) for r in rows] == list(pairwise(hops))
        assert all(r.result is SchedulingResult.SUCCESS for r in rows)
        assert rows[-1].handler == (handler.last_step.handler if handler.last_step else handler.name)


def test_steps_are_the_handlers_steps() -> None:
    """The handlers name their steps from domain: one Step type through handler, judge and store."""
    [schedule] = [h for h in LIFECYCLE if h.name == "ScheduleNewSessions"]
    assert all(isinstance(step, Step) for step in schedule.then)
