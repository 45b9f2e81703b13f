"""Each handler's declared moves are legal transitions; promotions match their seed table rows."""

from __future__ import annotations

import pytest

from corral.domain.scheduling import KernelMatchType, kernels_match
from corral.domain.status import KernelStatus as K
from corral.domain.status import SessionStatus as S
from corral.domain.transitions import kernel_move_allowed, session_move_allowed
from corral.manager.handlers import cycle_handlers
from corral.manager.handlers.base import LifecycleHandler, SessionPromotionHandler

HANDLERS = cycle_handlers()


@pytest.mark.parametrize("handler", HANDLERS, ids=lambda h: h.name)
def test_declared_moves_are_legal(handler: LifecycleHandler | SessionPromotionHandler) -> None:
    if isinstance(handler, SessionPromotionHandler):
        # Every target status reaches the success status through the declared steps, each step a
        # legal move (a session already at a step goes on from the next one).
        path = [step.status for step in handler.through] + [handler.success_session_status()]
        assert handler.last_step is None or handler.last_step.status is path[-1]
        for src in handler.target_session_statuses:
            at = src
            for dst in path[path.index(src) + 1 if src in path else 0 :]:
                assert session_move_allowed(at, dst), f"{handler.name}: {at} -> {dst}"
                at = dst
        return
    t = handler.status_transitions()
    at = t.success.session if t.success else None
    for step in handler.then:  # its successes go on, step by step, each a legal move
        assert at is not None and session_move_allowed(at, step.status), (
            f"{handler.name}: {at} -> {step.status}"
        )
        at = step.status
    for outcome in (t.success, t.need_retry, t.expired, t.give_up):
        if outcome is None or outcome.session is None:
            continue
        legal = [src for src in handler.target_session_statuses if session_move_allowed(src, outcome.session)]
        assert legal, f"{handler.name}: no target status may move to {outcome.session}"
        if outcome.kernel is not None:
            assert any(kernel_move_allowed(k, outcome.kernel) for k in K)


def test_seed_table_rows() -> None:
    by_name = {h.name: h for h in HANDLERS}
    sched = by_name["ScheduleNewSessions"]
    assert isinstance(sched, LifecycleHandler)
    t = sched.status_transitions()
    assert t.success and t.success.session is S.SCHEDULED and t.need_retry is None
    assert t.expired and t.expired.session is S.CANCELLED and t.give_up and t.give_up.session is S.CANCELLED
    for name in ("PrepareSessions", "StartSessions"):
        h = by_name[name]
        assert isinstance(h, LifecycleHandler)
        t = h.status_transitions()
        assert t.expired and t.expired.session is S.PENDING and t.give_up and t.give_up.session is S.PENDING
    term = by_name["TerminateSessions"]
    assert isinstance(term, LifecycleHandler) and term.status_transitions().success is None


@pytest.mark.parametrize(
    ("statuses", "check", "match", "expected"),
    [
        ([K.RUNNING, K.RUNNING], {K.RUNNING}, KernelMatchType.ALL, True),
        ([K.RUNNING, K.CREATING], {K.RUNNING}, KernelMatchType.ALL, False),
        ([K.RUNNING, K.CREATING], {K.CREATING}, KernelMatchType.ANY, True),
        ([K.RUNNING], {K.CREATING}, KernelMatchType.ANY, False),
        ([K.RUNNING, K.ERROR], {K.CREATING}, KernelMatchType.NOT_ANY, True),
        ([K.CREATING], {K.CREATING}, KernelMatchType.NOT_ANY, False),
        ([], {K.CREATING}, KernelMatchType.ALL, True),
        ([], {K.CREATING}, KernelMatchType.ANY, False),
    ],
)
def test_kernels_match(statuses: list[K], check: set[K], match: KernelMatchType, expected: bool) -> None:
    assert kernels_match(statuses, frozenset(check), match) is expected
