"""Deployments for tests: real replicas (tests/support/replica.py, a small HTTP server) through the
API, and waits on what the API shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.support.cluster import Cluster, poll

REPLICA = (Path(__file__).parent / "replica.py").read_text()


def replica_session(env: dict[str, str] | None = None, cpu: float = 0.25) -> dict[str, Any]:
    """A replica's session: `python3 -c` with the server's source (kernels may run as another
    account, which cannot read this checkout)."""
    return {"command": ["python3", "-c", REPLICA], "resources": {"cpu": cpu}, "env": env or {}}


def flags(c: Cluster) -> Path:
    """A directory every account can read: a file named after a replica's session id here makes its
    /health answer 500 (with REPLICA_SICK set to it)."""
    d = c.workdir / "flags"
    d.mkdir(exist_ok=True)
    d.chmod(0o755)
    return d


def create(http: httpx.Client, name: str, replicas: int, **more: Any) -> dict[str, Any]:
    body = {"name": name, "replicas": replicas, "session": replica_session(), "health": {"interval": 0.5}}
    resp = http.post("/api/v1/deployments", json={**body, **more})
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def get(http: httpx.Client, name: str) -> dict[str, Any]:
    resp = http.get(f"/api/v1/deployments/{name}")
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def ready(
    http: httpx.Client, name: str, replicas: int, timeout: float = 60, revision: int | None = None
) -> dict[str, Any]:
    """Once READY with `replicas` routes in traffic, all HEALTHY (of `revision`, if given) and no
    other route left."""

    def check() -> dict[str, Any] | None:
        d = get(http, name)
        live = [r for r in d["routes"] if r["status"] != "TERMINATED"]
        serving = [r for r in live if r["in_traffic"] and r["status"] == "HEALTHY"]
        current = revision is None or all(r["revision"] == revision for r in live)
        done = d["status"] == "READY" and len(serving) == replicas == len(live) and current
        return d if done else None

    return dict(poll(check, timeout, f"deployment {name} READY with {replicas} replicas", interval=0.2))


def in_traffic(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in d["routes"] if r["in_traffic"]]


def history(http: httpx.Client, name: str) -> list[dict[str, Any]]:
    return list(http.get(f"/api/v1/deployments/{name}/history").json())
