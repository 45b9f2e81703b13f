"""/graphql under fuzzing on a real manager: schemathesis' GraphQL support generates queries of
every root field from the schema the endpoint itself describes (introspection), as a user and as
the admin; hypothesis sends what no client library would (arbitrary bodies, variables, query text,
methods, content types).  No input gets a 5xx or a traceback; a 4xx has Corral's error format and
a 200 is a GraphQL answer."""

from __future__ import annotations

import json
from typing import Any

import hypothesis.strategies as st
import requests
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from schemathesis import GenerationMode

from tests.integration.api.test_fuzz import error_format
from tests.support.cluster import Cluster
from tests.support.tenants import add_user_in_own_project

FUZZ = settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))
ROOT_FIELDS = {"sessions", "session", "agents", "me"}


def graphql_answer(resp: requests.Response) -> None:
    """The status and body a client can rely on, whatever it sent."""
    assert resp.status_code < 500, resp.text[:300]
    assert "Traceback" not in resp.text and 'File "' not in resp.text, resp.text[:300]
    if resp.status_code >= 400:
        error_format(None, resp, None)
        return
    body = resp.json()
    assert isinstance(body, dict) and set(body) <= {"data", "errors", "extensions"}, body
    for e in body.get("errors") or []:
        assert e["extensions"]["code"] != "internal", e


def _sessions(c: Cluster, key: str) -> None:
    """Something for the queries to find: the fuzzing user's session and the admin's."""
    for k, project in ((key, "fuzz"), (c.key, "default")):
        made = requests.post(
            c.url + "/api/v1/sessions",
            json={"command": ["true"], "project": project, "cluster_size": 2},
            headers={"Authorization": f"Bearer {k}"},
            timeout=30,
        )
        assert made.status_code == 201, made.text


def fuzz(op: Any, http: requests.Session, headers: dict[str, str]) -> None:
    cases = st.one_of(op.as_strategy(GenerationMode.POSITIVE), op.as_strategy(GenerationMode.NEGATIVE))

    @seed(20261203)
    @settings(FUZZ)
    @given(case=cases)
    def run(case: Any) -> None:
        # Not schemathesis' own not_a_server_error: for GraphQL it takes every error of a resolver
        # for the server's, a refused argument (`first: 0`) included.  A server error here is a
        # 5xx, or an error whose code is `internal`.
        graphql_answer(case.call(session=http, headers=headers, timeout=45))

    run()


def test_generated_queries_of_every_root_field_get_no_server_error(cluster: Cluster) -> None:
    key = add_user_in_own_project(cluster.database_url, "graphql-fuzzer", "fuzz")
    _sessions(cluster, key)
    auth = {"Authorization": f"Bearer {cluster.key}"}
    schema = schemathesis.graphql.from_url(cluster.url + "/graphql", headers=auth, timeout=30)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label.split(".")[-1] for op in operations} == ROOT_FIELDS, [op.label for op in operations]
    http = requests.Session()
    for op in operations:
        for who in (key, cluster.key):
            fuzz(op, http, {"Authorization": f"Bearer {who}"})


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
QUERY_WORDS = st.sampled_from(
    [
        "{",
        "}",
        "(",
        ")",
        ":",
        "$",
        "!",
        "...",
        "@include(if: true)",
        "query",
        "mutation",
        "subscription",
        "fragment F on Session",
        "...F",
        "on",
        "sessions",
        "session",
        "agents",
        "me",
        "nodes",
        "edges",
        "node",
        "id",
        "status",
        "kernels",
        "attempts",
        "parentSession",
        "history",
        "rootCause",
        "retryChain",
        "pageInfo",
        "first:",
        "after:",
        "filter:",
        "id:",
        "$n",
        "Int",
        "ID!",
        "1000",
        "-1",
        "99999999999999999999",
        '"x"',
        '"\\u0000"',
        '"\\ud800"',
        "[ERROR]",
        "{status: [PENDING]}",
        "__schema",
        "__typename",
        "types",
        "fields",
        "name",
    ]
)
QUERIES = st.one_of(
    st.lists(QUERY_WORDS, max_size=40).map(" ".join),
    st.text(max_size=200),
)
BODIES = st.one_of(
    st.fixed_dictionaries(
        {"query": QUERIES},
        optional={
            "variables": JSONISH | st.dictionaries(st.sampled_from(["n", "id", "after", "f"]), JSONISH),
            "operationName": JSONISH,
        },
    ).map(json.dumps),
    JSONISH.map(json.dumps),
    st.binary(max_size=200),
)


def test_arbitrary_requests_get_an_answer_never_a_server_error(cluster: Cluster) -> None:
    http = requests.Session()
    auth = {"Authorization": f"Bearer {cluster.key}"}

    @seed(20261204)
    @settings(FUZZ, max_examples=300)
    @given(
        body=BODIES,
        content_type=st.sampled_from(
            ["application/json", "application/graphql", "text/plain", "multipart/form-data"]
        ),
    )
    def post(body: str | bytes, content_type: str) -> None:
        data = body.encode() if isinstance(body, str) else body
        resp = http.post(
            cluster.url + "/graphql", data=data, headers={**auth, "Content-Type": content_type}, timeout=45
        )
        graphql_answer(resp)

    @seed(20261205)
    @settings(FUZZ, max_examples=100)
    @given(query=QUERIES, variables=JSONISH.map(json.dumps), method=st.sampled_from(["GET", "PUT", "DELETE"]))
    def other(query: str, variables: str, method: str) -> None:
        params = {"query": query, "variables": variables}
        resp = http.request(method, cluster.url + "/graphql", params=params, headers=auth, timeout=45)
        graphql_answer(resp)

    post()
    other()
    # After all of it, the endpoint still answers.
    resp = http.post(cluster.url + "/graphql", json={"query": "{ me { name } }"}, headers=auth, timeout=30)
    assert resp.json() == {"data": {"me": {"name": "admin"}}}
