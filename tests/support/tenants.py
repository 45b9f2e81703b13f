"""Users for tests: through the admin API and CLI as an operator would, or straight through the store."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import httpx
from sqlalchemy import insert, select

from corral.store import auth
from corral.store.db import transaction
from corral.store.dialect.engine import make_engine
from corral.store.tables import project_members, projects, users
from tests.support.cluster import Cluster


def add_user_in_own_project(database_url: str, name: str, project: str, also_default: bool = False) -> str:
    """Returns the new user's API key (a plain user: not an admin)."""
    key = auth.new_key()

    async def go() -> None:
        engine = make_engine(database_url)
        try:
            now = datetime.now(UTC)
            async with transaction(engine) as conn:
                project_id, user_id = str(uuid.uuid4()), str(uuid.uuid4())
                await conn.execute(
                    insert(projects).values(id=project_id, name=project, config={}, created_at=now)
                )
                await conn.execute(insert(users).values(id=user_id, name=name, role="user", created_at=now))
                await conn.execute(insert(project_members).values(project_id=project_id, user_id=user_id))
                if also_default:
                    default = select(projects.c.id).where(projects.c.name == "default")
                    default_id = (await conn.execute(default)).scalar_one()
                    await conn.execute(insert(project_members).values(project_id=default_id, user_id=user_id))
                await auth.add_key(conn, user_id, key, now)
        finally:
            await engine.dispose()

    asyncio.run(go())
    return key


def client(c: Cluster, key: str) -> httpx.Client:
    return httpx.Client(base_url=c.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def make_user(c: Cluster, name: str, projects: list[str]) -> str:
    """Through the admin API and CLI, as an operator would; returns the user's first key."""
    for p in projects:
        if c.http.get(f"/api/v1/projects/{p}").status_code == 404:
            assert c.corral("project", "create", p).returncode == 0
    made = c.corral_json("user", "create", name, *[a for p in projects for a in ("--project", p)])
    assert (made["name"], made["role"], made["projects"]) == (name, "user", sorted(projects))
    return str(made["key"]["key"])


def insert_session(database_url: str, session_id: str, project: str, owner: str) -> None:
    """A PENDING session with an id of the test's choosing (in a group no agent serves), straight
    through the store: ids are random otherwise, and two sharing their first 8 digits are rare."""
    from corral.domain.records import NewSession
    from corral.domain.spec import SessionSpec
    from corral.store.agents import ensure_resource_group
    from corral.store.sessions import insert_session as insert

    spec = SessionSpec(command=("true",), project=project, resource_group="nobody-serves-" + project)
    new = NewSession(session_id, f"s-{session_id[-4:]}", owner, spec)

    async def go() -> None:
        engine = make_engine(database_url)
        try:
            async with transaction(engine) as conn:
                now = datetime.now(UTC)
                await ensure_resource_group(conn, spec.resource_group, now)
                await insert(conn, new, now)
        finally:
            await engine.dispose()

    asyncio.run(go())
