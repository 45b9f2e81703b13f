"""A real manager app (its own SQLite, no scheduling loops) for the client to call in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI

from corral.boot.manager_app import create_app
from corral.client import AsyncClient, Client
from corral.settings import ManagerSettings
from tests.support.asgi import SyncASGI

KEY = "crl_unit_admin_key_0123456789"
URL = "http://corral.test"


def app_at(tmp_path: Path) -> FastAPI:
    settings = ManagerSettings(
        database_url=f"sqlite+aiosqlite:///{tmp_path}/corral.db",
        bootstrap_admin_key=KEY,
        agent_token="unit-agent-token",
    )
    return create_app(settings, run_scheduler=False)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    transport = SyncASGI(app_at(tmp_path))
    try:
        with httpx.Client(transport=transport) as http, Client(URL, KEY, http=http) as c:
            yield c
    finally:
        transport.close()


@pytest_asyncio.fixture
async def aclient(tmp_path: Path) -> AsyncIterator[AsyncClient]:
    app = app_at(tmp_path)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as http,
        AsyncClient(URL, KEY, http=http) as c,
    ):
        yield c
