"""Promotions decided by kernel statuses alone read only ids and statuses: they move exactly the
sessions, and write exactly the history, that reading whole sessions does (coordinator on a real
database, both paths, both backends)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from sqlalchemy import update

from corral.domain.judge import PhaseLimits
from corral.domain.spec import SessionSpec
from corral.domain.status import SessionStatus
from corral.manager.coordinator import Coordinator
from corral.manager.handlers.base import SessionPromotionHandler
from corral.manager.handlers.promote_prepared import PromoteToPrepared
from corral.store import journal, sessions
from corral.store.db import transaction
from corral.store.records import NewSession
from corral.store.tables import kernels as kernel_table
from corral.store.tables import sessions as session_table
from tests.conftest import BACKENDS
from tests.support.db import migrated

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)

# name: (session status, its kernels' statuses, termination requested), and whether it moves
CASES = {
    "ready": ("PREPARING", ["PREPARED"], False, True),
    "started alone": ("PREPARING", ["RUNNING"], False, True),
    "still preparing": ("PREPARING", ["PREPARING"], False, False),
    "gang half pulled": ("PREPARING", ["PREPARED", "PULLING"], False, False),
    "gang ready": ("PULLING", ["PREPARED", "CREATING"], False, True),
    "being stopped": ("PREPARING", ["PREPARED"], True, False),
    "not its status": ("CREATING", ["PREPARED"], False, False),
}


async def _scenario(engine: object) -> dict[str, str]:
    ids = {name: str(uuid.uuid4()) for name in CASES}
    async with transaction(engine) as conn:  # type: ignore[arg-type]
        for name, (status, kernel_statuses, stopping, _) in CASES.items():
            sid = ids[name]
            spec = SessionSpec(command=("true",), cluster_size=len(kernel_statuses))
            await sessions.insert_session(conn, NewSession(id=sid, name="p", owner="t", spec=spec), NOW)
            await conn.execute(
                update(session_table)
                .where(session_table.c.id == sid)
                .values(status=status, termination_reason="user_cancelled" if stopping else None)
            )
            for rank, kernel_status in enumerate(kernel_statuses):
                await conn.execute(
                    update(kernel_table)
                    .where(kernel_table.c.session_id == sid, kernel_table.c.rank == rank)
                    .values(status=kernel_status)
                )
    return ids


@pytest.mark.parametrize("status_only", [True, False], ids=["ids and statuses", "whole sessions"])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_promotion_moves_what_its_kernels_decide(
    backend: str, status_only: bool, fresh_database: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert PromoteToPrepared().decided_by_kernel_statuses  # the path under test is the one taken
    if not status_only:
        monkeypatch.setattr(SessionPromotionHandler, "decided_by_kernel_statuses", property(lambda _: False))
    async with migrated(fresh_database(backend)) as engine:
        ids = await _scenario(engine)
        coordinator = Coordinator(
            engine, "default", [PromoteToPrepared()], PhaseLimits(timeouts={}), lambda: NOW
        )
        assert await coordinator.run_cycle() == sum(moves for *_, moves in CASES.values())
        async with engine.connect() as conn:
            for name, (status, _, _, moves) in CASES.items():
                found = await sessions.get(conn, ids[name])
                history = await journal.history_of(conn, ids[name])
                assert found is not None
                if moves:
                    assert found.status is SessionStatus.PREPARED, name
                    assert found.status_changed_at == NOW, name
                    assert [(h.handler, h.result, h.from_status, h.to_status) for h in history] == [
                        ("PromoteToPrepared", "SUCCESS", status, "PREPARED")
                    ], name
                else:
                    assert (str(found.status), history) == (status, []), name


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_handler_that_found_nothing_still_finds_what_comes_later(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """After a cycle in which it found nothing, a handler first probes for targets: what arrived
    since is moved in the next cycle all the same."""
    async with migrated(fresh_database(backend)) as engine:
        coordinator = Coordinator(
            engine, "default", [PromoteToPrepared()], PhaseLimits(timeouts={}), lambda: NOW
        )
        assert await coordinator.run_cycle() == 0  # nothing yet: probed from now on
        ids = await _scenario(engine)
        assert await coordinator.run_cycle() == sum(moves for *_, moves in CASES.values())
        async with engine.connect() as conn:
            found = await sessions.get(conn, ids["ready"])
        assert found is not None and found.status is SessionStatus.PREPARED
