"""The manager's app in-process (its own SQLite, no scheduling loops): pages rendered fast, through
the real routes, services and database."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.boot.manager_app import create_app
from corral.settings import ManagerSettings
from tests.support.asgi import SyncASGI

KEY = "crl_unit_web_admin_key_0123456789"
URL = "http://corral.test"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, html[:500]
    return found.group(1)


def signed_in(transport: httpx.BaseTransport, key: str) -> httpx.Client:
    """A browser-like client (cookies, no Bearer header) signed in with `key`."""
    browser = httpx.Client(transport=transport, base_url=URL, follow_redirects=False)
    form = browser.get("/ui/login")
    assert form.status_code == 200, form.text
    done = browser.post(
        "/ui/login", data={"api_key": key, "csrf_token": csrf_of(form.text), "next": "/ui/sessions"}
    )
    assert done.status_code == 303 and done.headers["location"] == "/ui/sessions", done.text
    return browser


@dataclass
class Site:
    transport: httpx.BaseTransport
    api: httpx.Client
    """the admin's API client (Bearer)"""

    def user(self, name: str, project: str) -> str:
        """A user in a project of their own; returns their API key."""
        if self.api.get(f"/api/v1/projects/{project}").status_code == 404:
            assert self.api.post("/api/v1/projects", json={"name": project}).status_code == 201
        made = self.api.post("/api/v1/users", json={"name": name, "role": "user", "projects": [project]})
        assert made.status_code == 201, made.text
        return str(made.json()["key"]["key"])

    def submit(self, key: str, **body: Any) -> dict[str, Any]:
        http = httpx.Client(
            transport=self.transport, base_url=URL, headers={"Authorization": f"Bearer {key}"}
        )
        made = http.post("/api/v1/sessions", json={"command": ["true"], **body})
        assert made.status_code == 201, made.text
        return dict(made.json())


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    settings = ManagerSettings(
        database_url=f"sqlite+aiosqlite:///{tmp_path}/corral.db", bootstrap_admin_key=KEY, agent_token="t"
    )
    transport = SyncASGI(create_app(settings, run_scheduler=False))
    try:
        with httpx.Client(
            transport=transport, base_url=URL, headers={"Authorization": f"Bearer {KEY}"}
        ) as api:
            yield Site(transport, api)
    finally:
        transport.close()
