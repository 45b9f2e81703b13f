"""Idempotency is per caller: another project's user never reaches a session through creation_id."""

from __future__ import annotations

import uuid

import httpx

from tests.support.cluster import Cluster
from tests.support.tenants import add_user_in_own_project


def test_creation_id_never_crosses_users(cluster: Cluster) -> None:
    name = "mallory-" + uuid.uuid4().hex[:6]
    key = add_user_in_own_project(cluster.database_url, name, "proj-" + name)
    other = httpx.Client(base_url=cluster.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    secret = {"command": ["true"], "env": {"TOKEN": "s3cr3t-value"}, "creation_id": "nightly-build"}
    mine = cluster.http.post("/api/v1/sessions", json=secret)
    assert mine.status_code == 201, mine.text
    plain = cluster.submit(command=["true"])  # no creation_id: its id must not act as one

    body = {"command": ["true"], "project": "proj-" + name}
    for creation_id in ("nightly-build", mine.json()["id"], plain["id"]):
        theirs = other.post("/api/v1/sessions", json={**body, "creation_id": creation_id})
        assert theirs.status_code == 201, theirs.text
        got = theirs.json()
        assert got["id"] not in (mine.json()["id"], plain["id"])
        assert got["owner"] == name and "s3cr3t-value" not in theirs.text
    # They cannot read it either, by id or in a list.
    assert other.get(f"/api/v1/sessions/{mine.json()['id']}").status_code == 404
    listed = other.get("/api/v1/sessions", params={"limit": 1000}).json()
    assert {s["owner"] for s in listed} == {name}
    assert sum(other.get("/api/v1/sessions/counts").json().values()) == 3

    # The same caller's replay returns the original; a different request under the same id is 409.
    again = cluster.http.post("/api/v1/sessions", json=secret)
    assert (again.status_code, again.json()["id"]) == (200, mine.json()["id"])
    changed = cluster.http.post("/api/v1/sessions", json={**secret, "command": ["false"]})
    assert changed.status_code == 409 and changed.json()["error"]["details"]["field"] == "creation_id"
    other.close()
