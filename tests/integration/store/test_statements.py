"""Statements whose text does not depend on how many values they carry (PostgreSQL prepares every
text once per connection): IN lists as one array, many rows inserted from arrays.  What they find
and write is what the plain forms did, on both backends, and a value longer than its column never
matches a row it merely begins with."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import bindparam, event, insert, select, text, update
from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite as SQLiteDialect
from sqlalchemy.exc import DBAPIError

from corral.domain.history import HistoryRow
from corral.domain.placement import Placement
from corral.domain.records import Move, NewSession
from corral.domain.resources import ResourceSlots
from corral.domain.spec import Backoff, RetryPolicy, SessionSpec
from corral.domain.status import KernelStatus, SessionStatus
from corral.store import agents as agent_store
from corral.store import bulk, journal, kernels, sessions
from corral.store.db import transaction
from corral.store.dialect import sqlite_rows
from corral.store.sessions import insert as session_insert
from corral.store.tables import UNSHIPPED, allocations, session_events, session_history
from corral.store.tables import agents as agent_table
from corral.store.tables import kernels as kernel_table
from corral.store.tables import sessions as session_table
from tests.conftest import BACKENDS
from tests.support.db import migrated, register_agent

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
BY_IDS = select(session_table.c.id).where(session_table.c.id.in_(bindparam("ids", expanding=True)))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_in_list_finds_exactly_its_values_whatever_their_number(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        ids = [str(uuid.uuid4()) for _ in range(5)]
        async with transaction(engine) as conn:
            for sid in ids:
                spec = SessionSpec(command=("true",))
                await sessions.insert_session(conn, NewSession(id=sid, name="s", owner="t", spec=spec), NOW)
        sent: list[str] = []
        event.listen(engine.sync_engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
        async with engine.connect() as conn:
            for n in range(6):
                found = set((await conn.execute(BY_IDS, {"ids": ids[:n]})).scalars())
                assert found == set(ids[:n])
            # Longer than the column (36): never cut to match the session it begins with.
            assert list(await conn.execute(BY_IDS, {"ids": [ids[0] + "x", ids[1] + "-0"]})) == []
            unrelated = select(session_table.c.id).where(session_table.c.status.in_(["RUNNING", "ERROR"]))
            assert list(await conn.execute(unrelated)) == []
        if backend == "postgres":
            assert len(set(sent[:7])) == 1 and "ANY" in sent[0]  # one text, so one prepared statement


@pytest.mark.parametrize("backend", BACKENDS)
async def test_many_rows_are_written_as_given(backend: str, fresh_database: Callable[[str], str]) -> None:
    events = [
        journal.session_event("s1", "p", "session.status_changed", None, "PENDING"),
        journal.session_event(
            "s2", "p", "session.custom", "PENDING", None, {"nested": [1, "é", {"k": None}]}
        ),
        journal.session_event("s1", "p", "session.status_changed", "PENDING", "SCHEDULED"),
        ("session", "s3", "p", "s3", "session.custom", None, None, ["a"]),  # not an array dimension
        ("session", "s3", None, "s3", "session.custom", None, None, [1, [2, None]]),  # type: ignore[list-item]
        journal.entity_event("webhook", "w1", None, "webhook.disabled", {"reason": "gone"}),
    ]
    history = [
        HistoryRow("s1", "ScheduleNewSessions", "SUCCESS", "PENDING", "SCHEDULED", "placed on a"),
        HistoryRow("s2", "ScheduleNewSessions", "SKIPPED", "PENDING", None, ""),
    ]
    async with migrated(fresh_database(backend)) as engine:
        for rows in ([events[0]], events):  # one row, then many: the same statement on PostgreSQL
            async with transaction(engine) as conn:
                await journal.add_events(conn, rows, NOW)
        async with transaction(engine) as conn:
            await journal.add_history(conn, history, NOW)
        async with engine.connect() as conn:
            written = await conn.execute(select(session_events).order_by(session_events.c.id))
            assert [(*r[2:10], r.created_at) for r in written] == [(*e, NOW) for e in [events[0], *events]]
            written = await conn.execute(select(session_history).order_by(session_history.c.id))
            assert [(*r[1:7], r.count, r.created_at, r.last_at) for r in written] == [
                (*h, 1, NOW, NOW) for h in journal.history_values(history)
            ]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_repeated_outcomes_collapse_into_one_counted_row_per_session_and_reason(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """add_collapsed (placement's SKIPPED rows; on PostgreSQL one statement): a (session, reason)
    already recorded by this handler with this result is counted again, on its newest row only;
    the others are inserted; rows of another handler or result are left alone."""
    later = NOW + timedelta(seconds=5)
    skip = "ScheduleNewSessions"
    before = [
        HistoryRow("s1", skip, "SKIPPED", "PENDING", None, "no room"),
        # Two managers raced: the newest counts.
        HistoryRow("s1", skip, "SKIPPED", "PENDING", None, "no room"),
        HistoryRow("s1", "Other", "SKIPPED", "PENDING", None, "no room"),
        HistoryRow("s2", skip, "EXPIRED", "PENDING", None, "no room"),
    ]
    given = [("s1", "PENDING", "no room"), ("s2", "PENDING", "no room"), ("s1", "PENDING", "held")]
    async with migrated(fresh_database(backend)) as engine:
        async with transaction(engine) as conn:
            await journal.add_history(conn, before, NOW)
        for at in (later, later + timedelta(seconds=1)):
            async with transaction(engine) as conn:
                await journal.add_collapsed(conn, skip, "SKIPPED", given, at)
        async with engine.connect() as conn:
            written = await conn.execute(select(session_history).order_by(session_history.c.id))
            rows = [
                (r.session_id, r.handler, r.result, r.message, r.count, r.created_at, r.last_at)
                for r in written
            ]
    end = later + timedelta(seconds=1)
    assert rows == [
        ("s1", skip, "SKIPPED", "no room", 1, NOW, NOW),
        ("s1", skip, "SKIPPED", "no room", 3, NOW, end),
        ("s1", "Other", "SKIPPED", "no room", 1, NOW, NOW),
        ("s2", skip, "EXPIRED", "no room", 1, NOW, NOW),
        ("s2", skip, "SKIPPED", "no room", 2, later, end),
        ("s1", skip, "SKIPPED", "held", 2, later, end),
    ]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_move_writes_its_kernels_events_and_history_only_if_it_wins(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """One group of moves (PENDING -> SCHEDULED -> PREPARING, kernels too), one of which lost its
    race: only the winner's kernels move and only its events and history rows are written."""
    async with migrated(fresh_database(backend)) as engine:
        ids = [str(uuid.uuid4()) for _ in range(2)]
        async with transaction(engine) as conn:
            news = [
                NewSession(id=sid, name="s", owner="t", spec=SessionSpec(command=("true",))) for sid in ids
            ]
            await sessions.insert_sessions(conn, news, NOW)
        winner, loser = ids
        async with transaction(engine) as conn:  # the loser was cancelled since it was read
            await conn.execute(
                update(session_table).where(session_table.c.id == loser).values(status="CANCELLED")
            )
        via = (SessionStatus.SCHEDULED,)
        kernel = (KernelStatus.PREPARING, (KernelStatus.SCHEDULED,))
        moves = [
            Move(sid, SessionStatus.PENDING, SessionStatus.PREPARING, kernel[0], (), via, kernel[1])
            for sid in ids
        ]
        history = [
            HistoryRow(sid, "ScheduleNewSessions", "SUCCESS", f, t, "m")
            for sid in ids
            for f, t in (("PENDING", "SCHEDULED"), ("SCHEDULED", "PREPARING"))
        ]
        async with transaction(engine) as conn:
            won = await sessions.apply_moves(conn, moves, NOW + timedelta(seconds=1), history)
        assert [m.session_id for m in won] == [winner]
        async with engine.connect() as conn:
            written = await conn.execute(select(session_history).order_by(session_history.c.id))
            assert [tuple(r[1:7]) for r in written] == journal.history_values(history[:2])
            rows = await conn.execute(
                select(session_events.c.session_id, session_events.c.from_status, session_events.c.to_status)
                .where(session_events.c.kind == "session.status_changed")
                .order_by(session_events.c.id)
            )
            assert list(rows) == [(winner, "PENDING", "SCHEDULED"), (winner, "SCHEDULED", "PREPARING")]
            statuses = await conn.execute(select(kernel_table.c.session_id, kernel_table.c.status))
            assert dict(list(statuses)) == {winner: "PREPARING", loser: "PENDING"}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_value_longer_than_its_column_is_never_stored_cut(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """PostgreSQL refuses it, as a plain INSERT does; SQLite (no lengths) stores it whole."""
    long_id = "x" * 40
    async with migrated(fresh_database(backend)) as engine:
        try:
            async with transaction(engine) as conn:
                await journal.add_history(
                    conn, [HistoryRow(long_id, "H", "SUCCESS", "PENDING", None, "")], NOW
                )
        except DBAPIError:
            assert backend == "postgres"
            return
        assert backend == "sqlite"
        async with engine.connect() as conn:
            assert list((await conn.execute(select(session_history.c.session_id))).scalars()) == [long_id]


def _removed_from(plan: dict[str, Any], table: str) -> int:
    """Rows of `table` a plan read only to drop them (its filters, not its index conditions)."""
    own = plan.get("Rows Removed by Filter", 0) if plan.get("Relation Name") == table else 0
    return own + sum(_removed_from(p, table) for p in plan.get("Plans", []))


async def test_a_read_of_several_statuses_reads_no_ended_session_before_any_statistics(
    pg_server: object, fresh_database: Callable[[str], str]
) -> None:
    """A fresh database has no planner statistics for a minute or more (autovacuum's first look at a
    table).  A handler's read of several statuses (a promotion's by ids, a handler's whole rows)
    still seeks each status by index: it never reads the group's ended sessions only to drop them,
    as `status IN (...)` planned without statistics did, every cycle.  What it finds, in what
    order and how many, is what that form found."""
    if isinstance(pg_server, str):
        pytest.skip("needs a database of its own (CORRAL_TEST_PG_DSN gives a shared one)")
    async with migrated(fresh_database("postgres")) as engine:
        spec = SessionSpec(command=("true",))
        live = [(SessionStatus.SCHEDULED, SessionStatus.PREPARING)[i % 2] for i in range(5)]
        news = [NewSession(id=str(uuid.uuid4()), name="s", owner="t", spec=spec) for _ in range(2000)]
        async with transaction(engine) as conn:
            await conn.execute(text("ALTER TABLE sessions SET (autovacuum_enabled = false)"))
            await sessions.insert_sessions(conn, news[5:], NOW)
            await conn.execute(update(session_table).values(status="TERMINATED"))
        for i, status in enumerate(live):  # created one after another, in a different status each
            async with transaction(engine) as conn:
                await sessions.insert_sessions(conn, [news[i]], NOW + timedelta(seconds=i))
                await conn.execute(
                    update(session_table).where(session_table.c.id == news[i].id).values(status=str(status))
                )
        sent: list[tuple[str, Any]] = []

        def record_statement(*args: Any) -> None:
            sent.append((args[2], args[3]))

        statuses = [SessionStatus.SCHEDULED, SessionStatus.PREPARING, SessionStatus.PULLING]
        async with engine.connect() as conn:
            event.listen(engine.sync_engine, "before_cursor_execute", record_statement)
            found = await sessions.target_ids(
                conn,
                "default",
                statuses,
                kernel_statuses=None,
                absent_kernel_statuses=None,
                terminating_requested=False,
                limit=4,
            )
            whole = await sessions.for_handler(
                conn, "default", statuses, terminating_requested=False, with_kernels=False, limit=3
            )
            event.remove(engine.sync_engine, "before_cursor_execute", record_statement)
            assert found == [(n.id, status) for n, status in zip(news, live, strict=False)][:4]
            assert [(s.id, s.status, s.spec.command) for s in whole] == [
                (n.id, status, ("true",)) for n, status in zip(news, live, strict=False)
            ][:3]
            assert (
                await conn.execute(text("SELECT reltuples FROM pg_class WHERE relname = 'sessions'"))
            ).scalar() < 0  # still no statistics
            for statement, params in sent:
                explained = await conn.exec_driver_sql(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", params)
                [plan] = explained.scalar()
                assert _removed_from(plan["Plan"], "sessions") < 10, statement
        assert len(sent) == 2


@pytest.mark.parametrize("backend", BACKENDS)
async def test_rows_written_in_bulk_are_stored_as_sqlalchemys_insert_stores_them(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """Rows given as tuples in column order (store/bulk.py: on SQLite straight to its driver): every
    column of a session, of its kernels and of its event is stored as SQLAlchemy's INSERT of the
    row's dict stores it, whatever its type (text, JSON, JSON null and SQL NULL, times, flags,
    numbers)."""
    policy = RetryPolicy(max_retries=2, retry_delay=1.5, backoff=Backoff.EXPONENTIAL)
    spec = SessionSpec(
        command=("python3", "-c", "print('é \\u2603')"),
        resources=ResourceSlots.parse({"cpu": "1.5", "mem": "64M"}),
        env={"K": "vé", "EMPTY": ""},
        cluster_size=2,
        priority=3,
        timeout=12,
        retry_policy=policy,
        retry_policies=("gpu-flaky",),
        creation_id="c-1",
        array_id=str(uuid.uuid4()),
        array_index=7,
    )
    later = NOW + timedelta(microseconds=1)
    new = NewSession(
        id=str(uuid.uuid4()),
        name="n[7]",
        owner="t",
        spec=spec,
        rule_counts={"gpu-flaky": 1},
        first_started_at=later,
        retry_after=later,
        spec_hash="h",
    )
    row = session_insert._session_row(new, NOW)
    kernel_rows = session_insert._kernel_rows(new, row["resources"], NOW)
    events = [journal.session_event(new.id, "p", "session.created", None, "PENDING", {"k": ["é", None, 1.5]})]
    stored = []
    async with migrated(fresh_database(backend)) as engine:
        for in_bulk in (True, False):
            async with transaction(engine) as conn:
                if in_bulk:
                    # As a submit writes them.
                    parts = [
                        session_insert._every_column(session_table, [row]),
                        session_insert._every_column(kernel_table, kernel_rows),
                        journal.events(events, NOW),
                    ]
                    await bulk.insert_together(conn, parts)
                else:  # SQLAlchemy's executemany, with its own processing of every value
                    await conn.execute(insert(session_table), [row])
                    await conn.execute(insert(kernel_table), kernel_rows)
                    event_rows = [dict(zip(journal.EVENT_COLUMNS, e, strict=True)) for e in events]
                    await conn.execute(insert(session_events), [{**e, "created_at": NOW} for e in event_rows])
            async with transaction(engine) as conn:
                found = {}
                for table in (session_table, kernel_table, session_events):
                    result = await conn.exec_driver_sql(f"SELECT * FROM {table.name}")
                    rows = [dict(zip(result.keys(), r, strict=True)) for r in result]
                    for r in rows if table is session_events else []:
                        del r["id"], r["txid"]  # numbered afresh, by another transaction
                    found[table.name] = rows
                # A JSON column's None is JSON null or SQL NULL by its type (read back, both are None).
                nulls = "SELECT reservation IS NULL, retry_policy IS NULL FROM sessions"
                found["nulls"] = [tuple(r) for r in await conn.exec_driver_sql(nulls)]
                nulls = "SELECT devices IS NULL, error_record IS NULL FROM kernels"
                found["nulls"] += [tuple(r) for r in await conn.exec_driver_sql(nulls)]
                for table in (session_events, kernel_table, session_table):  # kernels refer to sessions
                    await conn.exec_driver_sql(f"DELETE FROM {table.name}")
                stored.append(found)
        assert stored[0] == stored[1]
        assert len(stored[0]["kernels"]) == 2 and len(stored[0]["session_events"]) == 1
        assert stored[0]["sessions"][0]["spec_hash"] == "h"  # the whole array's
        # No hold is SQL NULL, not JSON null: the index of holds (ix_sessions_held) leaves it out.
        assert stored[0]["nulls"][0] == (True, False)
        async with transaction(engine) as conn:
            [made] = await sessions.insert_sessions(conn, [new], NOW)  # and it reads back as written
            assert await sessions.get(conn, new.id) == made
        assert replace(made.spec, name=None) == spec and made.rule_counts == {"gpu-flaky": 1}
        assert made.retry_after == later


def test_rows_for_the_driver_must_give_what_sqlalchemy_would_default() -> None:
    """A column with a Python-side default is not filled in by the driver: it must be given."""
    with pytest.raises(ValueError, match="payload"):
        sqlite_rows._statement(session_events, ("session_id", "kind"), ("created_at",), SQLiteDialect())


@pytest.mark.parametrize("backend", BACKENDS)
async def test_placements_write_every_kernels_allocation_and_agent(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """Each placed kernel gets its allocation (its resources, on the agent chosen for its rank) and
    that agent."""
    news = [
        NewSession(
            id=str(uuid.uuid4()), name=f"s{n}", owner="t", spec=SessionSpec(command=("true",), cluster_size=n)
        )
        for n in (1, 2, 3)
    ]
    chosen = {
        news[0].id: Placement(("a1",)),
        news[1].id: Placement(("a2", "a1")),
        news[2].id: Placement(("a1", "a2", "a1")),
    }
    async with migrated(fresh_database(backend)) as engine:
        async with transaction(engine) as conn:
            made = await sessions.insert_sessions(conn, news, NOW)
        for part in ([news[0].id], [news[1].id, news[2].id]):
            async with transaction(engine) as conn:
                await kernels.write_placements(conn, {sid: chosen[sid] for sid in part}, NOW)
        async with engine.connect() as conn:
            got = sorted(
                (r.kernel_id, r.session_id, r.agent_id, json.dumps(r.slots), r.created_at, r.released_at)
                for r in await conn.execute(select(allocations))
            )
            agent_of = dict((await conn.execute(select(kernel_table.c.id, kernel_table.c.agent_id))).all())
    want = sorted(  # one allocation per kernel, on its rank's agent
        (k.id, s.id, chosen[s.id].agent_ids[k.rank], json.dumps(k.resources.to_json()), NOW, None)
        for s in made
        for k in s.kernels
    )
    assert got == want
    assert agent_of == {k.id: chosen[s.id].agent_ids[k.rank] for s in made for k in s.kernels}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("agents", [("a1",), ("a1", "a2", "a1")], ids=["a-rank-short", "a-rank-over"])
async def test_a_placement_whose_ranks_do_not_match_the_kernels_writes_nothing(
    backend: str, agents: tuple[str, ...], fresh_database: Callable[[str], str]
) -> None:
    """A gang of 2 placed with 1 or 3 ranks: the transaction fails on either backend, and no
    allocation or agent is left behind (a half-placed gang would hold CPUs and never start)."""
    gang = NewSession(
        id=str(uuid.uuid4()), name="g", owner="t", spec=SessionSpec(command=("true",), cluster_size=2)
    )
    async with migrated(fresh_database(backend)) as engine:
        async with transaction(engine) as conn:
            await sessions.insert_sessions(conn, [gang], NOW)
        with pytest.raises(RuntimeError, match="placement of"):
            async with transaction(engine) as conn:
                await kernels.write_placements(conn, {gang.id: Placement(agents)}, NOW)
        async with engine.connect() as conn:
            assert list(await conn.execute(select(allocations))) == []
            assert set((await conn.execute(select(kernel_table.c.agent_id))).scalars()) == {None}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("statistics", [False, True])
async def test_an_agents_polls_and_sweeps_never_read_the_kernels_it_ran_before(
    backend: str, statistics: bool, fresh_database: Callable[[str], str]
) -> None:
    """An agent that ran 2,000 kernels, holds 3 and owes the output of 2 that ended: its order poll
    finds the 3, a new incarnation's registration marks the 2 (the rest were shipped), and neither
    these nor the sweeps' reads of what it holds (nor their probe for a LOST agent's kernels to
    declare gone, every sweep) read a kernel that has ended and been shipped (they did, by the
    agent's index: a poll's time grew with the agent's history), with or without planner
    statistics."""
    async with migrated(fresh_database(backend)) as engine:
        news = [
            NewSession(id=str(uuid.uuid4()), name="s", owner="t", spec=SessionSpec(command=("true",)))
            for _ in range(2003)
        ]
        async with transaction(engine) as conn:
            epoch = await register_agent(conn, "a", {"cpu": 4})
            await sessions.insert_sessions(conn, news, NOW)
            await conn.execute(update(kernel_table).values(agent_id="a", status="TERMINATED", logs_done=True))
            held, owed = [n.id for n in news[:3]], [n.id for n in news[3:5]]
            await conn.execute(
                update(kernel_table)
                .where(kernel_table.c.session_id.in_(held))
                .values(status="RUNNING", logs_done=False)
            )
            await conn.execute(
                update(kernel_table).where(kernel_table.c.session_id.in_(owed)).values(logs_done=False)
            )
        if statistics:
            async with transaction(engine) as conn:
                await conn.execute(text("ANALYZE"))
        sent: list[tuple[str, Any]] = []

        def record_statement(*args: Any) -> None:
            if args[2].startswith(("SELECT", "UPDATE")):
                sent.append((args[2], args[3]))

        async with engine.connect() as conn:
            event.listen(engine.sync_engine, "before_cursor_execute", record_statement)
            orders = await kernels.orders_for(conn, "a", epoch)
            held_kernels = await agent_store.kernels_held_by(conn, ["a"])
            on = await kernels.sessions_on(conn, agent_ids=["a"])
            # The sweep's probe of LOST agents whose kernels are due to be declared gone.
            await conn.execute(update(agent_table).values(status="LOST"))
            due = select(agent_table.c.id).where(agent_store.FENCE_DUE)
            later = datetime.now(UTC) + timedelta(days=1)
            fenced = (await conn.execute(due, {"silent_before": later})).scalars()
            assert list(fenced) == ["a"]
            await kernels.close_output_of(conn, "a")
            marked = (await conn.execute(select(kernel_table.c.session_id).where(UNSHIPPED))).scalars()
            assert sorted(marked) == sorted(held)  # the 2 owed are marked, the running are not
            await conn.rollback()  # the statement is explained (run) again below
            event.remove(engine.sync_engine, "before_cursor_execute", record_statement)
            assert orders is not None and sorted(k.session_id for k in orders) == sorted(held)
            assert len(held_kernels) == 3 and sorted(s for s, *_ in on) == sorted(held)
            sent = [(statement, params) for statement, params in sent if "pg_" not in statement]
            assert len(sent) == 7  # three reads, the test's update, the probe, the close, a read
            for statement, params in sent[:3] + sent[4:6]:
                if backend == "postgres":
                    explain = f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}"
                    [plan] = (await conn.exec_driver_sql(explain, params)).scalar()
                    assert _removed_from(plan["Plan"], "kernels") < 10, statement
                else:
                    plan = (await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", params)).all()
                    assert any("ix_kernels_on_agent" in row[-1] for row in plan), (statement, plan)


async def test_a_kernels_steps_are_heap_only_writes_on_postgresql(
    fresh_database: Callable[[str], str],
) -> None:
    """A status change that does not end the kernel leaves its `ended` as it was, so PostgreSQL
    writes it without an entry in any index (there is room on the page); its ending leaves the
    index of live kernels, so it is written with one."""
    async with migrated(fresh_database("postgres")) as engine:
        new = NewSession(id=str(uuid.uuid4()), name="s", owner="t", spec=SessionSpec(command=("true",)))
        async with transaction(engine) as conn:
            await sessions.insert_sessions(conn, [new], NOW)
            await conn.execute(update(kernel_table).values(agent_id="a", status="PREPARING"))
        hot = text("SELECT pg_stat_get_xact_tuples_hot_updated('kernels'::regclass)")
        async with transaction(engine) as conn:
            for status in ("PREPARED", "CREATING", "RUNNING", "TERMINATING"):
                await conn.execute(update(kernel_table).values(status=status))
            assert (await conn.execute(hot)).scalar() == 4
            await conn.execute(update(kernel_table).values(status="TERMINATED"))
            assert (await conn.execute(hot)).scalar() == 4
            assert (await conn.execute(select(kernel_table.c.ended))).scalar() is True
