"""PostgreSQL connections that die while pooled: one idle past the ping window is pinged and
replaced at checkout, so the transaction that checks it out never sees it; one that dies within the
window fails its transaction once, and the next transaction runs on a new connection."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from corral.store import db


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
