"""Promotions decided by kernel statuses alone read only ids and statuses: they move exactly the
sessions, and write exactly the history, that reading whole sessions does (coordinator on a real
database, both paths, both backends)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from itertools import pairwise

import pytest
from sqlalchemy import insert, select, update

from corral.domain.errors import RefusedTransition
from corral.domain.judge import PhaseLimits
from corral.domain.records import HistoryRecord, Move, NewSession
from corral.domain.resources import ResourceSlots
from corral.domain.spec import SessionSpec
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.coordinator import Coordinator
from corral.manager.handlers.base import SessionPromotionHandler
from corral.manager.handlers.detect_termination import DetectTermination
from corral.manager.handlers.promote_ended import PromoteEnded
from corral.manager.handlers.promote_prepared import PromoteToPrepared
from corral.manager.handlers.promote_running_alone import PromoteRunningAlone
from corral.manager.handlers.promote_started import PromoteStartedAlone
from corral.manager.handlers.promote_terminated import PromoteToTerminated
from corral.manager.handlers.schedule_new import ScheduleNewSessions
from corral.services.agent_protocol import AgentProtocol
from corral.settings import SchedulerSettings
from corral.store import journal, sessions
from corral.store.db import transaction
from corral.store.tables import agents as agent_table
from corral.store.tables import allocations, session_events
from corral.store.tables import kernels as kernel_table
from corral.store.tables import resource_groups as group_table
from corral.store.tables import sessions as session_table
from corral.wakeup import Wakeup
from tests.conftest import BACKENDS
from tests.support.db import migrated, register_agent

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


@pytest.fixture(params=[True, False], ids=["ids and statuses", "whole sessions"])
def status_only(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both read paths of a promotion: its targets' ids and statuses alone (what the coordinator
    takes when that decides), or whole sessions with their kernels (`matches`)."""
    if not request.param:
        monkeypatch.setattr(SessionPromotionHandler, "decided_by_kernel_statuses", property(lambda _: False))
    return bool(request.param)


def _history_rows(history: Sequence[HistoryRecord]) -> list[tuple[str, str, str, str | None, str]]:
    return [(h.handler, h.result, h.from_status, h.to_status, h.message) for h in history]


async def _scenario(
    engine: object, cases: dict[str, tuple[str, list[str], bool, bool]] = CASES
) -> dict[str, str]:
    """The cases' sessions; a kernel status "TERMINATED:<code>" is an ended kernel and its exit code."""
    ids = {name: str(uuid.uuid4()) for name in cases}
    async with transaction(engine) as conn:  # type: ignore[arg-type]
        for name, (status, kernel_statuses, stopping, _) in cases.items():
            sid = ids[name]
            spec = SessionSpec(command=("true",), cluster_size=len(kernel_statuses))
            await sessions.insert_session(conn, NewSession(id=sid, name="p", owner="t", spec=spec), NOW)
            await conn.execute(
                update(session_table)
                .where(session_table.c.id == sid)
                .values(status=status, termination_reason="user_cancelled" if stopping else None)
            )
            for rank, kernel_status in enumerate(kernel_statuses):
                kernel_status, _, code = kernel_status.partition(":")
                await conn.execute(
                    update(kernel_table)
                    .where(kernel_table.c.session_id == sid, kernel_table.c.rank == rank)
                    .values(status=kernel_status, exit_code=int(code) if code else None)
                )
    return ids


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_promotion_moves_what_its_kernels_decide(
    backend: str, status_only: bool, fresh_database: Callable[[str], str]
) -> None:
    assert PromoteToPrepared().decided_by_kernel_statuses is status_only  # the path under test is taken
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


# DetectTermination: before RUNNING only a failed kernel stops a session (read only then); RUNNING
# stops on a failure or once every kernel has ended.
ENDINGS = {
    "started alone and exited 0": ("PREPARED", ["TERMINATED:0"], False, False),
    "started alone and exited 1": ("PREPARED", ["TERMINATED:1"], False, True),
    "gang, rank 0 exited 0 early": ("PREPARING", ["TERMINATED:0", "PREPARING"], False, False),
    "gang, a kernel in ERROR": ("CREATING", ["CREATING", "ERROR"], False, True),
    "gang, a kernel cancelled": ("PULLING", ["CANCELLED", "PULLING"], False, True),
    "running, all exited 0": ("RUNNING", ["TERMINATED:0", "TERMINATED:0"], False, True),
    "running, one exited 0": ("RUNNING", ["TERMINATED:0", "RUNNING"], False, False),
    "running, one exited 2": ("RUNNING", ["RUNNING", "TERMINATED:2"], False, True),
    "running, being stopped": ("RUNNING", ["TERMINATED:0"], True, True),
}


@pytest.mark.parametrize("filtered", [True, False], ids=["failed kernels only", "every ended kernel"])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_session_stops_exactly_when_its_kernels_say_so_read_filtered_or_not(
    backend: str, filtered: bool, fresh_database: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read's filter on startup statuses (a failed kernel) leaves out only what `matches`
    would refuse: the same sessions stop either way."""
    assert DetectTermination().failed_kernel_only  # the filter under test is the one in use
    if not filtered:
        monkeypatch.setattr(DetectTermination, "failed_kernel_only", frozenset())
    async with migrated(fresh_database(backend)) as engine:
        ids = await _scenario(engine, ENDINGS)
        coordinator = Coordinator(
            engine, "default", [DetectTermination()], PhaseLimits(timeouts={}), lambda: NOW
        )
        assert await coordinator.run_cycle() == sum(moves for *_, moves in ENDINGS.values())
        async with engine.connect() as conn:
            for name, (status, _, _, moves) in ENDINGS.items():
                found = await sessions.get(conn, ids[name])
                assert found is not None
                assert str(found.status) == ("TERMINATING" if moves else status), name


# PromoteStartedAlone: every kernel started by itself and none failed -> CREATING in one step,
# passing PREPARED (a session already there goes on from it); anything else waits for the handlers
# one by one.
STARTED = {
    "one kernel, running": ("PREPARING", ["RUNNING"], False, True),
    "one kernel, creating": ("PREPARING", ["CREATING"], False, True),
    "scheduled, already running": ("SCHEDULED", ["RUNNING"], False, True),
    "gang pulled, one running one creating": ("PULLING", ["RUNNING", "CREATING"], False, True),
    "already prepared": ("PREPARED", ["RUNNING"], False, True),
    "exited 0 before a cycle saw it": ("PREPARING", ["TERMINATED:0"], False, True),
    "a rank stopping, one running": ("PREPARING", ["TERMINATING", "RUNNING"], False, True),
    "exited 1": ("PREPARING", ["TERMINATED:1"], False, False),
    "a rank in ERROR": ("PREPARING", ["RUNNING", "ERROR"], False, False),
    "waits for its start order": ("PREPARED", ["PREPARED", "PREPARED"], False, False),
    "a rank still prepared": ("PREPARING", ["RUNNING", "PREPARED"], False, False),
    "a rank still preparing": ("PREPARING", ["RUNNING", "PREPARING"], False, False),
    "being stopped": ("PREPARING", ["RUNNING"], True, False),
    "creating: PromoteToRunning's": ("CREATING", ["RUNNING"], False, False),
}
_PATH = [
    ("PromoteToPrepared", "PREPARED", ""),
    ("StartSessions", "CREATING", "started by its agents as soon as prepared"),
]


# PromoteRunningAlone: every kernel runs (or ran) by itself and none failed -> RUNNING in one step,
# passing PREPARED and CREATING (a session already at one goes on from it); the rest is left to
# PromoteStartedAlone or the handlers one by one.
RUNNING_ALONE = {
    "one kernel, running": ("PREPARING", ["RUNNING"], False, True),
    "scheduled, already running": ("SCHEDULED", ["RUNNING"], False, True),
    "gang pulled, both running": ("PULLING", ["RUNNING", "RUNNING"], False, True),
    "already prepared": ("PREPARED", ["RUNNING"], False, True),
    "exited 0 before a cycle saw it": ("PREPARING", ["TERMINATED:0"], False, True),
    "a rank stopping, one running": ("PREPARING", ["TERMINATING", "RUNNING"], False, True),
    "one kernel, creating": ("PREPARING", ["CREATING"], False, False),
    "gang, one running one creating": ("PULLING", ["RUNNING", "CREATING"], False, False),
    "exited 1": ("PREPARING", ["TERMINATED:1"], False, False),
    "a rank in ERROR": ("PREPARING", ["RUNNING", "ERROR"], False, False),
    "waits for its start order": ("PREPARED", ["PREPARED", "PREPARED"], False, False),
    "a rank still preparing": ("PREPARING", ["RUNNING", "PREPARING"], False, False),
    "being stopped": ("PREPARING", ["RUNNING"], True, False),
    "creating: PromoteToRunning's": ("CREATING", ["RUNNING"], False, False),
}


@pytest.mark.parametrize(
    ("handler", "cases", "path"),
    [
        (PromoteStartedAlone(), STARTED, _PATH),
        (PromoteRunningAlone(), RUNNING_ALONE, [*_PATH, ("PromoteToRunning", "RUNNING", "")]),
    ],
    ids=["started alone", "running alone"],
)
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_session_moved_alone_passes_its_steps_in_one(
    backend: str,
    status_only: bool,
    fresh_database: Callable[[str], str],
    handler: SessionPromotionHandler,
    cases: dict[str, tuple[str, list[str], bool, bool]],
    path: list[tuple[str, str, str]],
) -> None:
    """Each one-step promotion writes the statuses and history rows its handlers one by one would."""
    assert handler.decided_by_kernel_statuses is status_only  # the path under test is taken
    async with migrated(fresh_database(backend)) as engine:
        ids = await _scenario(engine, cases)
        coordinator = Coordinator(engine, "default", [handler], PhaseLimits(timeouts={}), lambda: NOW)
        expected: dict[str, list[tuple[str, str, str, str, str]]] = {}
        on_path = [to for _, to, _ in path]
        for name, (status, _, _, moves) in cases.items():
            steps = path[on_path.index(status) + 1 if status in on_path else 0 :] if moves else []
            froms = [status] + [to for _, to, _ in steps]
            expected[name] = [
                (h, "SUCCESS", src, to, m) for (h, to, m), src in zip(steps, froms, strict=False)
            ]
        assert await coordinator.run_cycle() == sum(moves for *_, moves in cases.values())
        async with engine.connect() as conn:
            for name, (status, _, _, moves) in cases.items():
                found = await sessions.get(conn, ids[name])
                history = await journal.history_of(conn, ids[name])
                assert found is not None
                assert str(found.status) == (on_path[-1] if moves else status), name
                assert _history_rows(history) == expected[name], name
                if moves:
                    assert found.status_changed_at == NOW, name


# PromoteEnded: a RUNNING session whose kernels all ended ends in one step; the same outcome and
# the same history rows as DetectTermination then PromoteToTerminated, each in its own transaction.
ENDED = {
    "one kernel exited 0": ("RUNNING", ["TERMINATED:0"], False, True),
    "one kernel exited 3": ("RUNNING", ["TERMINATED:3"], False, True),
    "gang, both exited 0": ("RUNNING", ["TERMINATED:0", "TERMINATED:0"], False, True),
    "gang, rank 1 exited 1": ("RUNNING", ["TERMINATED:0", "TERMINATED:1"], False, True),
    "gang, a kernel in ERROR": ("RUNNING", ["ERROR", "TERMINATED:0"], False, True),
    "gang, one still running": ("RUNNING", ["TERMINATED:0", "RUNNING"], False, False),
    "being stopped": ("RUNNING", ["TERMINATED:0"], True, False),
    "not yet running": ("CREATING", ["TERMINATED:0"], False, False),
}


async def _outcomes(engine: object, ids: dict[str, str]) -> dict[str, tuple[object, ...]]:
    found: dict[str, tuple[object, ...]] = {}
    async with engine.connect() as conn:  # type: ignore[attr-defined]
        for name, sid in ids.items():
            s = await sessions.get(conn, sid)
            assert s is not None
            rows = _history_rows(await journal.history_of(conn, sid))
            found[name] = (str(s.status), str(s.result), s.cause, s.exit_code, s.root_rank, rows)
    return found


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_running_session_whose_kernels_all_ended_ends_in_one_step_as_in_two(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        one, two = await _scenario(engine, ENDED), await _scenario(engine, ENDED)
        async with transaction(engine) as conn:  # the second set in a group of its own
            await conn.execute(insert(group_table).values(name="b", created_at=NOW))
            await conn.execute(
                update(session_table)
                .where(session_table.c.id.in_(list(two.values())))
                .values(resource_group="b")
            )
        fused = Coordinator(engine, "default", [PromoteEnded()], PhaseLimits(timeouts={}), lambda: NOW)
        assert await fused.run_cycle() == sum(moves for *_, moves in ENDED.values())
        apart = Coordinator(
            engine, "b", [DetectTermination(), PromoteToTerminated()], PhaseLimits(timeouts={}), lambda: NOW
        )
        await apart.run_cycle()
        fused_out, apart_out = await _outcomes(engine, one), await _outcomes(engine, two)
        for name, (status, _, _, moves) in ENDED.items():
            if moves:
                assert fused_out[name] == apart_out[name], name
                assert fused_out[name][0] in ("TERMINATED", "ERROR"), name
            else:
                assert (fused_out[name][0], fused_out[name][-1]) == (status, []), name


@pytest.mark.parametrize(
    ("src", "via", "dst", "legal"),
    [
        ("PREPARING", ("PREPARED",), "CREATING", True),
        ("RUNNING", ("TERMINATING",), "TERMINATED", True),
        ("PREPARING", ("CREATING",), "RUNNING", False),  # PREPARING -> CREATING is no transition
        ("PREPARED", ("CREATING", "RUNNING"), "TERMINATING", False),  # RUNNING sets started_at
        ("SCHEDULED", ("PENDING",), "SCHEDULED", False),  # PENDING frees the allocation
    ],
)
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_move_passing_statuses_is_every_hop_or_nothing(
    backend: str, src: str, via: tuple[str, ...], dst: str, legal: bool, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        [sid] = (await _scenario(engine, {"s": (src, ["RUNNING"], False, True)})).values()
        move = Move(sid, SessionStatus(src), SessionStatus(dst), via=tuple(map(SessionStatus, via)))
        if not legal:
            with pytest.raises(RefusedTransition):
                async with transaction(engine) as conn:
                    await sessions.apply_moves(conn, [move], NOW)
        else:
            async with transaction(engine) as conn:
                assert await sessions.apply_moves(conn, [move], NOW) == [move]
        async with engine.connect() as conn:
            found = await sessions.get(conn, sid)
            events = await conn.execute(
                select(session_events.c.from_status, session_events.c.to_status)
                .where(session_events.c.session_id == sid, session_events.c.from_status.is_not(None))
                .order_by(session_events.c.id)
            )
            hops = [src, *via, dst]
            assert found is not None and str(found.status) == (dst if legal else src)
            assert list(events) == (list(pairwise(hops)) if legal else [])


@pytest.mark.parametrize(
    ("handler", "moved_to"),
    [(PromoteStartedAlone(), SessionStatus.CREATING), (PromoteRunningAlone(), SessionStatus.RUNNING)],
    ids=lambda v: v.name if isinstance(v, SessionPromotionHandler) else str(v),
)
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_session_started_alone_on_a_lost_agent_takes_the_long_way(
    backend: str,
    status_only: bool,
    fresh_database: Callable[[str], str],
    handler: SessionPromotionHandler,
    moved_to: SessionStatus,
) -> None:
    """StartSessions fails a session whose agent is not ALIVE: each one-step promotion leaves such a
    session to it, and moves its twin on a live agent."""
    async with migrated(fresh_database(backend)) as engine:
        ids = await _scenario(
            engine, {name: ("PREPARING", ["RUNNING"], False, True) for name in ("lost", "alive")}
        )
        async with transaction(engine) as conn:
            for agent, status in (("gone", "LOST"), ("here", "ALIVE")):
                await register_agent(conn, agent, {"cpu": 4}, now=NOW)
                await conn.execute(update(agent_table).where(agent_table.c.id == agent).values(status=status))
            for name, agent in (("lost", "gone"), ("alive", "here")):
                await conn.execute(
                    update(kernel_table).where(kernel_table.c.session_id == ids[name]).values(agent_id=agent)
                )
        coordinator = Coordinator(engine, "default", [handler], PhaseLimits(timeouts={}), lambda: NOW)
        assert await coordinator.run_cycle() == 1
        async with engine.connect() as conn:
            lost, alive = await sessions.get(conn, ids["lost"]), await sessions.get(conn, ids["alive"])
        assert lost is not None and alive is not None
        assert (lost.status, alive.status) == (SessionStatus.PREPARING, moved_to)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_move_whose_rule_asks_no_stop_loses_to_a_stop_asked_since_the_read(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """A stop requested after a handler read its targets (another transaction, another manager)
    makes its move lose, as a status change would: a session being cancelled is never handed
    orders, nor promoted past it."""
    async with migrated(fresh_database(backend)) as engine:
        ids = await _scenario(
            engine, {n: ("PREPARING", ["RUNNING"], n == "stopping", True) for n in ("stopping", "not")}
        )
        moves = [
            Move(
                sid,
                SessionStatus.PREPARING,
                SessionStatus.CREATING,
                via=(SessionStatus.PREPARED,),
                unrequested=True,
            )
            for sid in ids.values()
        ]
        async with transaction(engine) as conn:
            won = await sessions.apply_moves(conn, moves, NOW)
        assert [m.session_id for m in won] == [ids["not"]]
        async with engine.connect() as conn:
            stopping = await sessions.get(conn, ids["stopping"])
        assert stopping is not None and stopping.status is SessionStatus.PREPARING


@pytest.mark.parametrize("backend", BACKENDS)
async def test_placement_hands_over_in_the_same_update_and_the_agent_sees_the_orders(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """ScheduleNewSessions' successes go on to PREPARING (PrepareSessions' rule): the session and
    its kernels are PREPARING on the agent placed, with its allocation, a history and an event row
    per status passed, and the agent's next poll holds the order (a gang on one agent: start at
    once, rank 0 picks the port)."""
    async with migrated(fresh_database(backend)) as engine:
        sid = str(uuid.uuid4())
        async with transaction(engine) as conn:
            epoch = await register_agent(conn, "a", {"cpu": 4}, now=NOW)
            spec = SessionSpec(command=("true",), cluster_size=2, resources=ResourceSlots.parse({"cpu": 1}))
            await sessions.insert_session(conn, NewSession(id=sid, name="g", owner="t", spec=spec), NOW)
        coordinator = Coordinator(
            engine, "default", [ScheduleNewSessions()], PhaseLimits(timeouts={}), lambda: NOW
        )
        assert await coordinator.run_cycle() == 1
        async with engine.connect() as conn:
            found = await sessions.get(conn, sid)
            history = await journal.history_of(conn, sid)
            events = await conn.execute(
                select(session_events.c.from_status, session_events.c.to_status)
                .where(session_events.c.session_id == sid, session_events.c.from_status.is_not(None))
                .order_by(session_events.c.id)
            )
            held = await conn.execute(
                select(allocations.c.kernel_id, allocations.c.agent_id).where(
                    allocations.c.released_at.is_(None)
                )
            )
            assert found is not None and found.status is SessionStatus.PREPARING
            assert [(k.status, k.agent_id) for k in found.kernels] == [(KernelStatus.PREPARING, "a")] * 2
            assert sorted(held) == sorted((k.id, "a") for k in found.kernels)
            assert [(h.handler, h.from_status, h.to_status, h.message) for h in history] == [
                ("ScheduleNewSessions", "PENDING", "SCHEDULED", "placed on a, a"),
                ("PrepareSessions", "SCHEDULED", "PREPARING", "prepare orders handed to agents"),
            ]
            assert list(events) == [("PENDING", "SCHEDULED"), ("SCHEDULED", "PREPARING")]
        protocol = AgentProtocol(engine, SchedulerSettings(), Wakeup(), log_cap=1 << 20)
        _, orders, _ = await protocol.orders("a", epoch, "", 0)
        mine = sorted(
            (o.model_dump(mode="json") for o in orders if o.session_id == sid), key=lambda o: o["rank"]
        )
        assert [(o["status"], o["spec"]["start_at_once"]) for o in mine] == [("PREPARING", True)] * 2
        assert [o["spec"]["pick_master_port"] for o in mine] == [True, False]
