"""No key, token or env value is ever written to a log, a log table or an event payload."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
from sqlalchemy import select

from corral.store.dialect.engine import make_engine
from corral.store.tables import kernel_logs, session_events, session_history
from tests.support.cluster import Cluster

SECRET_ENV = "env-secret-" + "7f3a9c"


def stored_text(database_url: str) -> str:
    async def go() -> str:
        engine = make_engine(database_url)
        try:
            async with engine.connect() as conn:
                parts = [str(r) for r in await conn.execute(select(kernel_logs.c.data))]
                parts += [str(r) for r in await conn.execute(select(session_events))]
                parts += [str(r) for r in await conn.execute(select(session_history))]
                return "\n".join(parts)
        finally:
            await engine.dispose()

    return asyncio.run(go())


def test_forced_errors_and_bad_auth_storms_leak_nothing(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster(env={"CORRAL_TEST_FAULT_ROUTES": "1"})
    c.start_agent("a1")
    s = c.submit(command=["sh", "-c", "echo working"], env={"API_PASSWORD": SECRET_ENV})
    assert c.wait(s["id"])["result"] == "success"
    for _ in range(20):
        assert c.http.get("/api/v1/_test/boom").status_code == 500
        agent = httpx.get(c.url + "/api/v1/_test/boom", headers={"Authorization": f"Bearer {c.token}"})
        assert agent.status_code == 500
        assert "Traceback" not in agent.text and c.token not in agent.text
    for i in range(50):
        wrong = httpx.post(
            c.url + "/api/v1/agent/orders",
            headers={"Authorization": f"Bearer {c.key}x{i}"},
            json={"agent_id": "a1", "epoch": 1},
        )
        assert wrong.status_code == 401
    bad = c.http.post("/api/v1/sessions", json={"command": ["true"], "env": {"BAD=": SECRET_ENV}})
    assert bad.status_code == 422 and SECRET_ENV not in bad.text
    logs = "\n".join(p.read_text(errors="replace") for p in Path(c.workdir).glob("*.log"))
    assert "forced failure" in logs, "the 500s were logged (with their tracebacks)"
    for secret in (c.key, c.token, SECRET_ENV):
        assert secret not in logs
        assert secret not in stored_text(c.database_url)
