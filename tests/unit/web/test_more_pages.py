"""The array, queue, agents and admin pages: each renders for the people it is for, an admin page
is refused to a user, and the queue shows another project's session only as a place in line."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import update

from corral.store.db import transaction
from corral.store.dialect.engine import make_engine
from corral.store.tables import agents
from tests.support.db import register_agent
from tests.unit.web.conftest import KEY, URL, Site, signed_in


def test_every_page_renders_for_an_admin(site: Site) -> None:
    made = site.submit(KEY, name="one")
    array = httpx.Client(transport=site.transport, base_url=URL, headers={"Authorization": f"Bearer {KEY}"})
    arr = array.post("/api/v1/sessions", json={"command": ["true"], "array": "0-3"}).json()
    browser = signed_in(site.transport, KEY)
    for path in (
        "/ui/sessions",
        f"/ui/sessions/{made['id']}",
        "/ui/submit",
        f"/ui/arrays/{arr['array_id']}",
        "/ui/queue/default",
        "/ui/agents",
        "/ui/admin/policies",
        "/ui/admin/groups",
        "/ui/admin/users",
        "/ui/admin/audit",
    ):
        got = browser.get(path)
        assert got.status_code == 200 and "<h1>" in got.text, (path, got.text[:300])
    grid = browser.get(f"/ui/arrays/{arr['array_id']}").text
    assert grid.count('href="/ui/sessions/') == 4 and "0 of 4 succeeded" in grid


def test_a_user_is_refused_the_admin_pages_and_sees_others_only_as_a_place(site: Site) -> None:
    alice, bob = site.user("alice", "a-proj"), site.user("bob", "b-proj")
    his = site.submit(bob, name="bobs-job", project="b-proj")
    hers = site.submit(alice, name="alices-job", project="a-proj")
    browser = signed_in(site.transport, alice)
    for path in ("/ui/admin/policies", "/ui/admin/groups", "/ui/admin/users", "/ui/admin/audit"):
        got = browser.get(path)
        assert got.status_code == 403 and "admin only" in got.text, path
    queue = browser.get("/ui/queue/default").text
    assert "alices-job" in queue and "bobs-job" not in queue and his["id"] not in queue
    assert "another project&#39;s session" in queue or "another project's session" in queue
    assert hers["id"] in queue
    nav = browser.get("/ui/sessions").text
    assert "/ui/admin/" not in nav  # no link to what they may not open


def test_an_array_of_another_project_is_not_found(site: Site) -> None:
    alice, bob = site.user("alice", "a-proj"), site.user("bob", "b-proj")
    http = httpx.Client(transport=site.transport, base_url=URL, headers={"Authorization": f"Bearer {bob}"})
    arr = http.post(
        "/api/v1/sessions", json={"command": ["true"], "array": "0-1", "project": "b-proj"}
    ).json()
    got = signed_in(site.transport, alice).get(f"/ui/arrays/{arr['array_id']}")
    assert got.status_code == 404


def test_an_agent_silent_past_the_fence_timeout_is_shown_fenced(site: Site, tmp_path: Path) -> None:
    async def add() -> None:
        engine = make_engine(f"sqlite+aiosqlite:///{tmp_path}/corral.db")
        try:
            async with transaction(engine) as conn:
                long_ago = datetime.now(UTC) - timedelta(hours=1)
                await register_agent(conn, "gone", {"cpu": 2}, now=long_ago)
                await register_agent(conn, "here", {"cpu": 2})
                await conn.execute(update(agents).where(agents.c.id == "gone").values(status="LOST"))
        finally:
            await engine.dispose()

    asyncio.run(add())
    page = signed_in(site.transport, KEY).get("/ui/agents").text
    gone = page[page.index('data-agent="gone"') :].split("</tr>")[0]
    here = page[page.index('data-agent="here"') :].split("</tr>")[0]
    assert "LOST" in gone and "fenced" in gone
    assert "ALIVE" in here and "fenced" not in here
