"""PostgreSQL connections that die while pooled: one idle past the ping window is pinged and
replaced at checkout, so the transaction that checks it out never sees it; one that dies within the
window is replaced too, as asyncpg knows the server closed it.  A connection that dies under a
request is a 503, never a 500, and the manager goes on serving."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import make_url, text

from corral.domain.errors import Unavailable
from corral.store import db
from corral.store.dialect import engine as engine_module
from tests.support.cluster import Cluster
from tests.support.eventually import eventually
from tests.support.postgres import start_postgres


async def _backend(engine: object) -> int:
    async with db.transaction(engine) as conn:  # type: ignore[arg-type]
        return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def _kill(engine: object, pid: int) -> None:
    """Ends one backend from another connection, as a server restart or a proxy drop would."""
    other = engine_module.make_engine(str(engine.url.render_as_string(hide_password=False)))  # type: ignore[attr-defined]
    try:
        async with db.transaction(other) as conn:
            assert (await conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})).scalar_one()
    finally:
        await other.dispose()


async def test_an_idle_connection_that_died_is_replaced_at_checkout(
    fresh_database: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = engine_module.make_engine(fresh_database("postgres"), pool_size=1)
    try:
        first = await _backend(engine)
        await _kill(engine, first)
        monkeypatch.setattr(engine_module, "PING_AFTER", 0.0)  # as if it had sat idle past the window
        assert await _backend(engine) != first
    finally:
        await engine.dispose()


async def test_a_connection_the_server_closed_within_the_window_is_replaced(
    fresh_database: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ping (it was used a moment ago), but asyncpg knows the server closed it: no failure."""
    monkeypatch.setattr(engine_module, "PING_AFTER", 3600.0)
    engine = engine_module.make_engine(fresh_database("postgres"), pool_size=1)
    try:
        async with db.transaction(engine) as conn:
            first = int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())
            pooled = (await conn.get_raw_connection()).driver_connection
        await _kill(engine, first)
        # The backend sends its FATAL message, then closes the socket: only once asyncpg has read
        # the close does it know.  In between, a statement fails once as a disconnect (the pool
        # replaces the connection, a request answers 503), as one on a connection dying unnoticed.
        await eventually(pooled.is_closed, "asyncpg to read the server's close")
        assert await _backend(engine) != first
    finally:
        await engine.dispose()


async def test_a_request_whose_connection_dies_under_it_is_a_503(
    fresh_database: Callable[[str], str], tmp_path: Path
) -> None:
    """The request's query waits on a lock this test holds, and its backend is ended meanwhile (as
    a restart would): a 503 saying so, never a 500, and the manager goes on serving."""
    url = fresh_database("postgres")
    c = Cluster(url, tmp_path)
    holder = engine_module.make_engine(url)
    try:
        c.start_manager()
        async with db.transaction(holder) as conn:
            # The API keys, which every user request reads and nothing else does: the scheduling
            # loop's reads of a locked sessions table would wait too, and be ended along with it.
            await conn.execute(text("LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE"))
            with ThreadPoolExecutor(1) as pool:
                pending = pool.submit(c.http.get, "/api/v1/sessions")
                waiting = text(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND query LIKE '%api_keys%'"
                    " AND pid <> pg_backend_pid()"
                )
                deadline = time.monotonic() + 30
                ended = 0
                while not pending.done() and time.monotonic() < deadline:
                    # Within a transaction pg_stat_activity is read once and then kept: without this,
                    # the loop saw only what waited at its first look (the test's earlier flakiness).
                    await conn.execute(text("SELECT pg_stat_clear_snapshot()"))
                    for pid in list((await conn.execute(waiting)).scalars()):
                        await conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
                        ended += 1
                    await asyncio.sleep(0.05)
                assert ended, "the request never reached the database"
                resp = pending.result(timeout=5)
        assert resp.status_code == 503, resp.text
        assert resp.json()["error"]["code"] == "database_unavailable"
        assert resp.headers["Retry-After"] == "1"
        assert c.http.get("/api/v1/sessions").status_code == 200
        s = c.submit(command=["true"])  # and writes go on
        assert c.http.get(f"/api/v1/sessions/{s['id']}").status_code == 200
        assert "unhandled error" not in (tmp_path / "manager.log").read_text()
    finally:
        await holder.dispose()
        c.close()


async def test_a_connection_ended_in_the_pool_fails_at_most_once_and_as_a_disconnect(
    fresh_database: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ended and used at once, before asyncpg has read the close: the statement may fail, but as a
    disconnect (a request's 503, the pool replacing the connection), and the next one runs."""
    monkeypatch.setattr(engine_module, "PING_AFTER", 3600.0)
    url = fresh_database("postgres")
    engine, killer = engine_module.make_engine(url, pool_size=1), engine_module.make_engine(url, pool_size=1)
    try:
        for _ in range(5):
            first = await _backend(engine)
            async with db.transaction(killer) as conn:
                await conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": first})
            try:
                assert await _backend(engine) != first
            except Unavailable as exc:
                assert exc.maybe_applied, exc
            assert await _backend(engine) != first
    finally:
        await engine.dispose()
        await killer.dispose()


def test_while_the_database_cannot_be_reached_requests_answer_503_and_recover(tmp_path: Path) -> None:
    """A server of its own, shut down under a running manager: every request is a 503 saying so
    (never a 500, nothing applied), and once it is back the manager serves again."""
    server = start_postgres()
    try:
        server.psql("CREATE DATABASE corral_down")
        url = server.dsn("corral_down")
        asyncio.run(_migrate(url))
        c = Cluster(url, tmp_path)
        try:
            c.start_manager()
            assert c.http.get("/api/v1/sessions").status_code == 200
            server.pause()
            for _ in range(3):  # the pooled connections' deaths, then refused connections
                for resp in (c.http.get("/api/v1/sessions"), c.http.post("/api/v1/sessions", json=SPEC)):
                    assert resp.status_code == 503, resp.text
                    assert resp.json()["error"]["code"] == "database_unavailable"
                    assert resp.headers["Retry-After"] == "1"
            server.resume()
            deadline = time.monotonic() + 30
            while c.http.get("/api/v1/sessions").status_code != 200:
                assert time.monotonic() < deadline, "the manager did not serve again"
                time.sleep(0.2)
            assert c.http.get("/api/v1/sessions").json() == []  # nothing was applied while down
            assert c.http.post("/api/v1/sessions", json=SPEC).status_code == 201
            assert "unhandled error" not in (tmp_path / "manager.log").read_text()
        finally:
            c.close()
    finally:
        server.stop()


SPEC = {"name": "down", "command": ["true"]}


async def _migrate(url: str) -> None:
    engine = engine_module.make_engine(url)
    try:
        await db.upgrade(engine)
    finally:
        await engine.dispose()


def _opened(c: Cluster) -> float:
    for line in c.http.get("/metrics").text.splitlines():
        if line.startswith("corral_db_connections_opened_total "):
            return float(line.split()[1])
    raise AssertionError("no corral_db_connections_opened_total in /metrics")


async def _bursts(c: Cluster, times: int, width: int) -> None:
    """`times` rounds of `width` creates sent at once, each round answered before the next."""
    async with httpx.AsyncClient(base_url=c.url, headers=c.http.headers, timeout=30) as http:
        for _ in range(times):
            sent = [http.post("/api/v1/sessions", json=SPEC) for _ in range(width)]
            assert all(r.status_code == 201 for r in await asyncio.gather(*sent))


@pytest.mark.parametrize(("pool", "kept", "churns"), [(None, 17, False), ("1", 3, True)])
async def test_load_within_the_pool_opens_no_more_connections_than_it_keeps(
    fresh_database: Callable[[str], str], tmp_path: Path, pool: str | None, kept: int, churns: bool
) -> None:
    """Bursts of 10 creates (and the scheduling loop beside them) against the default pool, which
    keeps 16: at most 17 connections are ever opened (the 16, and the one the manager migrated
    with), each kept for the next burst.  A connection opened for a burst and closed after it costs
    the server a process and a plan of every statement it runs.  With a pool narrower than the load
    (1, and 1 overflow connection closed at check-in), connections are opened again burst after
    burst, beyond the most it could keep, and the count shows it to an operator (/metrics)."""
    c = Cluster(fresh_database("postgres"), tmp_path, env={"CORRAL_DB_POOL_SIZE": pool} if pool else {})
    try:
        c.start_manager()
        await _bursts(c, 9, 10)
        assert (_opened(c) > kept) is churns, _opened(c)
    finally:
        c.close()


async def test_a_connection_whose_setup_fails_is_unavailable_not_an_error(
    fresh_database: Callable[[str], str],
) -> None:
    """The set-up of each new connection (the driver's codecs, the array types learnt up front)
    failing on the server is a connection that could not be made: Unavailable (503), as a
    refused connect is, not an unhandled driver error (500).  Here the role may not read
    pg_type, which the set-up reads to learn its types."""
    url = make_url(fresh_database("postgres"))
    role = "r_" + uuid.uuid4().hex[:12]
    engine = engine_module.make_engine(url.render_as_string(hide_password=False), pool_size=1)
    try:
        async with db.transaction(engine) as conn:
            await conn.execute(text(f"CREATE ROLE {role} LOGIN"))
            await conn.execute(text("REVOKE SELECT ON pg_catalog.pg_type FROM PUBLIC"))
    finally:
        await engine.dispose()
    plain = engine_module.make_engine(
        url.set(username=role).render_as_string(hide_password=False), pool_size=1
    )
    try:
        with pytest.raises(Unavailable, match="pg_type"):
            async with db.reading(plain):
                pass
    finally:
        await plain.dispose()
