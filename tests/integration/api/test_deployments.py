"""The deployment routes on a real manager, both backends: bad input refused naming the field and
writing nothing, names unique, and two users each seeing and changing only their own project's
deployments (and their proxies).  (Replicas running: tests/integration/deployments/.)"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.cluster import Cluster
from tests.support.deployments import replica_session
from tests.support.tenants import client, make_user

# Deployments here run no replica: `replicas` 0 (their status still moves, nothing is started).
BASE: dict[str, Any] = {"name": "api-x", "replicas": 0, "session": {"command": ["true"]}}


def _field(resp: httpx.Response) -> str:
    assert 400 <= resp.status_code < 500, resp.text
    return str(resp.json()["error"]["details"].get("field"))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Upper"}, "name"),
        ({"name": "-dash"}, "name"),
        ({"name": "a" * 64}, "name"),
        ({"name": "a.b"}, "name"),
        ({"name": 5}, "name"),
        ({"replicas": -1}, "replicas"),
        ({"replicas": 101}, "replicas"),
        ({"replicas": 2**63}, "replicas"),
        ({"replicas": "2"}, "replicas"),
        ({"session": {"command": []}}, "session.command"),
        ({"session": {"command": ["x"], "type": "inference"}}, "session.type"),
        ({"session": {"command": ["x"], "array": "0-3"}}, "session.array"),
        ({"session": {"command": ["x"], "retry_policy": {"max_retries": 1}}}, "session.retry_policy"),
        ({"session": {"command": ["x"], "retry_policies": ["p"]}}, "session.retry_policies"),
        ({"session": {"command": ["x"], "creation_id": "c"}}, "session.creation_id"),
        ({"session": {"command": ["x"], "resources": {"cpu": 0}}}, "resources.cpu"),
        ({"session": {"command": ["x"], "resource_group": "nowhere"}}, "resource_group"),
        ({"session": {"command": ["x"], "priority": 101}}, "session.priority"),
        ({"health": {"path": "health"}}, "health.path"),
        ({"health": {"path": "/a b"}}, "health.path"),
        ({"health": {"interval": 0}}, "health.interval"),
        ({"health": {"interval": "soon"}}, "health.interval"),
        ({"health": {"healthy_threshold": 0}}, "health.healthy_threshold"),
        ({"health": {"unhealthy_threshold": 0}}, "health.unhealthy_threshold"),
        ({"max_surge": 0, "max_unavailable": 0}, "max_surge"),
        ({"max_surge": "0%", "max_unavailable": "0%"}, "max_surge"),
        ({"max_surge": "150%"}, "max_surge"),
        ({"max_unavailable": "a lot"}, "max_unavailable"),
        ({"drain_timeout": -1}, "drain_timeout"),
        ({"public": "yes"}, "public"),
        ({"extra": 1}, "extra"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_writes_nothing(
    cluster: Cluster, body: dict[str, Any], field: str
) -> None:
    before = cluster.http.get("/api/v1/deployments").json()
    resp = cluster.http.post("/api/v1/deployments", json={**BASE, **body})
    assert _field(resp) == field, resp.text
    assert "Traceback" not in resp.text
    assert cluster.http.get("/api/v1/deployments").json() == before


def test_a_name_is_taken_once(cluster: Cluster) -> None:
    assert cluster.http.post("/api/v1/deployments", json={**BASE, "name": "api-once"}).status_code == 201
    again = cluster.http.post("/api/v1/deployments", json={**BASE, "name": "api-once"})
    assert again.status_code == 409 and _field(again) == "name"
    assert cluster.http.delete("/api/v1/deployments/api-once").status_code == 202


def test_a_change_is_refused_like_a_create(cluster: Cluster) -> None:
    made = cluster.http.post("/api/v1/deployments", json={**BASE, "name": "api-patch"}).json()
    for body, field in (
        ({"replicas": 500}, "replicas"),
        ({"health": {"path": "x"}}, "health.path"),
        ({"session": {"command": ["x"], "type": "batch"}}, "session.type"),
        ({"max_surge": 0, "max_unavailable": 0}, "max_surge"),
    ):
        resp = cluster.http.patch("/api/v1/deployments/api-patch", json=body)
        assert _field(resp) == field, resp.text
    after = cluster.http.get("/api/v1/deployments/api-patch").json()
    assert (after["revision"], after["replicas"], after["max_surge"]) == (1, 0, made["max_surge"])
    undo = cluster.http.post("/api/v1/deployments/api-patch/rollout/undo")
    assert undo.status_code == 409 and _field(undo) == "revision"  # nothing to go back to
    changed = cluster.http.patch("/api/v1/deployments/api-patch", json={"health": {"path": "/ready"}})
    assert changed.json()["revision"] == 2 and changed.json()["health"]["path"] == "/ready"
    same = cluster.http.patch("/api/v1/deployments/api-patch", json={"replicas": 0, "public": True})
    assert same.json()["revision"] == 2 and same.json()["public"] is True  # no new revision
    assert cluster.http.post("/api/v1/deployments/api-patch/rollout/undo").json()["revision"] == 3
    assert cluster.http.get("/api/v1/deployments/api-patch").json()["health"]["path"] == "/health"
    assert cluster.http.delete("/api/v1/deployments/api-patch").status_code == 202
    gone = cluster.http.patch("/api/v1/deployments/api-patch", json={"replicas": 1})
    assert gone.status_code == 409 and _field(gone) == "name"


def test_a_user_sees_and_changes_only_their_projects_deployments(cluster: Cluster) -> None:
    ann = client(cluster, make_user(cluster, "dep-ann", ["dep-red"]))
    bob = client(cluster, make_user(cluster, "dep-bob", ["dep-blue"]))
    try:
        made = ann.post("/api/v1/deployments", json={**BASE, "name": "api-red"})
        assert made.status_code == 201 and made.json()["project"] == "dep-red"
        other = bob.post(
            "/api/v1/deployments",
            json={**BASE, "name": "api-bad", "session": {"command": ["x"], "project": "dep-red"}},
        )
        assert other.status_code == 403 and _field(other) == "project"
        assert [d["name"] for d in bob.get("/api/v1/deployments").json()] == []
        for path in ("", "/routes", "/history"):
            resp = bob.get(f"/api/v1/deployments/api-red{path}")
            assert resp.status_code == 404 and _field(resp) == "name"
        assert bob.patch("/api/v1/deployments/api-red", json={"replicas": 3}).status_code == 404
        assert bob.post("/api/v1/deployments/api-red/rollout/undo").status_code == 404
        assert bob.delete("/api/v1/deployments/api-red").status_code == 404
        assert bob.get("/serve/api-red/").status_code == 404
        assert ann.get("/serve/api-red/").status_code == 503  # hers, with no replica yet
        events = bob.get("/api/v1/events", params={"type": "deployment.created"}).json()
        assert all(e["project"] != "dep-red" for e in events)
        assert ann.get("/api/v1/deployments/api-red").json()["replicas"] == 0
    finally:
        ann.delete("/api/v1/deployments/api-red")
        ann.close()
        bob.close()


def test_replica_spec_shown_is_the_one_run(cluster: Cluster) -> None:
    spec = replica_session({"A": "1"}, cpu=0.5)
    made = cluster.http.post("/api/v1/deployments", json={**BASE, "name": "api-shown", "session": spec})
    shown = made.json()["session"]
    assert (shown["type"], shown["env"], shown["resources"]["cpu"]) == ("inference", {"A": "1"}, "0.5")
    assert cluster.http.delete("/api/v1/deployments/api-shown").status_code == 202


def test_bad_serve_paths_are_4xx_and_harm_nothing(cluster: Cluster) -> None:
    assert cluster.http.post("/api/v1/deployments", json={**BASE, "name": "api-paths"}).status_code == 201
    for path, code in (
        ("/serve", 404),
        ("/serve/", 404),
        ("/serve/" + "a" * 5000 + "/", 404),
        ("/serve/%ED%A0%80/", 404),  # a lone surrogate, percent-encoded
        ("/serve/Caps/", 404),
        ("/serve/api-paths/%00", 422),
        ("/serve/api-paths/x?y=%00", 503),  # the query is the replica's business (none in traffic)
    ):
        resp = cluster.http.get(path)
        assert resp.status_code == code, (path, resp.text)
        assert "Traceback" not in resp.text and resp.json()["error"]["code"]
    assert httpx.get(f"{cluster.url}/serve/" + "b" * 300).status_code == 401
    assert cluster.http.get("/api/v1/deployments/api-paths").status_code == 200
    assert cluster.http.delete("/api/v1/deployments/api-paths").status_code == 202
