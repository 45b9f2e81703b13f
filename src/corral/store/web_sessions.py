"""The web UI's sign-ins (by the hash of their cookie's token) and the cookie signing key."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.errors import Duplicate
from corral.store.db import savepoint
from corral.store.tables import api_keys
from corral.store.web_tables import web_keys, web_sessions

w = web_sessions

COOKIE_KEY = "cookie"


@dataclass(frozen=True)
class WebSession:
    token_hash: str
    key_hash: str
    csrf: str
    created_at: datetime
    expires_at: datetime
    ended_at: datetime | None


async def key(conn: AsyncConnection) -> str | None:
    """The cookie signing key, if any sign-in has made it."""
    found = (await conn.execute(select(web_keys.c.secret).where(web_keys.c.name == COOKIE_KEY))).scalar()
    return None if found is None else str(found)


async def signing_key(conn: AsyncConnection, now: datetime) -> str:
    """The cookie signing key, made by the first manager to need it (a race keeps the first)."""
    found = await key(conn)
    if found is not None:
        return found
    made = secrets.token_urlsafe(48)
    try:
        async with savepoint(conn):
            await conn.execute(insert(web_keys).values(name=COOKIE_KEY, secret=made, created_at=now))
    except Duplicate:  # another manager made it meanwhile: its key it is
        return str(await key(conn))
    return made


async def add(conn: AsyncConnection, session: WebSession) -> None:
    await conn.execute(insert(w).values(**session.__dict__))


async def live(conn: AsyncConnection, token_hash: str, now: datetime) -> WebSession | None:
    """The sign-in, unless it expired, was signed out, or its API key was revoked."""
    row = (
        await conn.execute(
            select(w)
            .join(api_keys, api_keys.c.key_hash == w.c.key_hash)
            .where(w.c.token_hash == token_hash, w.c.ended_at.is_(None), w.c.expires_at > now)
        )
    ).first()
    return None if row is None else WebSession(**dict(row._mapping))


async def end(conn: AsyncConnection, token_hash: str, now: datetime) -> None:
    await conn.execute(
        update(w).where(w.c.token_hash == token_hash, w.c.ended_at.is_(None)).values(ended_at=now)
    )


async def prune(conn: AsyncConnection, before: datetime) -> int:
    """Forget sign-ins that expired or ended before `before`."""
    gone = await conn.execute(delete(w).where((w.c.expires_at < before) | (w.c.ended_at < before)))
    return int(gone.rowcount)
