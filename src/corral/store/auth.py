"""Users, projects and API keys (stored as SHA-256 hashes: a key is shown once, never kept)."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import Principal
from corral.store.tables import api_keys, project_members, projects, users


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return "crl_" + secrets.token_urlsafe(32)


async def ensure_user(conn: AsyncConnection, name: str, role: str, now: datetime) -> str:
    row = (await conn.execute(select(users.c.id).where(users.c.name == name))).first()
    if row:
        return str(row.id)
    user_id = str(uuid.uuid4())
    await conn.execute(insert(users).values(id=user_id, name=name, role=role, created_at=now))
    default = (await conn.execute(select(projects.c.id).where(projects.c.name == "default"))).scalar_one()
    await conn.execute(insert(project_members).values(project_id=default, user_id=user_id))
    return user_id


async def add_key(conn: AsyncConnection, user_id: str, key: str, now: datetime) -> bool:
    """Store the key's hash; False when it was stored already."""
    exists = (await conn.execute(select(api_keys.c.id).where(api_keys.c.key_hash == hash_key(key)))).first()
    if exists is None:
        await insert_key(conn, user_id, key, now)
        return True
    return False


async def insert_key(conn: AsyncConnection, user_id: str, key: str, now: datetime) -> str:
    """A new key's hash (the key is never kept); returns the key's id."""
    key_id = str(uuid.uuid4())
    await conn.execute(
        insert(api_keys).values(
            id=key_id, user_id=user_id, key_hash=hash_key(key), prefix=key[:8], created_at=now
        )
    )
    return key_id


async def revoke_other_keys(conn: AsyncConnection, user_id: str, keep: str) -> int:
    result = await conn.execute(
        delete(api_keys).where(api_keys.c.user_id == user_id, api_keys.c.key_hash != hash_key(keep))
    )
    return int(result.rowcount)


_PRINCIPALS = (
    select(api_keys.c.key_hash, users.c.id, users.c.name, users.c.role, projects.c.name.label("project"))
    .join(api_keys, api_keys.c.user_id == users.c.id)
    .outerjoin(project_members, project_members.c.user_id == users.c.id)
    .outerjoin(projects, projects.c.id == project_members.c.project_id)
)
# One key (every lone request; most batches) by `=`: PostgreSQL then caches a generic plan.  With
# `= ANY(array)` it prices its generic plan for ten keys, and so plans every run afresh.
_ONE_KEY = _PRINCIPALS.where(api_keys.c.key_hash == bindparam("key_hash"))
_KEYS = _PRINCIPALS.where(api_keys.c.key_hash.in_(bindparam("key_hash", expanding=True)))


async def principal_for(conn: AsyncConnection, key: str) -> Principal | None:
    """The key's user and the projects it is a member of, in one query (every request asks)."""
    return (await principals_for(conn, [key])).get(key)


async def principals_for(conn: AsyncConnection, keys: Iterable[str]) -> dict[str, Principal]:
    """Each known key's caller, as principal_for, for many keys in one query (a batch of creates)."""
    by_hash = {hash_key(k): k for k in keys}
    if len(by_hash) == 1:
        rows = await conn.execute(_ONE_KEY, {"key_hash": next(iter(by_hash))})
    else:
        rows = await conn.execute(_KEYS, {"key_hash": sorted(by_hash)})
    found: dict[str, tuple[Any, set[str]]] = {}
    for row in rows:
        names = found.setdefault(row.key_hash, (row, set()))[1]
        if row.project is not None:
            names.add(row.project)
    return {
        by_hash[h]: Principal(str(row.id), row.name, row.role, frozenset(names))
        for h, (row, names) in found.items()
    }


async def principal_by_hash(conn: AsyncConnection, key_hash: str) -> Principal | None:
    """The caller of the key with this hash (a web sign-in keeps the hash, never the key)."""
    rows = list(await conn.execute(_ONE_KEY, {"key_hash": key_hash}))
    if not rows:
        return None
    names = frozenset(r.project for r in rows if r.project is not None)
    return Principal(str(rows[0].id), rows[0].name, rows[0].role, names)


async def held_keys(conn: AsyncConnection, keys: Iterable[str]) -> set[str]:
    """Those of `keys` that still exist (not revoked), in one query."""
    by_hash = {hash_key(k): k for k in keys}
    rows = await conn.execute(
        select(api_keys.c.key_hash).where(api_keys.c.key_hash.in_(bindparam("h", expanding=True))),
        {"h": sorted(by_hash)},
    )
    return {by_hash[h] for h in rows.scalars()}


async def project_exists(conn: AsyncConnection, name: str) -> bool:
    return (await conn.execute(select(projects.c.id).where(projects.c.name == name))).first() is not None
