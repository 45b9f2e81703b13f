"""Single-session creates that arrive together are written in one transaction (services/intake.py),
and each request is still answered as if it had come alone: its own session, its own earlier one,
or its own refusal, never another's.  On both backends, through the real store."""

from __future__ import annotations

import asyncio
import math
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import func, make_url, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from corral.domain.records import SessionRecord
from corral.domain.resources import ResourceSlots
from corral.domain.spec import SessionSpec
from corral.services import intake as intake_module
from corral.services import users
from corral.services.errors import Conflict, InvalidInput, Unauthorized
from corral.services.intake import BATCH_MOST, Ask, Intake
from corral.store import auth
from corral.store.db import reading, transaction
from corral.store.dialect.engine import make_engine, make_reader
from corral.store.tables import kernels, sessions
from tests.conftest import BACKENDS
from tests.support.cluster import Cluster
from tests.support.db import migrated
from tests.support.eventually import eventually


def _spec(n: int, **fields: Any) -> SessionSpec:
    return SessionSpec(command=("echo", str(n)), resources=ResourceSlots.parse({"cpu": 1}), **fields)


async def _principal(engine: AsyncEngine, name: str = "alice") -> dict[str, Any]:
    """A new user (a member of the default project) and an API key of theirs, as a request that
    authenticated with it hands them to the intake (Ask's `key` and `who`)."""
    key = auth.new_key()
    async with transaction(engine) as conn:
        user_id = await auth.ensure_user(conn, name, "user", datetime.now(UTC))
        await auth.insert_key(conn, user_id, key, datetime.now(UTC))
    return {"key": key, "who": await users.identify(engine, key)}


async def _rows(engine: AsyncEngine) -> tuple[int, int]:
    async with reading(engine) as conn:
        made = (await conn.execute(select(func.count()).select_from(sessions))).scalar_one()
        ks = (await conn.execute(select(func.count()).select_from(kernels))).scalar_one()
    return int(made), int(ks)


async def _all(intake: Intake, asks: list[Ask]) -> list[tuple[SessionRecord, bool] | BaseException]:
    """Every ask at once, as requests read in one loop turn."""
    return list(await asyncio.gather(*(intake.create(a) for a in asks), return_exceptions=True))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_creates_that_arrive_together_are_one_transaction_each_answered_alone(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        alice = await _principal(engine)
        intake = Intake(engine, busy_gap=math.inf)  # as under load: every submit waits for others
        kept, created = await intake.create(Ask(_spec(0, creation_id="kept"), None, None, **alice))
        other, _ = await intake.create(Ask(_spec(0, creation_id="other"), None, None, **alice))
        assert created
        asks = [
            *(Ask(_spec(i), None, None, **alice) for i in range(1, 7)),
            Ask(_spec(7, project="nowhere"), None, None, **alice),
            Ask(_spec(8, resource_group="nowhere"), None, None, **alice),
            Ask(_spec(0, creation_id="kept"), None, None, **alice),
            Ask(_spec(9, creation_id="other"), None, None, **alice),
        ]
        answers = await _all(intake, asks)

        made = [a for a in answers[:6] if not isinstance(a, BaseException)]
        assert [r.spec.command for r, new in made] == [("echo", str(i)) for i in range(1, 7)]
        assert all(new for _, new in made)
        # One transaction: written at one instant, not one after the other; queued as they came.
        assert len({r.created_at for r, _ in made}) == 1
        arrived = [r.chain_submitted_at for r, _ in made]
        assert arrived == sorted(arrived)
        unknown, elsewhere, again, reused = answers[6:]
        assert isinstance(unknown, InvalidInput) and unknown.details["field"] == "project"
        assert isinstance(elsewhere, InvalidInput) and elsewhere.details["field"] == "resource_group"
        assert not isinstance(again, BaseException) and again == (kept, False)
        assert isinstance(reused, Conflict) and reused.details["session_id"] == other.id
        # Nothing of the refused requests was written, and everything of the others was.
        assert await _rows(engine) == (8, 8)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_two_requests_with_one_creation_id_in_a_batch_make_one_session(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        alice, bob = await _principal(engine, "alice"), await _principal(engine, "bob")
        intake = Intake(engine, busy_gap=math.inf)  # as under load: every submit waits for others
        same = [Ask(_spec(1, creation_id="k"), None, None, **alice) for _ in range(3)]
        different = Ask(_spec(2, creation_id="k"), None, None, **alice)
        bobs = Ask(_spec(1, creation_id="k"), None, None, **bob)  # keys are per caller
        answers = await _all(intake, [*same, different, bobs])

        # They then go alone, at once: whichever commits first is the caller's one session for
        # the key; an identical request is answered with it, a different one refused.
        *alices, theirs = answers
        won = [a for a in alices if not isinstance(a, BaseException) and a[1]]
        assert len(won) == 1
        session = won[0][0]
        for ask, answer in zip([*same, different], alices, strict=True):
            if answer is won[0]:
                continue
            if ask.spec.command == session.spec.command:
                assert answer == (session, False)
            else:
                assert isinstance(answer, Conflict) and answer.details["field"] == "creation_id"
        assert not isinstance(theirs, BaseException) and theirs[1] and theirs[0].owner == "bob"
        assert await _rows(engine) == (2, 2)


async def _door_held(intake: Intake, queued: int) -> None:
    """Until the first of `queued` requests holds the door (its one loop turn for others to queue
    behind it) and all of them are queued: looked at every turn, as it lasts one."""
    await eventually(
        lambda: intake._lock.locked() and len(intake._waiting) == queued,
        f"the door held, {queued} requests queued at it",
        interval=0,
    )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_request_that_gives_up_while_waiting_is_not_written_and_the_rest_are(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        alice = await _principal(engine)
        intake = Intake(engine, busy_gap=math.inf)  # as under load: every submit waits for others
        # The first holds the door for one loop turn; the second gives up while it waits behind it.
        first = asyncio.create_task(intake.create(Ask(_spec(1), None, None, **alice)))
        second = asyncio.create_task(intake.create(Ask(_spec(2), None, None, **alice)))
        third = asyncio.create_task(intake.create(Ask(_spec(3), None, None, **alice)))
        await _door_held(intake, 3)
        second.cancel()
        made = [await first, await third]
        with pytest.raises(asyncio.CancelledError):
            await second
        assert [r.spec.command for r, _ in made] == [("echo", "1"), ("echo", "3")]
        assert await _rows(engine) == (2, 2)

        # The one holding the door gives up: the others are written by the next in line.
        leader = asyncio.create_task(intake.create(Ask(_spec(4), None, None, **alice)))
        others = [asyncio.create_task(intake.create(Ask(_spec(n), None, None, **alice))) for n in (5, 6)]
        await _door_held(intake, 3)
        leader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leader
        assert [(await t)[0].spec.command for t in others] == [("echo", "5"), ("echo", "6")]
        assert await _rows(engine) == (4, 4)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_batch_looks_its_callers_up_as_it_writes_and_refuses_only_unknown_keys(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """The callers are read with the write: a key nobody has, or one revoked after its request
    arrived, is that request's 401 and writes nothing; the batch's other requests are made.  Two
    keys of one user are one caller: their creation_id is theirs alike."""
    async with migrated(fresh_database(backend)) as engine:
        alice = await _principal(engine)
        second = auth.new_key()
        revoked = auth.new_key()
        async with transaction(engine) as conn:
            alice_id = await auth.ensure_user(conn, "alice", "user", datetime.now(UTC))
            await auth.insert_key(conn, alice_id, second, datetime.now(UTC))
            bob_id = await auth.ensure_user(conn, "bob", "user", datetime.now(UTC))
            await auth.insert_key(conn, bob_id, revoked, datetime.now(UTC))
        bob = {"key": revoked, "who": await users.identify(engine, revoked)}
        second_key = {"key": second, "who": alice["who"]}
        intake = Intake(engine, busy_gap=math.inf)  # as under load: every submit waits for others
        async with transaction(engine) as conn:  # revoked after the requests were read
            await conn.execute(text("DELETE FROM api_keys WHERE user_id = :u"), {"u": bob_id})
        answers = await _all(
            intake,
            [
                Ask(_spec(1), None, None, **alice),
                Ask(_spec(2), None, None, key="crl_nobody", who=alice["who"]),
                Ask(_spec(3), None, None, **bob),
                Ask(_spec(4), None, None, **second_key),
            ],
        )
        made, nobody, gone, other_key = answers
        assert isinstance(nobody, Unauthorized) and nobody.details["field"] == "authorization"
        assert isinstance(gone, Unauthorized)
        assert not isinstance(made, BaseException) and made[0].owner == "alice"
        assert not isinstance(other_key, BaseException) and other_key[0].owner == "alice"
        assert await _rows(engine) == (2, 2)

        same = [Ask(_spec(5, creation_id="k"), None, None, **k) for k in (alice, second_key, alice)]
        again = await _all(intake, same)
        assert not any(isinstance(a, BaseException) for a in again), again
        assert len({a[0].id for a in again if not isinstance(a, BaseException)}) == 1
        assert await _rows(engine) == (3, 3)


@asynccontextmanager
async def _writer_held(engine: AsyncEngine, url: str) -> AsyncIterator[tuple[Intake, sqlite3.Connection]]:
    """SQLite: an intake, and another process's connection holding the database's write lock
    (BEGIN IMMEDIATE; closed, it lets go)."""
    path = make_url(url).database
    assert path is not None
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        yield Intake(engine, busy_gap=math.inf), holder  # as under load: every submit waits
    finally:
        holder.close()


async def test_unknown_keys_are_refused_without_waiting_for_the_writer(
    fresh_database: Callable[[str], str],
) -> None:
    """SQLite: while another process holds the database's write lock, requests with keys nobody
    has are still refused at once: a request's caller is read on the manager's reader, so a key
    nobody has never reaches the intake, nor takes the writer from anyone else's creates."""
    url = fresh_database("sqlite")
    async with migrated(url) as engine:
        reader = make_reader(engine)
        try:
            async with _writer_held(engine, url):
                for i in range(3):
                    with pytest.raises(Unauthorized):
                        await asyncio.wait_for(users.identify(reader, f"crl_nobody_{i}"), timeout=10)
        finally:
            await reader.dispose()
        assert await _rows(engine) == (0, 0)


async def test_a_key_revoked_while_its_batch_waits_for_the_writer_is_refused(
    fresh_database: Callable[[str], str],
) -> None:
    """SQLite: requests authenticated, then their batch waits for the write lock (a cycle's
    length); a key revoked meanwhile is refused, as the write reads its keys again inside it."""
    url = fresh_database("sqlite")
    async with migrated(url) as engine:
        alice = await _principal(engine)
        async with _writer_held(engine, url) as (intake, holder):
            holder.execute("DELETE FROM api_keys")  # the revocation, committed while the batch waits
            sent = asyncio.ensure_future(_all(intake, [Ask(_spec(i), None, None, **alice) for i in range(2)]))

            def taken() -> bool:
                assert not sent.done(), "the batch was never written"
                return bool(intake._writes)

            await eventually(taken, "the batch taken, waiting for the writer", timeout=30)
            holder.execute("COMMIT")
            answers = await asyncio.wait_for(sent, timeout=30)
        assert all(isinstance(a, Unauthorized) for a in answers), answers
        assert await _rows(engine) == (0, 0)


def _field(resp: httpx.Response) -> str:
    return str(resp.json()["error"]["details"]["field"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_posts_with_bad_ones_among_them_through_the_api(
    backend: str, fresh_database: Callable[[str], str], tmp_path: Any
) -> None:
    c = Cluster(fresh_database(backend), tmp_path)
    try:
        c.start_manager()

        async def post_all() -> list[httpx.Response]:
            headers = {"Authorization": f"Bearer {c.key}"}
            async with httpx.AsyncClient(base_url=c.url, headers=headers, timeout=30) as http:
                bodies: list[dict[str, Any]] = []
                for i in range(40):
                    body: dict[str, Any] = {"command": ["echo", str(i)]}
                    if i % 10 == 3:
                        body["project"] = "nowhere"
                    if i % 10 == 7:
                        body["resource_group"] = "nowhere"
                    bodies.append(body)
                return await asyncio.gather(*(http.post("/api/v1/sessions", json=b) for b in bodies))

        answers = asyncio.run(post_all())
        for i, resp in enumerate(answers):
            if i % 10 == 3:
                assert resp.status_code == 422 and _field(resp) == "project", resp.text
            elif i % 10 == 7:
                assert resp.status_code == 422 and _field(resp) == "resource_group", resp.text
            else:
                assert resp.status_code == 201, resp.text
                assert resp.json()["command"] == ["echo", str(i)]
        listed = c.http.get("/api/v1/sessions", params={"limit": 100}).json()
        assert sorted(int(s["command"][1]) for s in listed) == [i for i in range(40) if i % 10 not in (3, 7)]
    finally:
        c.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_batch_taken_is_written_once_and_answered_even_if_its_taker_gives_up(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        alice = await _principal(engine)
        intake = Intake(engine, busy_gap=math.inf)  # as under load: every submit waits for others
        taker = asyncio.create_task(intake.create(Ask(_spec(1), None, None, **alice)))
        others = [asyncio.create_task(intake.create(Ask(_spec(n), None, None, **alice))) for n in (2, 3)]
        # The taker holds the door, the others queue behind it; then it takes the batch and waits
        # for its write (looked at every turn: the write may take only a few).
        await eventually(
            lambda: intake._writes and not intake._waiting, "the batch taken and being written", interval=0
        )
        taker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await taker
        assert [(await t)[0].spec.command for t in others] == [("echo", "2"), ("echo", "3")]
        # Its own session was in the batch taken: written, once, like the others.
        async with reading(engine) as conn:
            commands = sorted(r[0] for r in await conn.execute(select(sessions.c.command)))
        assert commands == [["echo", "1"], ["echo", "2"], ["echo", "3"]]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_more_requests_than_a_batch_holds_are_all_written_in_several(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        alice = await _principal(engine)
        intake = Intake(engine, busy_gap=math.inf)  # as under load: every submit waits for others
        n = BATCH_MOST + 44
        answers = await _all(intake, [Ask(_spec(i), None, None, **alice) for i in range(n)])
        made = [a for a in answers if not isinstance(a, BaseException)]
        assert [r.spec.command for r, _ in made] == [("echo", str(i)) for i in range(n)]
        assert len({r.created_at for r, _ in made}) == 2  # two transactions: a full one, the rest
        assert await _rows(engine) == (n, n)


# A database refusing one row when it is written: SQLite and PostgreSQL both run the trigger inside
# the INSERT, before the shared transaction commits.
_REFUSE_ON_INSERT = {
    "sqlite": [
        "CREATE TRIGGER refuse_on_insert BEFORE INSERT ON sessions WHEN NEW.name = 'refused'"
        " BEGIN SELECT RAISE(ABORT, 'refused by the database'); END"
    ],
    "postgres": [
        "CREATE FUNCTION refuse_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " IF NEW.name = 'refused' THEN RAISE EXCEPTION 'refused by the database'; END IF;"
        " RETURN NEW; END $$",
        "CREATE TRIGGER refuse_on_insert BEFORE INSERT ON sessions"
        " FOR EACH ROW EXECUTE FUNCTION refuse_on_insert()",
    ],
}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_shared_transaction_the_database_refuses_sends_each_request_alone(
    backend: str, fresh_database: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shared: list[int] = []
    together = intake_module._together

    async def counted(engine: AsyncEngine, asks: Any) -> Any:
        shared.append(len(asks))  # observed only: the real shared transaction runs
        return await together(engine, asks)

    monkeypatch.setattr(intake_module, "_together", counted)
    async with migrated(fresh_database(backend)) as engine:
        alice = await _principal(engine)
        async with transaction(engine) as conn:
            for ddl in _REFUSE_ON_INSERT[backend]:
                await conn.exec_driver_sql(ddl)
        intake = Intake(engine, busy_gap=math.inf)  # as under load: every submit waits for others
        asks = [Ask(_spec(i, name="refused" if i == 1 else None), None, None, **alice) for i in range(3)]
        first, refused, last = await _all(intake, asks)

        # They were tried together, and nothing of that was written; each then went alone: the
        # refused one fails on its own, the others are written, once.
        assert shared == [3]
        assert isinstance(refused, Exception) and "refused by the database" in str(refused)
        assert not isinstance(first, BaseException) and first[0].spec.command == ("echo", "0")
        assert not isinstance(last, BaseException) and last[0].spec.command == ("echo", "2")
        assert await _rows(engine) == (2, 2)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_failure_after_the_batch_is_written_never_sends_it_again(
    backend: str, fresh_database: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure once the write has run (here: making the records it answers with) fails every
    request it was to make, and none is sent again alone: from there on (its commit) it may have
    been written, and no session is ever written twice.  Here it failed before its commit, so the
    transaction wrote nothing.  A request the batch refused before its write keeps its own answer
    (an unknown key's 401)."""
    from corral.store import sessions as session_store

    def broken(written: Any) -> Any:
        raise RuntimeError("after the write")

    async with migrated(fresh_database(backend)) as engine:
        alice = await _principal(engine)
        intake = Intake(engine, busy_gap=math.inf)  # as under load: every submit waits for others
        monkeypatch.setattr(session_store, "records_of", broken)
        asks = [Ask(_spec(i), None, None, **alice) for i in range(3)]
        *answers, stranger = await _all(
            intake, [*asks, Ask(_spec(9), None, None, key="crl_nobody", who=alice["who"])]
        )
        monkeypatch.undo()
        assert all(isinstance(a, RuntimeError) for a in answers), answers
        assert isinstance(stranger, Unauthorized), stranger
        assert await _rows(engine) == (0, 0)


async def test_a_batch_whose_connection_is_lost_before_its_commit_is_written_alone_once(
    fresh_database: Callable[[str], str],
) -> None:
    """A batch's connection ended while its INSERT waits (on a lock this test holds, as a server
    restart would end it), before its COMMIT: its transaction wrote nothing, so each request is
    sent again alone and written once."""
    url = fresh_database("postgres")
    async with migrated(url) as engine:
        alice = await _principal(engine)
        intake = Intake(engine, busy_gap=math.inf)  # as under load: every submit waits for others
        asks = [Ask(_spec(i), None, None, **alice) for i in range(3)]
        holder = make_engine(url)
        try:
            async with transaction(holder) as conn:
                await conn.execute(text("LOCK TABLE sessions IN SHARE MODE"))  # inserts wait
                sent = asyncio.ensure_future(_all(intake, asks))
                waiting = text(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%INSERT INTO sessions%' AND pid <> pg_backend_pid()"
                )

                async def blocked() -> list[int]:
                    assert not sent.done(), "the batch never wrote"
                    # Within a transaction pg_stat_activity is read once and then kept.
                    await conn.execute(text("SELECT pg_stat_clear_snapshot()"))
                    return list((await conn.execute(waiting)).scalars())

                pids = await eventually(blocked, "the batch's INSERT waiting on the lock", 30, 0.02)
                assert len(pids) == 1  # one INSERT for the three
                await conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pids[0]})
            answers = await sent
        finally:
            await holder.dispose()
        made = [answer for answer in answers if not isinstance(answer, BaseException)]
        assert [m.spec.command for m, created in made if created] == [("echo", str(i)) for i in range(3)]
        assert await _rows(engine) == (3, 3)
