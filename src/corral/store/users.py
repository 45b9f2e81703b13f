"""Users, their project memberships and their API keys (DESIGN §9)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import ApiKeyRecord, UserRecord
from corral.store import dialect
from corral.store.tables import api_keys, project_members, projects, users


async def _project_ids(conn: AsyncConnection, names: Sequence[str]) -> dict[str, str]:
    if not names:
        return {}
    rows = await conn.execute(select(projects.c.name, projects.c.id).where(projects.c.name.in_(list(names))))
    return {r.name: str(r.id) for r in rows}


async def missing_projects(conn: AsyncConnection, names: Sequence[str]) -> list[str]:
    found = await _project_ids(conn, names)
    return [n for n in names if n not in found]


async def create(
    conn: AsyncConnection, name: str, role: str, project_names: Sequence[str], now: datetime
) -> str:
    user_id = str(uuid.uuid4())
    await conn.execute(insert(users).values(id=user_id, name=name, role=role, created_at=now))
    await set_projects(conn, user_id, project_names)
    return user_id


async def set_projects(conn: AsyncConnection, user_id: str, project_names: Sequence[str]) -> None:
    await conn.execute(delete(project_members).where(project_members.c.user_id == user_id))
    ids = await _project_ids(conn, project_names)
    if ids:
        await conn.execute(
            insert(project_members),
            [{"project_id": pid, "user_id": user_id} for pid in sorted(set(ids.values()))],
        )


async def set_role(conn: AsyncConnection, user_id: str, role: str) -> None:
    await conn.execute(update(users).where(users.c.id == user_id).values(role=role))


async def set_config(conn: AsyncConnection, user_id: str, cfg: dict[str, Any]) -> None:
    await conn.execute(update(users).where(users.c.id == user_id).values(config=cfg))


async def config_of(conn: AsyncConnection, user_id: str) -> dict[str, Any]:
    row = (await conn.execute(select(users.c.config).where(users.c.id == user_id))).first()
    return dict(row.config or {}) if row else {}


async def _memberships(conn: AsyncConnection, user_ids: Sequence[str]) -> dict[str, list[str]]:
    rows = await conn.execute(
        select(project_members.c.user_id, projects.c.name)
        .join(projects, projects.c.id == project_members.c.project_id)
        .where(project_members.c.user_id.in_(list(user_ids)))
        .order_by(projects.c.name)
    )
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(str(r.user_id), []).append(r.name)
    return out


async def find(conn: AsyncConnection, name: str) -> UserRecord | None:
    found = await listed(conn, name)
    return found[0] if found else None


async def listed(conn: AsyncConnection, name: str | None = None) -> list[UserRecord]:
    query = select(users).order_by(users.c.name)
    if name is not None:
        query = query.where(users.c.name == name)
    rows = list(await conn.execute(query))
    member = await _memberships(conn, [str(r.id) for r in rows]) if rows else {}
    return [
        UserRecord(
            str(r.id), r.name, r.role, tuple(member.get(str(r.id), ())), r.created_at, dict(r.config or {})
        )
        for r in rows
    ]


async def keys(conn: AsyncConnection, user_id: str) -> list[ApiKeyRecord]:
    rows = await conn.execute(
        select(api_keys.c.id, api_keys.c.prefix, api_keys.c.created_at)
        .where(api_keys.c.user_id == user_id)
        .order_by(api_keys.c.created_at, api_keys.c.id)
    )
    return [ApiKeyRecord(str(r.id), r.prefix, r.created_at) for r in rows]


async def revoke(conn: AsyncConnection, user_id: str, key_id: str) -> bool:
    result = await conn.execute(
        delete(api_keys).where(api_keys.c.user_id == user_id, api_keys.c.id == key_id)
    )
    return bool(result.rowcount)


async def admin_keys_besides(conn: AsyncConnection, key_id: str) -> int:
    """The keys of admins other than this one, the admins' rows locked first so that two revokes
    at once cannot each leave the other's key as the last."""
    await dialect.of(conn).lock(conn, select(users.c.id).where(users.c.role == "admin"))
    found = await conn.execute(
        select(func.count())
        .select_from(api_keys.join(users, users.c.id == api_keys.c.user_id))
        .where(users.c.role == "admin", api_keys.c.id != key_id)
    )
    return int(found.scalar_one())
