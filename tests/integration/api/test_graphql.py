"""GraphQL at /graphql on a real manager over HTTP, on SQLite and PostgreSQL: the same sessions,
chains, root causes and kernels as REST, the same tenancy and key, and queries past its limits
refused with a GraphQL error (never a 500, never a long wait)."""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import datetime
from typing import Any

import httpx

from tests.support.cluster import TERMINAL, Cluster, poll
from tests.support.tenants import client, make_user

KERNEL = """id rank role agent status exitCode signal oomKilled killedByCorral conditions
  terminationMessage exitedAt detail outputComplete outputDropped gpuDevices masterPort"""
ROOT_CAUSE = """worker rank kernelId agent type message timestamp resolution recoverable strategy
  source exitCode signal"""
SESSION = f"""id name type status result cause exitCode priority resourceGroup project owner
  clusterSize resources command createdAt startedAt terminatedAt parentSessionId rootSessionId
  attempt maxAttempts retryCount maxRetries retryPolicy retryPolicies retryCause retryState
  retryReason nextAttemptId retryAfter retryChain resumeCount arrayId arrayIndex manualRetry
  creationId terminationReason errorStrategy
  rootCause {{ {ROOT_CAUSE} }} kernels {{ {KERNEL} }}"""

GANG = '[ "$CORRAL_CLUSTER_RANK" = 1 ] && exit 3; sleep 60'
"""Rank 1 fails at once; rank 0 is stopped by Corral (a side effect): rank 1 is the root cause."""


def gql(http: httpx.Client, query: str, **variables: Any) -> httpx.Response:
    # Encoded as ASCII JSON: a lone surrogate travels as its escape, as a client would send it.
    body = json.dumps({"query": query, "variables": variables})
    return http.post("/graphql", content=body, headers={"Content-Type": "application/json"})


def data(http: httpx.Client, query: str, **variables: Any) -> dict[str, Any]:
    resp = gql(http, query, **variables)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert "errors" not in body, body
    return dict(body["data"])


def refused(http: httpx.Client, query: str, **variables: Any) -> dict[str, Any]:
    """The one error of a query that is answered with no data at all."""
    resp = gql(http, query, **variables)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["data"] is None and len(body["errors"]) == 1, body
    return dict(body["errors"][0])


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _times(value: Any) -> Any:
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)", value):
        return datetime.fromisoformat(value)
    return value


def as_rest(value: Any) -> Any:
    """A GraphQL answer in REST's terms: snake_case names, times as instants."""
    if isinstance(value, dict):
        return {snake(k): as_rest(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_rest(v) for v in value]
    return _times(value)


def same_as_rest(shown: dict[str, Any], rest: dict[str, Any]) -> None:
    """Every field GraphQL shows has REST's value (JSON fields keep their own names)."""
    links = ("parentSession", "attempts", "history")  # REST's separate routes, compared apart
    json_fields = ("resources", "retryPolicy", "kernels")
    mine = as_rest({k: v for k, v in shown.items() if k not in links + json_fields})
    theirs = as_rest(rest)
    for key, value in mine.items():
        assert value == theirs[key], (key, value, theirs[key])
    assert (shown.get("resources"), shown.get("retryPolicy")) == (rest["resources"], rest["retry_policy"])
    for k, r in zip(shown["kernels"], rest["kernels"], strict=True):
        assert {**as_rest(k), "detail": k["detail"]} == {**as_rest(r), "detail": r["detail"]}


def test_a_retried_gang_shows_the_chain_root_cause_and_kernels_rest_shows(cluster: Cluster) -> None:
    s = cluster.submit(
        command=["sh", "-c", GANG],
        cluster_size=2,
        resources={"cpu": 0.5},
        retry_policy={"max_retries": 1, "retry_delay": 0},
    )

    def settled() -> list[dict[str, Any]] | None:
        chain = list(cluster.http.get(f"/api/v1/sessions/{s['id']}/attempts").json())
        done = len(chain) == 2 and all(a["status"] in TERMINAL and a["retry_reason"] for a in chain)
        return chain if done else None

    first, second = poll(settled, 120, "two ended attempts")
    assert [first["retry_chain"], first["root_cause"]["rank"]] == [[first["id"], second["id"]], 1]
    query = f"""query ($id: ID!) {{ session(id: $id) {{ {SESSION}
      parentSession {{ id }} attempts {{ {SESSION} }} history {{ handler message }} }} }}"""
    shown = data(cluster.http, query, id=second["id"])["session"]
    same_as_rest(shown, cluster.session(second["id"]))
    assert shown["status"] == "ERROR" and shown["retryChain"] == [first["id"], second["id"]]
    assert shown["parentSession"] == {"id": first["id"]}
    assert shown["rootCause"]["rank"] == 1 and shown["rootCause"]["exitCode"] == 3
    for attempt, rest in zip(shown["attempts"], (first, second), strict=True):
        same_as_rest(attempt, rest)
    rest_history = cluster.history(second["id"])
    assert shown["history"] == [{"handler": h["handler"], "message": h["message"]} for h in rest_history]
    # The same through the list, and a root's parent is null.
    listed = data(
        cluster.http, f"{{ sessions(first: 100) {{ nodes {{ {SESSION} parentSession {{ id }} }} }} }}"
    )
    by_id = {n["id"]: n for n in listed["sessions"]["nodes"]}
    same_as_rest(by_id[first["id"]], first)
    assert by_id[first["id"]]["parentSession"] is None


def test_a_user_sees_only_their_projects_data(cluster: Cluster) -> None:
    tag = uuid.uuid4().hex[:6]
    alice = client(cluster, make_user(cluster, f"alice-{tag}", [f"a-{tag}"]))
    bob = client(cluster, make_user(cluster, f"bob-{tag}", [f"b-{tag}"]))
    hers = alice.post("/api/v1/sessions", json={"command": ["sh", "-c", "exit 3"], "project": f"a-{tag}"})
    his = bob.post("/api/v1/sessions", json={"command": ["true"], "project": f"b-{tag}"})
    assert hers.status_code == his.status_code == 201, (hers.text, his.text)
    sid, his_id = hers.json()["id"], his.json()["id"]
    cluster.wait(sid)
    one = "query ($id: ID!) { session(id: $id) { id attempts { id } } }"
    listed = "{ sessions { nodes { id project } } }"
    # Bob: her session is not there, by its id, by the start of it, or in his list.
    assert data(bob, one, id=sid) == {"session": None}
    assert data(bob, one, id=sid[:8]) == {"session": None}
    assert data(bob, listed)["sessions"]["nodes"] == [{"id": his_id, "project": f"b-{tag}"}]
    assert data(bob, "{ me { name role projects } }")["me"] == {
        "name": f"bob-{tag}",
        "role": "user",
        "projects": [f"b-{tag}"],
    }
    error = refused(bob, "{ agents { id } }")
    assert error["extensions"]["code"] == "forbidden"
    # Alice: hers, and only hers.
    assert data(alice, one, id=sid)["session"] == {"id": sid, "attempts": [{"id": sid}]}
    assert data(alice, listed)["sessions"]["nodes"] == [{"id": sid, "project": f"a-{tag}"}]
    assert data(alice, one, id=his_id) == {"session": None}
    # The admin sees both, and the agents.
    assert {n["id"] for n in data(cluster.http, listed)["sessions"]["nodes"]} >= {sid, his_id}
    agents = {a["id"]: a for a in data(cluster.http, "{ agents { id status } }")["agents"]}
    assert agents["agent-a"]["status"] == "ALIVE"
    alice.close()
    bob.close()


def test_no_key_or_an_unknown_key_is_401_as_in_rest(cluster: Cluster) -> None:
    for headers in ({}, {"Authorization": "Bearer crl_nobody_has_this_key"}, {"Authorization": "Basic x"}):
        for resp in (
            httpx.post(cluster.url + "/graphql", json={"query": "{ me { name } }"}, headers=headers),
            httpx.get(cluster.url + "/graphql", params={"query": "{ me { name } }"}, headers=headers),
        ):
            assert resp.status_code == 401, resp.text
            assert resp.json()["error"]["code"] == "unauthorized"
    assert data(cluster.http, "{ me { name role } }")["me"] == {"name": "admin", "role": "admin"}


def deep(levels: int) -> str:
    """A query `levels` deep: a session, then its parent's parent's... id."""
    inner = "id"
    for _ in range(levels - 1):
        inner = f"parentSession {{ {inner} }}"
    return f'{{ session(id: "no-such-session") {{ {inner} }} }}'


def test_a_query_past_the_depth_limit_is_refused_at_once(cluster: Cluster) -> None:
    assert data(cluster.http, deep(10)) == {"session": None}
    for levels in (11, 20):
        error = refused(cluster.http, deep(levels))
        assert error["extensions"]["code"] == "query_too_deep", error
        assert f"{levels} levels deep; at most 10" in error["message"]
    # Fragments that each spread the next twice: 2**150 paths, measured once per fragment.
    chain = "".join(f"fragment F{i} on Session {{ ...F{i + 1} ...F{i + 1} }}\n" for i in range(150))
    started = time.monotonic()
    error = refused(
        cluster.http, '{ session(id: "x") { ...F0 } }\n' + chain + "fragment F150 on Session { id }"
    )
    assert error["extensions"]["code"] == "query_too_costly", error
    assert time.monotonic() - started < 10


def test_a_query_past_the_cost_limit_is_refused(cluster: Cluster) -> None:
    costly = "query ($n: Int!) { sessions(first: $n) { nodes { attempts { kernels { id rank role } } } } }"
    assert refused(cluster.http, costly, n=1000)["extensions"]["code"] == "query_too_costly"
    assert "sessions" in data(cluster.http, costly, n=10)
    huge = "{" + " ".join(f"a{i}: me {{ name }}" for i in range(1000)) + "}"
    assert "2000 tokens" in refused(cluster.http, huge)["message"]


def test_pages_follow_on_by_cursor_and_filters_hold(cluster: Cluster) -> None:
    tag = uuid.uuid4().hex[:6]
    key = make_user(cluster, f"pager-{tag}", [f"p-{tag}"])
    with client(cluster, key) as pager:
        made = [
            pager.post("/api/v1/sessions", json={"command": ["true"], "project": f"p-{tag}"})
            for _ in range(3)
        ]
        ids = [r.json()["id"] for r in made]
        for sid in ids:
            cluster.wait(sid)
        query = """query ($after: String, $f: SessionFilter) { sessions(first: 2, after: $after, filter: $f) {
          edges { cursor node { id } } pageInfo { hasNextPage hasPreviousPage endCursor } } }"""
        one = data(pager, query)["sessions"]
        assert one["pageInfo"] | {"endCursor": None} == {
            "hasNextPage": True,
            "hasPreviousPage": False,
            "endCursor": None,
        }
        two = data(pager, query, after=one["pageInfo"]["endCursor"])["sessions"]
        assert (two["pageInfo"]["hasNextPage"], two["pageInfo"]["hasPreviousPage"]) == (False, True)
        rest = [s["id"] for s in pager.get("/api/v1/sessions").json()]
        assert [e["node"]["id"] for e in one["edges"] + two["edges"]] == rest == ids[::-1]
        running = data(pager, query, f={"status": ["RUNNING", "PENDING"]})["sessions"]["edges"]
        assert running == []
        done = data(pager, query, f={"status": ["TERMINATED"]})["sessions"]["edges"]
        assert len(done) == 2
        for bad in ("not-a-cursor", "", "\u00e9"):
            assert refused(pager, query, after=bad)["extensions"]["details"]["field"] == "after"
        error = refused(pager, query, f={"status": ["RETRYING"]})
        assert error["extensions"]["code"] == "invalid_query", error


ONE = "query ($id: ID!) { session(id: $id) { id } }"
PAGE = """query ($n: Int!, $f: SessionFilter, $a: String) {
  sessions(first: $n, filter: $f, after: $a) { nodes { id } } }"""
LAST_CURSOR = "c2Vzc2lvbnM6OTIyMzM3MjAzNjg1NDc3NTgwNg=="
"""The largest position a cursor may name (2**63 - 2)."""
BAD_INPUT: list[tuple[str, str, dict[str, Any], str | None]] = [
    ("NUL in an id", ONE, {"id": "\u0000"}, "validation_error"),
    ("lone surrogate in an id", ONE, {"id": "\ud800"}, "validation_error"),
    ("an id of 100000 characters", ONE, {"id": "x" * 100_000}, None),
    ("a number for an id", ONE, {"id": 12345}, None),
    ("first 0", PAGE, {"n": 0}, "validation_error"),
    ("first past 1000", PAGE, {"n": 1001}, "validation_error"),
    ("first past 32 bits", PAGE, {"n": 2**70}, "invalid_query"),
    ("NUL in an array id", PAGE, {"n": 1, "f": {"arrayId": "\u0000"}}, "validation_error"),
    ("an array id too long", PAGE, {"n": 1, "f": {"arrayId": "a" * 65}}, "validation_error"),
    ("a lower-case status", PAGE, {"n": 1, "f": {"status": ["pending"]}}, "invalid_query"),
    ("the last cursor", PAGE, {"n": 1000, "a": LAST_CURSOR}, None),
    ("a mutation", "mutation { me { name } }", {}, "invalid_query"),
    ("a subscription", "subscription { me { name } }", {}, "invalid_query"),
]


def test_bad_input_is_a_graphql_error_naming_it_never_a_500(cluster: Cluster) -> None:
    for what, query, variables, code in BAD_INPUT:
        resp = gql(cluster.http, query, **variables)
        assert resp.status_code == 200, (what, resp.text[:300])
        errors = resp.json().get("errors", [])
        assert [e["extensions"]["code"] for e in errors] == ([code] if code else []), (what, errors)
    # What is no GraphQL request at all is a 4xx in the error format of every other route.
    for body, content_type in (
        (b'"a string"', "application/json"),
        (b"\xff\xfe", "application/json"),
        (b"{", "application/json"),
        (b"[]", "application/json"),
        (b"{ me { name } }", "text/plain"),
    ):
        resp = cluster.http.post("/graphql", content=body, headers={"Content-Type": content_type})
        assert resp.status_code == 400, (body, resp.text)
        assert resp.json()["error"]["code"] == "malformed_body"
