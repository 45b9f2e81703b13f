"""GraphQL reads a page of sessions in a fixed number of statements, whatever its size: a page of
100 sessions with their kernels, chains, attempts and parents takes as many as a page of 10 (the
data loaders batch each kind), on both backends.  A real manager app in-process, so that the
statements its request sends can be counted."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from corral.boot.manager_app import create_app
from corral.domain.records import NewSession
from corral.domain.spec import SessionSpec
from corral.settings import ManagerSettings
from corral.store import retries, sessions
from corral.store.db import transaction
from corral.store.unit import Engine
from tests.conftest import BACKENDS

KEY = "crl_graphql_statements_admin_key"
CHAINS = 60
"""Chains of two attempts: 120 sessions of two kernels each, more than the largest page."""

PAGE = """query ($first: Int!) { sessions(first: $first) { pageInfo { hasNextPage endCursor }
  edges { cursor node {
    id status retryState retryChain rootCause { worker kernelId }
    kernels { id rank status exitCode }
    attempts { id status retryChain kernels { id } }
    parentSession { id retryChain kernels { id } }
  } } } }"""
WITH_HISTORY = PAGE.replace("parentSession {", "history { handler message } parentSession {")
_TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")


async def _chains(engine: Engine) -> None:
    """Sessions straight through the store (no agent runs them): every other one a retry."""
    start = datetime.now(UTC) - timedelta(hours=1)
    async with transaction(engine) as conn:
        for i in range(CHAINS):
            spec = SessionSpec(command=("true",), cluster_size=2)
            first, second = str(uuid.uuid4()), str(uuid.uuid4())
            now = start + timedelta(seconds=2 * i)
            await sessions.insert_session(conn, NewSession(first, f"c{i}", "admin", spec), now)
            child = NewSession(
                second,
                f"c{i}-retry-2",
                "admin",
                spec,
                parent_session_id=first,
                root_session_id=first,
                attempt=2,
            )
            await sessions.insert_session(conn, child, now + timedelta(seconds=1))
            await retries.decide(conn, first, "scheduled", "test: retried", second)


class Counted:
    """The statements a request sends: from its own task and the tasks it starts (the loaders'
    batches), not from the app's background tasks (the event feed, upkeep)."""

    def __init__(self, *engines: Engine) -> None:
        self.engines = {id(e.sync_engine): e.sync_engine for e in engines}.values()
        self.background: set[asyncio.Task[Any]] = set()
        self.sent: list[str] = []

    def _seen(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if asyncio.current_task() in self.background:
            return
        if not statement.lstrip().upper().startswith(_TRANSACTION_CONTROL):
            self.sent.append(statement)

    async def post(self, http: httpx.AsyncClient, query: str, first: int) -> tuple[dict[str, Any], list[str]]:
        self.background, self.sent = asyncio.all_tasks() - {asyncio.current_task()}, []  # type: ignore[operator]
        for e in self.engines:
            event.listen(e, "before_cursor_execute", self._seen)
        try:
            resp = await http.post("/graphql", json={"query": query, "variables": {"first": first}})
        finally:
            for e in self.engines:
                event.remove(e, "before_cursor_execute", self._seen)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert "errors" not in body, body
        return body["data"], self.sent


@pytest.fixture(params=BACKENDS)
async def app(request: pytest.FixtureRequest, fresh_database: Callable[[str], str]) -> AsyncIterator[Any]:
    settings = ManagerSettings(
        database_url=fresh_database(request.param), bootstrap_admin_key=KEY, agent_token="t"
    )
    made = create_app(settings, run_scheduler=False)
    async with made.router.lifespan_context(made):
        await _chains(made.state.corral.engine)
        yield made


async def test_a_page_of_100_takes_the_statements_of_a_page_of_10(app: Any) -> None:
    state = app.state.corral
    counted = Counted(state.engine, state.reader)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t", headers=headers
    ) as http:
        small, few = await counted.post(http, PAGE, 10)
        large, many = await counted.post(http, PAGE, 100)
        # The key's look-up; the page's sessions, their kernels and chains; the parents and
        # their kernels; the attempts and their kernels.
        assert len(many) == len(few) <= 8, many
        assert len(large["sessions"]["edges"]) == 100 and large["sessions"]["pageInfo"]["hasNextPage"]
        _, with_history = await counted.post(http, WITH_HISTORY, 100)
        assert len(with_history) == len(many) + 1  # one statement for every history of the page

        # What the batches read is each session's own: as REST says, session by session.
        rest = (await http.get("/api/v1/sessions", params={"limit": 100})).json()
        nodes = [e["node"] for e in large["sessions"]["edges"]]
        assert [n["id"] for n in nodes] == [s["id"] for s in rest]
        by_id = {s["id"]: s for s in rest}
        for n in nodes:
            s = by_id[n["id"]]
            assert (n["retryChain"], n["retryState"], n["status"]) == (
                s["retry_chain"],
                s["retry_state"],
                s["status"],
            )
            assert [k["id"] for k in n["kernels"]] == [k["id"] for k in s["kernels"]]
            assert [a["id"] for a in n["attempts"]] == s["retry_chain"]
            assert all(a["retryChain"] == s["retry_chain"] for a in n["attempts"])
            parent = n["parentSession"]
            assert (parent["id"] if parent else None) == s["parent_session_id"]
            if parent:
                assert parent["retryChain"] == s["retry_chain"] and len(parent["kernels"]) == 2
        assert small["sessions"]["edges"] == large["sessions"]["edges"][:10]
