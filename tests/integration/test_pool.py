"""PostgreSQL connections that die while pooled: one idle past the ping window is pinged and
replaced at checkout, so the transaction that checks it out never sees it; one that dies within the
window fails its transaction once, and the next transaction runs on a new connection.  Through the
API such a failure is a 503 to retry, never a 500, and the manager goes on serving."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from corral.store import db
from tests.support.cluster import Cluster, poll


async def _backend(engine: object) -> int:
    async with db.transaction(engine) as conn:  # type: ignore[arg-type]
        return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def _kill(engine: object, pid: int) -> None:
    """Ends one backend from another connection, as a server restart or a proxy drop would."""
    other = db.make_engine(str(engine.url.render_as_string(hide_password=False)))  # type: ignore[attr-defined]
    try:
        async with db.transaction(other) as conn:
            assert (await conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})).scalar_one()
    finally:
        await other.dispose()


async def test_an_idle_connection_that_died_is_replaced_at_checkout(
    fresh_database: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = db.make_engine(fresh_database("postgres"), pool_size=1)
    try:
        first = await _backend(engine)
        await _kill(engine, first)
        monkeypatch.setattr(db, "PING_AFTER", 0.0)  # as if it had sat idle past the window
        assert await _backend(engine) != first
    finally:
        await engine.dispose()


async def test_a_connection_that_died_within_the_window_fails_once(
    fresh_database: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "PING_AFTER", 3600.0)
    engine = db.make_engine(fresh_database("postgres"), pool_size=1)
    try:
        first = await _backend(engine)
        await _kill(engine, first)
        with pytest.raises(DBAPIError) as failed:
            await _backend(engine)
        assert failed.value.connection_invalidated
        assert await _backend(engine) != first
    finally:
        await engine.dispose()


async def _kill_all_but_mine(url: str) -> int:
    """Ends every other backend of the database (the manager's pooled connections)."""
    engine = db.make_engine(url)
    try:
        async with db.transaction(engine) as conn:
            killed = await conn.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
            return int(killed.scalar_one())
    finally:
        await engine.dispose()


async def test_a_request_on_a_connection_that_died_is_a_503_to_retry(
    fresh_database: Callable[[str], str], tmp_path: Path
) -> None:
    url = fresh_database("postgres")
    c = Cluster(url, tmp_path)
    try:
        c.start_manager()
        assert c.http.get("/api/v1/sessions").status_code == 200  # the pool holds a used connection
        assert await _kill_all_but_mine(url) > 0
        statuses = [c.http.get("/api/v1/sessions") for _ in range(5)]
        for resp in statuses:
            assert resp.status_code in (200, 503), resp.text
            if resp.status_code == 503:
                assert resp.json()["error"]["code"] == "database_unavailable"
                assert resp.headers["Retry-After"] == "1"
        poll(lambda: c.http.get("/api/v1/sessions").status_code == 200, 20, "the API answering again")
        s = c.submit(command=["true"])  # and writes go on
        assert c.http.get(f"/api/v1/sessions/{s['id']}").status_code == 200
        assert "unhandled error" not in (tmp_path / "manager.log").read_text()
    finally:
        c.close()
