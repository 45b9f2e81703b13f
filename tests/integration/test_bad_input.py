"""Bad input gets the DESIGN §8 status code, names the field, and writes no row."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.cluster import Cluster


def count_sessions(cluster: Cluster) -> int:
    return len(cluster.http.get("/api/v1/sessions", params={"limit": 1000}).json())


BAD_BODIES: list[tuple[str, dict[str, Any], int, str]] = [
    ("negative cpu", {"command": ["true"], "resources": {"cpu": -1}}, 422, "resources.cpu"),
    ("negative mem", {"command": ["true"], "resources": {"mem": "-5M"}}, 422, "resources.mem"),
    ("unreadable mem", {"command": ["true"], "resources": {"mem": "lots"}}, 422, "resources.mem"),
    ("undeclared slot", {"command": ["true"], "resources": {"fpga": 1}}, 422, "resources.fpga"),
    ("unknown group", {"command": ["true"], "resource_group": "nope"}, 422, "resource_group"),
    ("cluster_size 0", {"command": ["true"], "cluster_size": 0}, 422, "cluster_size"),
    ("empty command", {"command": []}, 422, "command"),
    ("no command", {"resources": {"cpu": 1}}, 422, "command"),
    ("blank command", {"command": [""]}, 422, "command"),
    ("priority 101", {"command": ["true"], "priority": 101}, 422, "priority"),
    ("unknown field", {"command": ["true"], "colour": "red"}, 422, "colour"),
    ("unknown project", {"command": ["true"], "project": "nope"}, 422, "project"),
]


@pytest.mark.parametrize(("what", "body", "status", "field"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_bad_session_request(
    cluster: Cluster, what: str, body: dict[str, Any], status: int, field: str
) -> None:
    before = count_sessions(cluster)
    resp = cluster.http.post("/api/v1/sessions", json=body)
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["details"]["field"] == field, error
    assert error["code"] and error["message"]
    assert count_sessions(cluster) == before


def test_malformed_json_is_400(cluster: Cluster) -> None:
    before = count_sessions(cluster)
    resp = cluster.http.post(
        "/api/v1/sessions", content=b'{"command": ["true"', headers={"content-type": "application/json"}
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "malformed_json"
    assert count_sessions(cluster) == before


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}])
def test_missing_or_wrong_key_is_401(cluster: Cluster, headers: dict[str, str]) -> None:
    before = count_sessions(cluster)
    resp = httpx.post(cluster.url + "/api/v1/sessions", json={"command": ["true"]}, headers=headers)
    assert resp.status_code == 401
    assert resp.json()["error"]["details"]["field"] == "authorization"
    assert count_sessions(cluster) == before


def test_cancel_of_a_finished_session_is_409(cluster: Cluster) -> None:
    s = cluster.submit(command=["true"])
    cluster.wait(s["id"])
    resp = cluster.http.post(f"/api/v1/sessions/{s['id']}/cancel")
    assert resp.status_code == 409
    assert resp.json()["error"]["details"]["field"] == "status"
    assert cluster.session(s["id"])["status"] == "TERMINATED"


def test_unknown_session_is_404(cluster: Cluster) -> None:
    resp = cluster.http.get("/api/v1/sessions/does-not-exist")
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"


def test_creation_id_makes_create_idempotent(cluster: Cluster) -> None:
    first = cluster.http.post("/api/v1/sessions", json={"command": ["true"], "creation_id": "once-only"})
    again = cluster.http.post("/api/v1/sessions", json={"command": ["true"], "creation_id": "once-only"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]


def test_cli_bad_input_exits_nonzero_with_the_field(cluster: Cluster) -> None:
    done = cluster.corral("run", "--cpu", "-2", "--", "true")
    assert done.returncode != 0
    assert "resources.cpu" in done.stderr and "Traceback" not in done.stderr
    done = cluster.corral("run")
    assert done.returncode != 0 and "no command" in done.stderr
