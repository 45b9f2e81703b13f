"""Bad input gets the DESIGN §8 status code, names the field, and writes no row."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
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
    (
        "retry_policy banana",
        {"command": ["true"], "retry_policy": {"max_retries": "banana"}},
        422,
        "retry_policy.max_retries",
    ),
    (
        "retry_policy unknown field",
        {"command": ["true"], "retry_policy": {"retries": 2}},
        422,
        "retry_policy.retries",
    ),
    (
        "retry delay over 24h",
        {"command": ["true"], "retry_policy": {"max_retry_delay": "25h"}},
        422,
        "retry_policy.max_retry_delay",
    ),
    (
        "never-retriable cause",
        {"command": ["true"], "retry_policy": {"eligible_causes": ["user_cancelled"]}},
        422,
        "retry_policy.eligible_causes",
    ),
    ("env name with =", {"command": ["true"], "env": {"A=B": "x"}}, 422, "env.A=B"),
    ("env name reserved", {"command": ["true"], "env": {"CORRAL_SESSION_ID": "x"}}, 422, "env"),
    ("env value not a string", {"command": ["true"], "env": {"A": 1}}, 422, "env.A"),
    ("NUL in command", {"command": ["echo", "a\u0000b"]}, 422, "command.1"),
    ("NUL in env", {"command": ["true"], "env": {"A": "x\u0000"}}, 422, "env.A"),
    ("timeout 2**63", {"command": ["true"], "timeout": 2**63}, 422, "timeout"),
    ("cpu true", {"command": ["true"], "resources": {"cpu": True}}, 422, "resources.cpu"),
    ("cpu 1e308", {"command": ["true"], "resources": {"cpu": 1e308}}, 422, "resources.cpu"),
    ("gpu 10**6", {"command": ["true"], "resources": {"gpu": 10**6}}, 422, "resources.gpu"),
    ("mem 10**30", {"command": ["true"], "resources": {"mem": 10**30}}, 422, "resources.mem"),
    ("priority a string", {"command": ["true"], "priority": "5"}, 422, "priority"),
    ("command not a list", {"command": "true"}, 422, "command"),
    ("command too long", {"command": ["echo", "x" * 200_000]}, 422, "command"),
    ("no cpu at all", {"command": ["true"], "resources": {"cpu": 0}}, 422, "resources.cpu"),
    (
        "duration past float",
        {"command": ["true"], "retry_policy": {"retry_delay": 10**400}},
        422,
        "retry_policy.retry_delay",
    ),
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


RAW_BODIES: list[tuple[str, bytes, str]] = [
    ("lone surrogate in command", b'{"command": ["echo", "\\ud800"]}', "command.1"),
    ("lone surrogate in env name", b'{"command": ["true"], "env": {"\\udfff": "x"}}', "env"),
    # A surrogate in a key makes the whole body unreadable as text: refused as the body.
    ("lone surrogate in unknown field", b'{"command": ["true"], "\\ud800": 1}', "body"),
    ("cpu 1e400", b'{"command": ["true"], "resources": {"cpu": 1e400}}', "resources.cpu"),
    ("cpu string 1e400", b'{"command": ["true"], "resources": {"cpu": "1e400"}}', "resources.cpu"),
    ("nested too deep", b'{"command": ["true"], "env": ' + b"[" * 100_000 + b"}", "body"),
    ("not UTF-8 at all", b'{"command": ["\xff\xfe"]}', "body"),
]


@pytest.mark.parametrize(("what", "raw", "field"), RAW_BODIES, ids=[b[0] for b in RAW_BODIES])
def test_bad_encodings_and_numbers(cluster: Cluster, what: str, raw: bytes, field: str) -> None:
    before = count_sessions(cluster)
    resp = cluster.http.post("/api/v1/sessions", content=raw, headers={"content-type": "application/json"})
    assert resp.status_code in (400, 422), resp.text
    assert resp.json()["error"]["details"]["field"].startswith(field), resp.text
    assert count_sessions(cluster) == before


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/sessions?offset=9223372036854775808",
        "/api/v1/sessions?limit=99999999999999999999999",
        "/api/v1/sessions/x/logs?after=9223372036854775808",
    ],
)
def test_integer_overflow_in_queries_is_422(cluster: Cluster, path: str) -> None:
    resp = cluster.http.get(path)
    assert resp.status_code in (404, 422), resp.text
    assert "error" in resp.json()


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/sessions?array=%00", "array"),
        ("/api/v1/sessions?status=RUNNING&array=a%00b", "array"),
        ("/api/v1/sessions/abc%00", "path"),
        ("/api/v1/arrays/%00/cancel", "path"),
    ],
)
def test_a_nul_byte_in_the_url_is_422_naming_where(cluster: Cluster, path: str, field: str) -> None:
    """PostgreSQL cannot store NUL: refused at the door, for every route, never a 500."""
    resp = cluster.http.post(path) if path.endswith("/cancel") else cluster.http.get(path)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["details"]["field"] == field
    assert cluster.http.get("/api/v1/sessions").status_code == 200


def test_a_huge_body_is_refused_before_it_is_read(cluster: Cluster) -> None:
    before = count_sessions(cluster)
    body = b'{"command": ["echo", "' + b"x" * (50 * 1024 * 1024) + b'"]}'
    resp = cluster.http.post("/api/v1/sessions", content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 413, resp.text[:300]
    assert resp.json()["error"]["details"]["field"] == "body"
    assert count_sessions(cluster) == before


def test_after_every_bad_request_the_cluster_serves_everyone(cluster: Cluster) -> None:
    for _, body, _, _ in BAD_BODIES:
        cluster.http.post("/api/v1/sessions", json=body)
    for _, raw, _ in RAW_BODIES:
        cluster.http.post("/api/v1/sessions", content=raw, headers={"content-type": "application/json"})
    assert cluster.http.get("/api/v1/sessions").status_code == 200
    done = [cluster.submit(command=["sh", "-c", "echo fine"]) for _ in range(4)]  # both agents serve
    finals = [cluster.wait(s["id"]) for s in done]
    assert {(f["status"], f["result"]) for f in finals} == {("TERMINATED", "success")}


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


@pytest.mark.parametrize(
    "body",
    [
        {"command": 5},
        {"command": ["true"], "array": "1-x"},
        {"command": ["true"], "env": {"A": 1}},
        # Refused past the schema, by the spec's own checks and by the cluster's:
        {"command": ["true"], "resources": {"cpu": 0}},
        {"command": ["true"], "resources": {"mem": "lots"}},
        {"command": ["true"], "project": "nowhere"},
    ],
)
def test_an_unknown_key_is_401_before_its_body_is_judged(cluster: Cluster, body: dict[str, Any]) -> None:
    """POST /sessions looks its caller up where it writes; a body it refuses is refused for an
    unknown key first, as on every other route: nobody unknown learns what the API accepts.  (A
    body that is not JSON at all is a 400 for anyone, on every route: FastAPI parses it first.)"""
    before = count_sessions(cluster)
    for key, status in (("wrong", 401), (cluster.key, None)):
        resp = httpx.post(
            cluster.url + "/api/v1/sessions",
            json=body,
            headers={"Authorization": f"Bearer {key}"},
        )
        if status is None:  # the same body from a known caller: refused for itself
            assert resp.status_code == 422, resp.text
        else:
            assert resp.status_code == status, resp.text
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


@pytest.mark.parametrize(
    ("command", "name", "value", "says"),
    [
        ("manager", "CORRAL_DB_POOL_SIZE", "0", "greater than or equal to 1"),
        ("manager", "CORRAL_LONG_POLL", "soon", "valid number"),
        ("manager", "CORRAL_SWEEP_INTERVAL", "60", "less than or equal to 5"),  # a scheduler setting
        ("up", "CORRAL_SWEEP_INTERVAL", "60", "less than or equal to 5"),
        ("agent", "CORRAL_AGENT_SLOTS", "{gpu: 1", "not valid JSON"),
        ("up", "CORRAL_AGENT_SLOTS", "{gpu: 1", "not valid JSON"),  # its agents' settings
        ("agent", "CORRAL_AGENT_SLOTS", '{"gpu": "many"}', "valid number"),  # named as set, not by its key
    ],
)
def test_a_bad_setting_stops_the_command_naming_it(
    tmp_path: Path, command: str, name: str, value: str, says: str
) -> None:
    """Before anything starts or is made: exit 2 and a line naming the variable as it is set, no
    traceback, not the value."""
    env = {**os.environ, name: value, "CORRAL_AGENT_TOKEN": "t", "CORRAL_HOME": str(tmp_path / "home")}
    args = {"manager": ["--port", "1"], "up": ["--port", "1"], "agent": ["--manager", "http://127.0.0.1:1"]}
    done = subprocess.run(
        [sys.executable, "-m", "corral", command, *args[command]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert f"error: {name}: " in done.stderr and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and value not in done.stderr, done.stderr
    assert not (tmp_path / "home").exists()  # nothing made
