"""Single-session creates that arrive together are written in one transaction (services/intake.py),
and each request is still answered as if it had come alone: its own session, its own earlier one,
or its own refusal, never another's.  On both backends, through the real store."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from corral.domain.resources import ResourceSlots
from corral.domain.spec import SessionSpec
from corral.services.errors import Conflict, InvalidInput
from corral.services.intake import BATCH_MOST, Ask, Intake
from corral.store import auth
from corral.store.auth import Principal
from corral.store.db import reading, transaction
from corral.store.records import SessionRecord
from corral.store.tables import kernels, sessions
from tests.conftest import BACKENDS
from tests.support.cluster import Cluster
from tests.support.db import migrated


def _spec(n: int, **fields: Any) -> SessionSpec:
    return SessionSpec(command=("echo", str(n)), resources=ResourceSlots.parse({"cpu": 1}), **fields)


async def _principal(engine: AsyncEngine, name: str = "alice") -> Principal:
    async with transaction(engine) as conn:
        user_id = await auth.ensure_user(conn, name, "user", datetime.now(UTC))
    return Principal(user_id, name, "user", frozenset({"default"}))


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
        kept, created = await intake.create(Ask(alice, _spec(0, creation_id="kept"), None, None))
        other, _ = await intake.create(Ask(alice, _spec(0, creation_id="other"), None, None))
        assert created
        asks = [
            *(Ask(alice, _spec(i), None, None) for i in range(1, 7)),
            Ask(alice, _spec(7, project="nowhere"), None, None),
            Ask(alice, _spec(8, resource_group="nowhere"), None, None),
            Ask(alice, _spec(0, creation_id="kept"), None, None),
            Ask(alice, _spec(9, creation_id="other"), None, None),
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
        same = [Ask(alice, _spec(1, creation_id="k"), None, None) for _ in range(3)]
        different = Ask(alice, _spec(2, creation_id="k"), None, None)
        bobs = Ask(bob, _spec(1, creation_id="k"), None, None)  # keys are per caller
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


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_request_that_gives_up_while_waiting_is_not_written_and_the_rest_are(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        alice = await _principal(engine)
        intake = Intake(engine, busy_gap=math.inf)  # as under load: every submit waits for others
        # The first holds the door for one loop turn; the second gives up while it waits behind it.
        first = asyncio.create_task(intake.create(Ask(alice, _spec(1), None, None)))
        second = asyncio.create_task(intake.create(Ask(alice, _spec(2), None, None)))
        third = asyncio.create_task(intake.create(Ask(alice, _spec(3), None, None)))
        await asyncio.sleep(0)
        second.cancel()
        made = [await first, await third]
        with pytest.raises(asyncio.CancelledError):
            await second
        assert [r.spec.command for r, _ in made] == [("echo", "1"), ("echo", "3")]
        assert await _rows(engine) == (2, 2)

        # The one holding the door gives up: the others are written by the next in line.
        leader = asyncio.create_task(intake.create(Ask(alice, _spec(4), None, None)))
        others = [asyncio.create_task(intake.create(Ask(alice, _spec(n), None, None))) for n in (5, 6)]
        await asyncio.sleep(0)
        leader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leader
        assert [(await t)[0].spec.command for t in others] == [("echo", "5"), ("echo", "6")]
        assert await _rows(engine) == (4, 4)


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
        taker = asyncio.create_task(intake.create(Ask(alice, _spec(1), None, None)))
        others = [asyncio.create_task(intake.create(Ask(alice, _spec(n), None, None))) for n in (2, 3)]
        await asyncio.sleep(0)  # the taker holds the door, the others queue behind it
        await asyncio.sleep(0)  # the taker has taken the batch and waits for its write
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
        answers = await _all(intake, [Ask(alice, _spec(i), None, None) for i in range(n)])
        made = [a for a in answers if not isinstance(a, BaseException)]
        assert [r.spec.command for r, _ in made] == [("echo", str(i)) for i in range(n)]
        assert len({r.created_at for r, _ in made}) == 2  # two transactions: a full one, the rest
        assert await _rows(engine) == (n, n)
