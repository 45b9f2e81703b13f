"""Requests with one API key at once share a read of it, but each is answered by a read begun
after it arrived: a key revoked while requests wait is refused to every one that came after the
revocation, against a real (SQLite) database."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, event, insert

from corral.services import identities
from corral.store import auth
from corral.store.db import transaction
from corral.store.tables import api_keys, users
from tests.support.db import migrated


async def test_waiting_requests_share_reads_begun_after_they_arrived(tmp_path: Path) -> None:
    async with migrated(f"sqlite+aiosqlite:///{tmp_path}/c.db") as engine:
        key = auth.new_key()
        async with transaction(engine) as conn:
            now = datetime.now(UTC)
            await conn.execute(insert(users).values(id="u1", name="ann", role="user", created_at=now))
            await auth.add_key(conn, "u1", key, now)
        reads = 0

        def seen(*args: Any) -> None:
            nonlocal reads
            reads += "FROM users JOIN api_keys" in args[2]

        event.listen(engine.sync_engine, "before_cursor_execute", seen)
        found = await asyncio.gather(*(identities.holder(engine, key) for _ in range(32)))
        assert {w.name for w in found if w} == {"ann"} and 1 <= reads <= 2
        async with transaction(engine) as conn:
            await conn.execute(delete(api_keys))
        after = await asyncio.gather(*(identities.holder(engine, key) for _ in range(5)))
        assert after == [None] * 5  # each arrived after the revocation committed
        assert await identities.holder(engine, "crl_nobody") is None
        assert not identities._next and not identities._reading  # nothing left waiting
