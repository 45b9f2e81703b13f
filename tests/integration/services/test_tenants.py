"""Idempotency is per caller: another project's user never reaches a session through creation_id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable

import httpx

from tests.support.cluster import Cluster
from tests.support.tenants import add_user_in_own_project, client, insert_session, make_user


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


def test_a_user_never_reaches_another_projects_sessions(cluster: Cluster) -> None:
    tag = uuid.uuid4().hex[:6]
    alice = client(cluster, make_user(cluster, f"alice-{tag}", [f"a-{tag}"]))
    bob = client(cluster, make_user(cluster, f"bob-{tag}", [f"b-{tag}"]))
    hers = alice.post(
        "/api/v1/sessions",
        json={"command": ["sh", "-c", "echo SECRET-OUTPUT; exit 3"], "project": f"a-{tag}"},
    )
    assert hers.status_code == 201, hers.text
    sid = hers.json()["id"]
    cluster.wait(sid)
    # Bob is not in a-*: submitting there is refused; every read of hers is a 404 and lists stay his.
    assert bob.post("/api/v1/sessions", json={"command": ["true"], "project": f"a-{tag}"}).status_code == 403
    for path in ("", "/kernels", "/logs", "/history", "/errors", "/attempts"):
        resp = bob.get(f"/api/v1/sessions/{sid}{path}")
        assert resp.status_code == 404, (path, resp.status_code)
        assert "SECRET-OUTPUT" not in resp.text
    assert bob.post(f"/api/v1/sessions/{sid}/cancel").status_code == 404
    assert bob.post(f"/api/v1/sessions/{sid}/retry").status_code == 404
    assert bob.get("/api/v1/sessions", params={"limit": 1000}).json() == []
    assert sum(bob.get("/api/v1/sessions/counts").json().values()) == 0
    events = bob.get("/api/v1/events", params={"after": 0, "limit": 1000}).json()
    assert all(e["session_id"] != sid for e in events)
    # She sees all of it.
    assert alice.get(f"/api/v1/sessions/{sid}/errors").status_code == 200
    assert any(
        e["session_id"] == sid for e in alice.get("/api/v1/events", params={"after": 0, "limit": 1000}).json()
    )
    # Admin-only routes refuse a user's key; /metrics never carries a session's id, name or command.
    for method, path in (("GET", "/api/v1/users"), ("POST", "/api/v1/users"), ("GET", "/metrics")):
        assert bob.request(method, path, json={"name": "x"}).status_code == 403, path
    metrics = cluster.http.get("/metrics").text
    assert sid not in metrics and hers.json()["name"] not in metrics and "SECRET-OUTPUT" not in metrics
    # /me says who the caller is.
    me = bob.get("/api/v1/me").json()
    assert (me["name"], me["role"], me["projects"]) == (f"bob-{tag}", "user", [f"b-{tag}"])
    alice.close()
    bob.close()


def test_a_revoked_key_is_refused_on_its_next_request(cluster: Cluster) -> None:
    name = "carol-" + uuid.uuid4().hex[:6]
    first = make_user(cluster, name, ["default"])
    second = cluster.corral_json("user", "key", "create", name)
    keys = cluster.corral_json("user", "key", "list", name)
    assert len(keys) == 2 and all(first not in str(k) and second["key"] not in str(k) for k in keys)
    with client(cluster, first) as carol, client(cluster, second["key"]) as spare:
        assert carol.get("/api/v1/sessions").status_code == 200  # looked up once: no cache to outlive
        first_id = next(k["id"] for k in keys if k["id"] != second["id"])
        assert cluster.corral("user", "key", "revoke", name, first_id).returncode == 0
        assert carol.get("/api/v1/sessions").status_code == 401
        assert spare.get("/api/v1/sessions").status_code == 200
    # Memberships change at once too; unknown projects and roles are refused naming the field.
    changed = cluster.http.patch(f"/api/v1/users/{name}", json={"projects": []})
    assert changed.status_code == 200 and changed.json()["projects"] == []
    with client(cluster, second["key"]) as spare:
        assert spare.post("/api/v1/sessions", json={"command": ["true"]}).status_code == 403
    bad = cluster.http.patch(f"/api/v1/users/{name}", json={"projects": ["default", "no-such-project"]})
    assert bad.status_code == 422 and bad.json()["error"]["details"]["field"] == "projects.1"
    assert cluster.http.patch(f"/api/v1/users/{name}", json={"role": "root"}).status_code == 422
    assert cluster.http.post("/api/v1/users", json={"name": name}).status_code == 409
    assert cluster.http.get("/api/v1/users/nobody-here").status_code == 404


def test_priority_rules_per_project_and_per_user(cluster: Cluster) -> None:
    tag = uuid.uuid4().hex[:6]
    project = f"prio-{tag}"
    dave = client(cluster, make_user(cluster, f"dave-{tag}", [project]))
    rules = '{"default": 5, "min": 1, "max": 20}'
    assert cluster.corral("project", "update", project, "--priority-rules", rules).returncode == 0

    def submit(**extra: object) -> httpx.Response:
        return dave.post("/api/v1/sessions", json={"command": ["true"], "project": project, **extra})

    assert submit().json()["priority"] == 5  # the project's default
    assert submit(priority=20).json()["priority"] == 20
    out_of_range = submit(priority=21)
    assert out_of_range.status_code == 422 and out_of_range.json()["error"]["details"]["field"] == "priority"
    # A user's own rules override the project's: Dave may not choose at all, and gets 3.
    fixed = cluster.http.patch(
        f"/api/v1/users/dave-{tag}", json={"priority_rules": {"may_change": False, "default": 3}}
    )
    assert fixed.status_code == 200, fixed.text
    assert submit().json()["priority"] == 3 and submit(priority=3).status_code == 201
    refused = submit(priority=10)
    assert refused.status_code == 403 and refused.json()["error"]["details"]["field"] == "priority"
    # What a UI needs to offer a priority field.
    me = dave.get("/api/v1/me").json()
    assert me["priority"] == {project: {"default": 3, "may_change": False, "min": 1, "max": 20}}
    # corral run honours them (the CLI is the user's).
    env = {"CORRAL_API_KEY": str(dave.headers["Authorization"]).split()[1]}
    run = subprocess.run(
        [sys.executable, "-m", "corral", "run", "--project", project, "--priority", "50", "--", "true"],
        env={**os.environ, "CORRAL_URL": cluster.url, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0 and "priority" in run.stderr
    # Admins are not bound; a range upside down is refused naming the field.
    assert (
        cluster.http.post(
            "/api/v1/sessions", json={"command": ["true"], "project": project, "priority": 90}
        ).json()["priority"]
        == 90
    )
    upside = cluster.http.patch(f"/api/v1/projects/{project}", json={"priority_rules": {"min": 30}})
    assert upside.status_code == 422 and upside.json()["error"]["details"]["field"] == "priority_rules.min"
    dave.close()


def test_the_last_key_of_the_last_admin_cannot_be_revoked(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster()
    me = c.http.get("/api/v1/me").json()["name"]
    [only] = c.corral_json("user", "key", "list", me)
    refused = c.http.delete(f"/api/v1/users/{me}/keys/{only['id']}")
    assert refused.status_code == 409, refused.text
    assert "corral up --rotate-key" in refused.json()["error"]["message"]
    assert refused.json()["error"]["details"]["field"] == "key_id"
    assert c.http.get("/api/v1/sessions").status_code == 200  # still the admin's key
    cli = c.corral("user", "key", "revoke", me, only["id"])
    assert cli.returncode != 0 and "--rotate-key" in cli.stderr
    # With a second admin key, the first one may go.
    spare = c.corral_json("user", "key", "create", me)
    assert c.http.delete(f"/api/v1/users/{me}/keys/{only['id']}").status_code == 204
    with client(c, spare["key"]) as admin:
        assert admin.get("/api/v1/users").status_code == 200
        again = admin.delete(f"/api/v1/users/{me}/keys/{spare['id']}")
        assert again.status_code == 409, again.text


def test_a_session_is_found_by_the_start_of_its_id_among_those_the_caller_sees(cluster: Cluster) -> None:
    s = cluster.submit(command=["true"])
    short = s["id"][:8]
    assert cluster.http.get(f"/api/v1/sessions/{short}").json()["id"] == s["id"]
    assert cluster.http.get(f"/api/v1/sessions/{short.upper()}").json()["id"] == s["id"]
    info = cluster.corral("session", "info", short)
    assert info.returncode == 0 and s["id"] in info.stdout, info.stderr
    assert cluster.corral("session", "history", short).returncode == 0
    assert cluster.corral("session", "logs", short).returncode == 0
    assert cluster.http.get(f"/api/v1/sessions/{short[:7]}").status_code == 404  # under 8 digits
    events = cluster.http.get("/api/v1/events", params={"session": short}).json()
    assert events and {e["session_id"] for e in events} == {s["id"]}
    unknown = cluster.http.get("/api/v1/events", params={"session": "0000abcd"})
    assert unknown.status_code == 404 and unknown.json()["error"]["details"]["field"] == "session"

    tag = uuid.uuid4().hex[:6]
    mine, theirs = f"short-{tag}", f"other-{tag}"
    key = add_user_in_own_project(cluster.database_url, f"dora-{tag}", mine)
    base = f"c0ffee{tag[:2]}-0000-4000-8000-0000000000"
    a, b, c = base + "a1", base + "b2", base + "c3"
    insert_session(cluster.database_url, a, mine, f"dora-{tag}")
    insert_session(cluster.database_url, b, mine, f"dora-{tag}")
    add_user_in_own_project(cluster.database_url, f"eve-{tag}", theirs)
    insert_session(cluster.database_url, c, theirs, f"eve-{tag}")
    with client(cluster, key) as dora:
        several = dora.get(f"/api/v1/sessions/{base[:8]}")
        assert several.status_code == 409, several.text
        assert several.json()["error"]["details"]["matches"] == [a, b]
        assert c not in several.text  # never a hint of what the caller may not see
        assert dora.get(f"/api/v1/sessions/{base}a").json()["id"] == a
        assert dora.post(f"/api/v1/sessions/{base}b/cancel").json()["id"] == b
        assert dora.get(f"/api/v1/sessions/{base}c").status_code == 404  # only theirs starts so
        assert dora.get(f"/api/v1/sessions/{c}").status_code == 404
    admin = cluster.http.get(f"/api/v1/sessions/{base[:8]}")
    assert admin.status_code == 409 and admin.json()["error"]["details"]["matches"] == [a, b, c]
    cli = cluster.corral("session", "info", base[:8])
    assert cli.returncode != 0 and a in cli.stderr and "give more of the id" in cli.stderr


def test_a_session_naming_no_project_goes_to_the_callers_own(cluster: Cluster) -> None:
    tag = uuid.uuid4().hex[:6]
    solo = make_user(cluster, f"solo-{tag}", [f"only-{tag}"])
    duo_name = f"duo-{tag}"
    duo = make_user(cluster, duo_name, [f"one-{tag}", f"two-{tag}"])
    with client(cluster, solo) as s_client, client(cluster, duo) as d_client:
        made = s_client.post("/api/v1/sessions", json={"command": ["true"]})
        assert made.status_code == 201 and made.json()["project"] == f"only-{tag}", made.text
        refused = d_client.post("/api/v1/sessions", json={"command": ["true"]})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["details"]["field"] == "project"
        assert f"one-{tag}" in error["message"] and f"two-{tag}" in error["message"]
        # Not one of theirs: refused, naming the field; one of theirs: used from then on.
        bad = cluster.http.patch(f"/api/v1/users/{duo_name}", json={"default_project": "default"})
        assert bad.status_code == 422 and bad.json()["error"]["details"]["field"] == "default_project"
        set_ = cluster.corral("user", "update", duo_name, "--default-project", f"two-{tag}", "-o", "json")
        assert set_.returncode == 0 and json.loads(set_.stdout)["default_project"] == f"two-{tag}", (
            set_.stderr
        )
        made = d_client.post("/api/v1/sessions", json={"command": ["true"]})
        assert made.status_code == 201 and made.json()["project"] == f"two-{tag}", made.text
        named = d_client.post("/api/v1/sessions", json={"command": ["true"], "project": f"one-{tag}"})
        assert named.json()["project"] == f"one-{tag}"
        cleared = cluster.http.patch(f"/api/v1/users/{duo_name}", json={"default_project": None})
        assert cleared.json()["default_project"] is None
        assert d_client.post("/api/v1/sessions", json={"command": ["true"]}).status_code == 422
