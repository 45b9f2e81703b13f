"""Queue order, exit normalisation, final status, cause classification, coordinator judgements."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from corral.domain.cause import Cause, KernelOutcome, TerminationReason
from corral.domain.exits import normalise_exit
from corral.domain.final import final_verdict
from corral.domain.judge import PhaseLimits, for_group, gives_up, is_expired, reschedules_exhausted
from corral.domain.queue import QueueEntry, queue_order
from corral.domain.status import KernelStatus as K
from corral.domain.status import SessionResult
from corral.domain.status import SessionStatus as S

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_queue_priority_then_chain_submission_then_id() -> None:
    entries = [
        QueueEntry("c", 10, T0 + timedelta(seconds=5)),
        QueueEntry("b", 10, T0),
        QueueEntry("a", 10, T0),
        QueueEntry("z", 50, T0 + timedelta(hours=1)),
        QueueEntry("later", 99, T0, retry_after=T0 + timedelta(minutes=1)),
    ]
    assert [e.session_id for e in queue_order(entries, T0)] == ["z", "a", "b", "c"]
    assert queue_order(entries, T0 + timedelta(minutes=2))[0].session_id == "later"


@pytest.mark.parametrize(
    ("raw", "code", "sig"),
    [
        (0, 0, None),
        (3, 3, None),
        (-9, 137, 9),
        (137, 137, 9),
        (-15, 143, 15),
        (143, 143, 15),
        (255, 255, None),
        (128, 128, None),
    ],
)
def test_exit_normalisation(raw: int, code: int, sig: int | None) -> None:
    info = normalise_exit(raw)
    assert (info.exit_code, info.signal) == (code, sig)


def k(rank: int, status: K = K.TERMINATED, code: int | None = 0, **kw: object) -> KernelOutcome:
    return KernelOutcome(rank=rank, status=status, exit_code=code, started=True, **kw)  # type: ignore[arg-type]


def test_all_zero_is_success() -> None:
    v = final_verdict([k(0), k(1)], None)
    assert (v.status, v.result, v.cause) == (S.TERMINATED, SessionResult.SUCCESS, None)


def test_root_cause_is_the_earliest_own_failure_not_the_killed_peers() -> None:
    kernels = [
        k(0, K.ERROR, 143, signal=15, killed_by_corral=True, exited_at_ns=300),
        k(1, K.ERROR, 5, exited_at_ns=200),
        k(2, K.ERROR, 1, exited_at_ns=250),
    ]
    v = final_verdict(kernels, None)
    assert (v.status, v.cause, v.root_rank, v.exit_code) == (S.ERROR, Cause.KERNEL_NONZERO_EXIT, 1, 5)


def test_tie_on_time_breaks_by_rank() -> None:
    v = final_verdict([k(2, K.ERROR, 1, exited_at_ns=5), k(1, K.ERROR, 1, exited_at_ns=5)], None)
    assert v.root_rank == 1


def test_oom_and_agent_loss_causes() -> None:
    assert final_verdict([k(0, K.ERROR, 137, oom_killed=True)], None).cause is Cause.OOM_KILLED
    lost = KernelOutcome(rank=0, status=K.ERROR, agent_lost=True, started=True)
    assert final_verdict([lost], None).cause is Cause.AGENT_TRANSIENT


def test_cancel_before_start_is_cancelled_and_while_running_is_terminated() -> None:
    never = KernelOutcome(rank=0, status=K.CANCELLED)
    v = final_verdict([never], TerminationReason.USER_CANCELLED)
    assert (v.status, v.cause) == (S.CANCELLED, Cause.USER_CANCELLED)
    killed = k(0, K.ERROR, 143, signal=15, killed_by_corral=True)
    v = final_verdict([killed], TerminationReason.USER_CANCELLED)
    assert (v.status, v.cause) == (S.TERMINATED, Cause.USER_CANCELLED)


def test_deadline_is_an_error_with_its_cause() -> None:
    killed = k(0, K.ERROR, 143, signal=15, killed_by_corral=True)
    v = final_verdict([killed], TerminationReason.DEADLINE_EXCEEDED)
    assert (v.status, v.cause, v.exit_code) == (S.ERROR, Cause.DEADLINE_EXCEEDED, None)


def test_judgements_use_the_clock_given() -> None:
    limits = PhaseLimits(
        timeouts={S.PREPARING: timedelta(seconds=10), S.PENDING: None}, max_tries=3, max_reschedules=2
    )
    assert is_expired(S.PREPARING, T0, T0 + timedelta(seconds=11), limits)
    assert not is_expired(S.PREPARING, T0, T0 + timedelta(seconds=9), limits)
    assert not is_expired(S.PENDING, T0, T0 + timedelta(days=9), limits)  # pending_timeout off by default
    assert [gives_up(n, limits) for n in (1, 2, 3)] == [False, False, True]
    assert [reschedules_exhausted(n, limits) for n in (1, 2)] == [False, True]


def test_a_groups_queue_settings_override_the_managers() -> None:
    base = PhaseLimits(timeouts={S.PENDING: None, S.PREPARING: timedelta(60)})
    assert for_group(base, None) is base and for_group(base, {}) is base
    waits = for_group(base, {"pending_timeout": 5, "max_reschedules": 0})
    assert waits.timeouts[S.PENDING] == timedelta(seconds=5)
    assert waits.timeouts[S.PREPARING] == timedelta(60) and waits.max_reschedules == 0
    # 0 switches the timeout off again, whatever the manager's; unset keys keep the manager's.
    strict = PhaseLimits(timeouts={S.PENDING: timedelta(seconds=9)}, max_reschedules=7)
    forever = for_group(strict, {"pending_timeout": 0, "max_reschedules": None})
    assert forever.timeouts[S.PENDING] is None and forever.max_reschedules == 7
