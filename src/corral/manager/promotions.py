"""A promotion's moves and history rows, from the targets it matched: no I/O."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.history import HistoryRow
from corral.domain.records import Move, SessionRecord
from corral.domain.scheduling import SchedulingResult
from corral.domain.status import SessionStatus
from corral.domain.verdicts import Step, passed_rows, verdict_values
from corral.manager.handlers.base import SessionPromotionHandler


def _recorded(handler: SessionPromotionHandler) -> tuple[str, str]:
    """The handler name and message of a promotion's final move's history row."""
    step = handler.last_step
    return (step.handler, step.message) if step else (handler.name, "")


def _ahead(handler: SessionPromotionHandler, src: SessionStatus) -> tuple[Step, ...]:
    """The `through` steps a promotion's move from `src` passes: those after `src` (all of them
    from a status not on that path)."""
    path = [step.status for step in handler.through]
    return handler.through[path.index(src) + 1 :] if src in path else handler.through


def _via(handler: SessionPromotionHandler, src: SessionStatus) -> tuple[SessionStatus, ...]:
    return tuple(step.status for step in _ahead(handler, src))


def _rows(handler: SessionPromotionHandler, m: Move, name: str, message: str) -> list[HistoryRow]:
    """A promotion's history rows for one move: one per status passed, then the final one
    (`name`, `message`)."""
    passed = passed_rows(m.session_id, SchedulingResult.SUCCESS, m.src, _ahead(handler, m.src))
    last = HistoryRow(m.session_id, name, SchedulingResult.SUCCESS, (m.src, *m.via)[-1], m.dst, message)
    return [*passed, last]


def promote(
    handler: SessionPromotionHandler, targets: Sequence[SessionRecord]
) -> tuple[list[Move], list[HistoryRow]]:
    """The move of each target (`matches` already said it is one) and its history rows."""
    moves: list[Move] = []
    history: list[HistoryRow] = []
    name, message = _recorded(handler)
    for s in targets:
        verdict = handler.verdict(s)
        dst = verdict.status if verdict else handler.success_session_status()
        values = verdict_values(verdict) if verdict else ()
        unrequested = handler.termination_requested is False
        moves.append(Move(s.id, s.status, dst, None, values, _via(handler, s.status), (), unrequested))
        cause = f"cause {verdict.cause}" if verdict and verdict.cause else message
        history += _rows(handler, moves[-1], name, cause)
    return moves, history


def promote_found(
    handler: SessionPromotionHandler, found: Sequence[tuple[str, SessionStatus]]
) -> tuple[list[Move], list[HistoryRow]]:
    """`promote` for a promotion its targets' read decides alone (`decided_by_kernel_statuses`):
    the same moves and rows from the targets' ids and statuses."""
    dst = handler.success_session_status()
    unrequested = handler.termination_requested is False
    moves = [Move(sid, src, dst, None, (), _via(handler, src), (), unrequested) for sid, src in found]
    name, message = _recorded(handler)
    return moves, [row for m in moves for row in _rows(handler, m, name, message)]
