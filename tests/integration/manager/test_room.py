"""Placement runs when room may have been made: a cycle woken only by kernels' progress skips it, a
timed cycle or a cycle after room was made never does (coordinator on a real database)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence

import pytest
from sqlalchemy import event, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.judge import PhaseLimits
from corral.domain.records import NewSession, SessionRecord
from corral.domain.resources import ResourceSlots
from corral.domain.scheduling import StatusTransitions
from corral.domain.spec import SessionSpec
from corral.domain.status import SessionStatus
from corral.manager.coordinator import Coordinator
from corral.manager.handlers.base import HandlerContext, LifecycleHandler, LifecycleResult
from corral.manager.handlers.cancel_pending import CancelPendingSessions
from corral.manager.handlers.prepare import PrepareSessions
from corral.manager.handlers.schedule_new import ScheduleNewSessions
from corral.manager.loop import SchedulerLoop
from corral.settings import SchedulerSettings
from corral.store import agents, journal, kernels, sessions
from corral.store.db import transaction
from corral.store.tables import agents as agent_table
from corral.store.tables import kernels as kernel_table
from corral.store.tables import sessions as session_table
from corral.wakeup import Wakeup
from tests.conftest import BACKENDS
from tests.integration.api.test_bounds import NOW, _insert
from tests.support.db import migrated, register_agent


async def _skips(engine: object, sid: str) -> int:
    """How many cycles placement looked at the session and left it waiting (no agent here)."""
    async with engine.connect() as conn:  # type: ignore[attr-defined]
        history = await journal.history_of(conn, sid)
    return sum(h.count for h in history if h.result == "SKIPPED")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_placement_runs_only_when_room_may_have_been_made(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        [waiting, cancelled] = await _insert(engine, 2, 10, NOW)
        handlers = [CancelPendingSessions(), ScheduleNewSessions()]
        coordinator = Coordinator(engine, "default", handlers, PhaseLimits(timeouts={}), lambda: NOW)
        await coordinator.run_cycle(timed=False, room=True)
        assert await _skips(engine, waiting) == 1
        await coordinator.run_cycle(timed=False, room=False)
        assert await _skips(engine, waiting) == 1  # nothing changed: not looked at again
        await coordinator.run_cycle(timed=True, room=False)
        assert await _skips(engine, waiting) == 2  # a timed cycle always places
        async with transaction(engine) as conn:
            await sessions.request_termination(conn, cancelled, "user_cancelled", "", NOW)
        # Cancelling a queued session changes the queue: placement runs in that same cycle.
        await coordinator.run_cycle(timed=False, room=False)
        assert await _skips(engine, waiting) == 3
        assert coordinator.room_left is False


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_full_window_that_placed_leaves_room_for_the_next_cycle(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        window = ScheduleNewSessions.queue_window
        assert window is not None
        async with transaction(engine) as conn:
            await agents.ensure_resource_group(conn, "default", NOW)
            await register_agent(conn, "big", {"cpu": 10_000, "mem": "10000G"}, hostname="h", now=NOW)
        await _insert(engine, window + 88, 10, NOW)
        coordinator = Coordinator(
            engine, "default", [ScheduleNewSessions()], PhaseLimits(timeouts={}), lambda: NOW
        )
        # A cycle reads one window: the room a full one leaves is the next cycle's (placement does
        # not run again at this cycle's end for it).
        assert await coordinator.run_cycle(timed=False, room=True) == window
        assert coordinator.room_left  # more may fit behind the window it read
        assert await coordinator.run_cycle(timed=False, room=coordinator.room_left) == 88
        assert not coordinator.room_left


@pytest.mark.parametrize("backend", BACKENDS)
async def test_room_reaches_every_group_loop(backend: str, fresh_database: Callable[[str], str]) -> None:
    """One manager runs a loop per resource group, all woken by one Wakeup: a kernel ending in one
    group must not be taken by another group's loop."""
    async with migrated(fresh_database(backend)) as engine:
        async with transaction(engine) as conn:
            await agents.ensure_resource_group(conn, "default", NOW)
            await agents.ensure_resource_group(conn, "other", NOW)
            ids = {}
            for group in ("default", "other"):
                spec = SessionSpec(command=("true",), resource_group=group)
                ids[group] = str(uuid.uuid4())
                await sessions.insert_session(
                    conn, NewSession(id=ids[group], name="w", owner="t", spec=spec), NOW
                )
        wakeup = Wakeup()
        cfg = SchedulerSettings(sweep_interval=5)  # only the first cycle of each loop is timed
        loops = [SchedulerLoop(engine, g, cfg, wakeup, holder="m1") for g in ("default", "other")]

        async def counts() -> list[int]:
            return [await _skips(engine, ids[g]) for g in ("default", "other")]

        for loop in loops:
            await loop.run_once()
        assert await counts() == [1, 1]
        wakeup.scheduler(room=False)  # kernels progressing: nobody places again
        for loop in loops:
            await loop.run_once()
        assert await counts() == [1, 1]
        wakeup.scheduler()  # room (in either group): every loop places
        for loop in loops:
            await loop.run_once()
        assert await counts() == [2, 2]
        await wakeup.receive("scheduler")  # another manager's wake-up does not say which: room
        for loop in loops:
            await loop.run_once()
        assert await counts() == [3, 3]


async def _insert_sized(engine: object, n: int, priority: int, cpu: int) -> list[str]:
    ids = [str(uuid.uuid4()) for _ in range(n)]
    async with transaction(engine) as conn:  # type: ignore[arg-type]
        for sid in ids:
            spec = SessionSpec(
                command=("true",), priority=priority, resources=ResourceSlots.parse({"cpu": cpu})
            )
            await sessions.insert_session(conn, NewSession(id=sid, name="b", owner="t", spec=spec), NOW)
    return ids


async def _one_agent(engine: object, cpu: int) -> None:
    async with transaction(engine) as conn:  # type: ignore[arg-type]
        await agents.ensure_resource_group(conn, "default", NOW)
        await register_agent(conn, "small", {"cpu": cpu, "mem": "64G"}, hostname="h", now=NOW)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_placement_reads_past_a_page_while_room_is_left(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """The queue is read a page at a time; a session that fits behind a page of ones that do not is
    still found in the same cycle (backfill reaches as deep as the whole window)."""
    page = ScheduleNewSessions.queue_page
    assert page is not None
    async with migrated(fresh_database(backend)) as engine:
        await _one_agent(engine, cpu=2)
        await _insert_sized(engine, page + 10, priority=9, cpu=4)  # never fit: read on past them
        [small] = await _insert_sized(engine, 1, priority=1, cpu=1)
        coordinator = Coordinator(
            engine, "default", [ScheduleNewSessions()], PhaseLimits(timeouts={}), lambda: NOW
        )
        assert await coordinator.run_cycle(timed=True) == 1
        async with transaction(engine) as conn:
            found = await sessions.get(conn, small)
        assert found is not None and found.status.value == "PREPARING"  # placed and handed over


@pytest.mark.parametrize("backend", BACKENDS)
async def test_placement_stops_reading_once_nothing_more_fits(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """A busy cluster with room for two reads one page of a long queue, not the whole window: the
    sessions past the page are not looked at (no note that they wait) until they come closer."""
    page = ScheduleNewSessions.queue_page
    assert page is not None
    async with migrated(fresh_database(backend)) as engine:
        await _one_agent(engine, cpu=2)
        queued = sorted(await _insert_sized(engine, 3 * page, priority=5, cpu=1))  # queue order: by id
        coordinator = Coordinator(
            engine, "default", [ScheduleNewSessions()], PhaseLimits(timeouts={}), lambda: NOW
        )
        assert await coordinator.run_cycle(timed=True) == 2
        assert not coordinator.room_left  # nothing more fits: the next cycle waits for room
        assert await _skips(engine, queued[page - 1]) == 1  # on the first page: told why it waits
        assert await _skips(engine, queued[page]) == 0  # past it: not read at all


@pytest.mark.parametrize("backend", BACKENDS)
async def test_placement_reads_on_as_many_as_could_still_fit(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """Past its first page, placement reads as many sessions as the CPU left could take (were they
    all as small as the smallest read so far) in one page: with room for 80, no session past the
    80th is read and told it waits (pages of 32 read 96).  The window still bounds what is read.
    Only statuses the group's sessions are in are read (each is a seek of its own)."""
    page = ScheduleNewSessions.queue_page
    window = ScheduleNewSessions.queue_window
    assert page is not None and window is not None
    room = 2 * page + page // 2
    async with migrated(fresh_database(backend)) as engine:
        await _one_agent(engine, cpu=room)
        queued = sorted(await _insert_sized(engine, 4 * page, priority=5, cpu=1))  # queue order: by id
        coordinator = Coordinator(
            engine, "default", [ScheduleNewSessions()], PhaseLimits(timeouts={}), lambda: NOW
        )
        sent: list[str] = []
        event.listen(engine.sync_engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
        assert await coordinator.run_cycle(timed=True) == room
        # Two pages, each one read: no session is SUSPENDED, so that status is not sought.
        assert len([q for q in sent if q.startswith("SELECT sessions.id, sessions.name")]) == 2
        assert await _skips(engine, queued[room - 1]) == 0  # placed
        assert await _skips(engine, queued[room]) == 0  # not read
        # Room for more than the window: the window is read and placed, and no more.
        queued = sorted(queued[room:] + await _insert_sized(engine, window, priority=5, cpu=1))
        async with transaction(engine) as conn:
            await register_agent(conn, "big", {"cpu": 2 * window, "mem": "64G"}, hostname="h2", now=NOW)
        assert await coordinator.run_cycle(timed=True) == window
        async with transaction(engine) as conn:
            after = {s.id: s.status for s in await sessions.get_many(conn, queued[window - 1 : window + 1])}
        assert [after[sid] for sid in queued[window - 1 : window + 1]] == ["PREPARING", "PENDING"]
        assert await _skips(engine, queued[window]) == 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("signalled", [True, False])
async def test_room_made_while_a_cycle_runs_is_placed_at_its_end(
    backend: str, signalled: bool, fresh_database: Callable[[str], str]
) -> None:
    """A CPU freed while the cycle's later handlers run (a kernel's end reported meanwhile) is used
    by the same cycle: placement runs once more at its end when room was signalled since it ran,
    and only then."""
    async with migrated(fresh_database(backend)) as engine:
        await _one_agent(engine, cpu=1)
        first, second = sorted(await _insert_sized(engine, 2, priority=5, cpu=1))  # queue order: by id
        version = [1]

        async def kernel_ends_meanwhile() -> None:
            """Placement handed its orders: the placed kernel ends at once, as a report would say."""
            async with transaction(engine) as conn:
                [kernel] = (
                    await conn.execute(select(kernel_table.c.id).where(kernel_table.c.session_id == first))
                ).scalars()
                await kernels.release(conn, [kernel], NOW)
            if signalled:
                version[0] += 1  # the report's wake-up: room

        coordinator = Coordinator(
            engine,
            "default",
            [ScheduleNewSessions()],
            PhaseLimits(timeouts={}),
            lambda: NOW,
            on_change=kernel_ends_meanwhile,
            room_version=lambda: version[0],
        )
        assert await coordinator.run_cycle(timed=False, room=True) == (2 if signalled else 1)
        async with engine.connect() as conn:
            placed = await sessions.get(conn, second)
        assert placed is not None
        assert (placed.status is SessionStatus.PREPARING) is signalled
        if not signalled:
            assert not coordinator.room_left  # nothing said room was made: the next cycle waits too


class _LooksAtPreparing(LifecycleHandler):
    """Reads PREPARING sessions, as the promotions after placement do; records what it was given."""

    name = "LooksAtPreparing"
    target_session_statuses = frozenset({SessionStatus.PREPARING})

    def __init__(self) -> None:
        self.given: list[str] = []

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return StatusTransitions(success=None)

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        self.given += [t.id for t in targets]
        return LifecycleResult()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_sessions_handed_to_their_agents_wait_for_a_report(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """Placed sessions wait for their agents (whose reports wake a cycle): the handlers after
    placement do not read them in the cycle that placed them, and that cycle asks for no other at
    once, unless its full window left more to place.  They are read in the next cycle."""
    async with migrated(fresh_database(backend)) as engine:
        await _one_agent(engine, cpu=10_000)
        placed = await _insert(engine, 3, 10, NOW)
        after = _LooksAtPreparing()
        coordinator = Coordinator(
            engine, "default", [ScheduleNewSessions(), after], PhaseLimits(timeouts={}), lambda: NOW
        )
        assert await coordinator.run_cycle(timed=False, room=True) == 3
        assert after.given == [] and coordinator.busy == 0
        await coordinator.run_cycle(timed=False, room=False)
        assert sorted(after.given) == sorted(placed)
        window = ScheduleNewSessions.queue_window
        assert window is not None
        await _insert(engine, window + 1, 10, NOW)
        assert await coordinator.run_cycle(timed=False, room=True) == window
        assert coordinator.busy == 1  # room left: the next cycle places the last one at once


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_session_handed_back_to_the_queue_is_placed_again_at_once(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """Only sessions handed over wait for their agents: one PrepareSessions gives up on (an agent
    of its gang lost while it prepared) goes back to the queue, and the cycle asks for the next at
    once to place it again (found by a review: it waited for the loop's interval)."""
    async with migrated(fresh_database(backend)) as engine:
        async with transaction(engine) as conn:
            await agents.ensure_resource_group(conn, "default", NOW)
            for aid in ("a", "b"):
                await register_agent(conn, aid, {"cpu": 8, "mem": "8G"}, hostname=aid, now=NOW)
            sid = str(uuid.uuid4())
            spec = SessionSpec(command=("true",), cluster_size=2)  # no rendezvous port chosen
            await sessions.insert_session(conn, NewSession(id=sid, name="g", owner="t", spec=spec), NOW)
        async with transaction(engine) as conn:
            await conn.execute(update(agent_table).where(agent_table.c.id == "a").values(status="LOST"))
            await conn.execute(
                update(session_table)
                .where(session_table.c.id == sid)
                .values(status="PREPARING", phase_tries=2)
            )
            for rank, aid in enumerate(("a", "b")):
                await conn.execute(
                    update(kernel_table)
                    .where(kernel_table.c.session_id == sid, kernel_table.c.rank == rank)
                    .values(status="PREPARING", agent_id=aid)
                )
        coordinator = Coordinator(
            engine, "default", [PrepareSessions()], PhaseLimits(timeouts={}), lambda: NOW
        )
        assert await coordinator.run_cycle(timed=True, room=False) == 1
        async with engine.connect() as conn:
            found = await sessions.get(conn, sid)
        assert found is not None and found.status is SessionStatus.PENDING
        assert coordinator.busy == 1


class _SubmittedMeanwhile(LifecycleHandler):
    """Looks at SUSPENDED sessions; while it runs, a session is submitted (as through the API)."""

    name = "SubmittedMeanwhile"
    target_session_statuses = frozenset({SessionStatus.SUSPENDED})

    def __init__(self, submit: Callable[[AsyncConnection], Awaitable[None]]) -> None:
        self._submit = submit

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return StatusTransitions(success=None)

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        await self._submit(ctx.conn)  # in its transaction (SQLite has one connection)
        return LifecycleResult()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("placement_first", [False, True])
async def test_a_session_submitted_while_a_cycle_runs_is_placed_by_it(
    backend: str, placement_first: bool, fresh_database: Callable[[str], str]
) -> None:
    """Placement reads PENDING even when no session was PENDING as the cycle began (only a
    SUSPENDED one that does not fit): a session submitted meanwhile, whose submission signalled
    room, is placed by the same cycle, not left for the next timed one.  While the queue flows (a
    session placed at the cycle's start), one submitted while a handler after placement's own
    place runs is placed right after that handler."""
    async with migrated(fresh_database(backend)) as engine:
        await _one_agent(engine, cpu=2)
        [big] = await _insert_sized(engine, 1, priority=5, cpu=3)
        async with transaction(engine) as conn:
            await conn.execute(
                update(session_table).where(session_table.c.id == big).values(status="SUSPENDED")
            )
            await conn.execute(
                update(kernel_table).where(kernel_table.c.session_id == big).values(status="SUSPENDED")
            )
        version, submitted = [1], []

        async def submit(conn: AsyncConnection) -> None:
            spec = SessionSpec(command=("true",), resources=ResourceSlots.parse({"cpu": 1}))
            submitted.append(str(uuid.uuid4()))
            await sessions.insert_session(
                conn, NewSession(id=submitted[0], name="n", owner="t", spec=spec), NOW
            )
            version[0] += 1  # a submission's wake-up: room

        [flowing] = await _insert_sized(engine, 1, priority=5, cpu=1) if placement_first else [None]
        coordinator = Coordinator(
            engine,
            "default",
            [ScheduleNewSessions(), _SubmittedMeanwhile(submit)][:: 1 if placement_first else -1],
            PhaseLimits(timeouts={}),
            lambda: NOW,
            room_version=lambda: version[0],
        )
        await coordinator.run_cycle(timed=False, room=True)
        async with engine.connect() as conn:
            found = await sessions.get(conn, submitted[0])
            first = await sessions.get(conn, flowing) if flowing else None
        assert found is not None and found.status is SessionStatus.PREPARING
        assert flowing is None or (first is not None and first.status is SessionStatus.PREPARING)


class _CountedPlacement(ScheduleNewSessions):
    """Placement that counts its runs, and fails on each when `broken`."""

    def __init__(self, broken: bool) -> None:
        self.runs = 0
        self._broken = broken

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        self.runs += 1
        if self._broken:
            raise RuntimeError("placement broke")
        return await super().execute(ctx, targets)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("broken", [False, True])
async def test_a_placement_that_places_nothing_is_not_repeated_between_handlers(
    backend: str, broken: bool, fresh_database: Callable[[str], str]
) -> None:
    """Room signalled during every handler (reports of kernels ending, under load) makes placement
    run again between handlers only until such a run places nothing: a queue whose head does not
    fit is tried once more than before a cycle, and a placement that fails no more than before,
    not after every handler (each run locks the group's agents and reads the queue)."""
    async with migrated(fresh_database(backend)) as engine:
        await _one_agent(engine, cpu=1)
        [big] = await _insert_sized(engine, 1, priority=5, cpu=2)  # never fits
        version = [1]

        async def signal(conn: AsyncConnection) -> None:
            version[0] += 1  # a report's wake-up: room (too little for the head)

        [suspended] = await _insert_sized(engine, 1, priority=5, cpu=3)  # for the handlers to look at
        async with transaction(engine) as conn:
            await conn.execute(
                update(session_table).where(session_table.c.id == suspended).values(status="SUSPENDED")
            )
        placement = _CountedPlacement(broken)
        handlers = [_SubmittedMeanwhile(signal) for _ in range(5)]
        coordinator = Coordinator(
            engine,
            "default",
            [*handlers[:3], placement, *handlers[3:]],
            PhaseLimits(timeouts={}),
            lambda: NOW,
            room_version=lambda: version[0],
        )
        await coordinator.run_cycle(timed=False, room=True)
        # The cycle's start, once between handlers (it placed nothing: no more), and its own place
        # (room was signalled since); a failed run is not tried again (its room stays unseen for
        # the next cycle).
        assert placement.runs == (1 if broken else 3)
        async with engine.connect() as conn:
            waiting = await sessions.get(conn, big)
        assert waiting is not None and waiting.status is SessionStatus.PENDING


class _BrokenPlacement(ScheduleNewSessions):
    """Placement that fails on whatever it reads (as a session that breaks it would make it)."""

    async def execute(self, ctx: HandlerContext, targets: Sequence[SessionRecord]) -> LifecycleResult:
        raise RuntimeError("placement broke")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_failing_placement_does_not_stop_the_rest_of_the_cycle(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """Placement runs before the promotions and stops: when it fails the cycle goes on (a user's
    cancel is still applied), and it is tried again by the next cycle."""
    async with migrated(fresh_database(backend)) as engine:
        await _one_agent(engine, cpu=1)
        [cancelled] = await _insert_sized(engine, 1, priority=5, cpu=1)
        async with transaction(engine) as conn:
            await sessions.request_termination(conn, cancelled, "user_cancelled", "", NOW)
        [waiting] = await _insert_sized(engine, 1, priority=5, cpu=1)
        coordinator = Coordinator(
            engine,
            "default",
            [_BrokenPlacement(), CancelPendingSessions()],
            PhaseLimits(timeouts={}),
            lambda: NOW,
        )
        assert await coordinator.run_cycle(timed=False, room=True) == 1
        async with engine.connect() as conn:
            ended = await sessions.get(conn, cancelled)
            queued = await sessions.get(conn, waiting)
        assert ended is not None and ended.status is SessionStatus.CANCELLED
        assert queued is not None and queued.status is SessionStatus.PENDING
        # Its room signal was not used: the loop's next cycle places (with a placement that works).
        assert coordinator.placed_at == -1
