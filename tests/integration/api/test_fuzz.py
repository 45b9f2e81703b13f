"""schemathesis over /openapi.json on a real manager: no input gets a 5xx, every 4xx has the error
format.  User routes with a (non-admin) user's key, agent routes with the agent token, and the
admin-only routes a second time with the admin's key (so their validation is fuzzed, not only 403)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tests.support.cluster import Cluster
from tests.support.tenants import add_user_in_own_project

EXAMPLES = 100
ADMIN_EXAMPLES = 30  # their shapes are few and small; the suite's time goes further elsewhere
ADMIN_ROUTES = (
    "/api/v1/cluster-config",
    "/api/v1/retry-policies",
    "/api/v1/projects",
    "/api/v1/audit",
    "/api/v1/users",
    "/api/v1/resource-groups",
)


def error_format(ctx: Any, response: Any, case: Any) -> None:
    """Every 4xx is {"error": {"code", "message", "details"}} (DESIGN §8)."""
    if 400 <= response.status_code < 500:
        body = response.json()
        assert set(body) == {"error"}, body
        assert {"code", "message", "details"} <= set(body["error"]), body


FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))


_PLAIN_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")


def _shortened(wait: Any) -> Any:
    if isinstance(wait, bool) or not isinstance(wait, int | float | str):
        return wait
    if isinstance(wait, str) and not _PLAIN_NUMBER.fullmatch(wait):
        return wait  # e.g. Unicode digits, which float() takes and the API refuses: sent as made
    return 1 if 1 < float(wait) <= 30 else wait


def short_wait(case: Any) -> None:
    """An /events wait in range becomes 1 s: the fuzz finds no new event, so every example waited
    its full wait (up to 30 s: 4 idle minutes per backend).  The wait itself is tested in
    test_retry.py; out-of-range and malformed waits still go as generated."""
    query = case.query if isinstance(case.query, dict) else {}
    if "wait" in query:
        wait = query["wait"]
        query["wait"] = [_shortened(w) for w in wait] if isinstance(wait, list) else _shortened(wait)


def fuzz(op: Any, http: requests.Session, headers: dict[str, str], examples: int = EXAMPLES) -> None:
    cases = st.one_of(op.as_strategy(GenerationMode.POSITIVE), op.as_strategy(GenerationMode.NEGATIVE))

    @seed(20261122)
    @settings(FUZZ, max_examples=examples)
    @given(case=cases)
    def run(case: Any) -> None:
        short_wait(case)
        if op.path.endswith("/stream"):
            opened(case, http, headers)
            return
        case.call_and_validate(
            session=http,
            headers=headers,
            checks=[not_a_server_error],
            additional_checks=[error_format],
            timeout=45,
        )

    run()


def opened(case: Any, http: requests.Session, headers: dict[str, str]) -> None:
    """A stream never ends by itself: its answer is judged by its status and first bytes (an
    event stream, or a 4xx in the error format), then the connection is dropped."""
    kwargs = case.as_transport_kwargs(headers=headers)
    with http.request(**kwargs, stream=True, timeout=30) as resp:
        assert resp.status_code < 500, resp.text[:300]
        if resp.status_code >= 400:
            error_format(None, resp, case)
        else:
            assert resp.headers["content-type"].startswith("text/event-stream"), resp.headers
            assert next(resp.iter_lines()).startswith(b"id: ")  # where it starts, at once


def _operations() -> list[tuple[str, str]]:
    """Every (METHOD, path) of the API, from the app itself (no server needed to collect)."""
    from corral.boot.manager_app import create_app

    paths = create_app().openapi()["paths"]
    methods = {"get", "put", "post", "delete", "patch"}
    return sorted((m.upper(), path) for path, item in paths.items() for m in item if m in methods)


OPERATIONS = _operations()
LISTS = [p for method, p in OPERATIONS if method == "GET" and "{" not in p and not p.endswith("/stream")]


def reads_back(c: Cluster, user_key: str) -> None:
    """Every list route, as the fuzzing user (no 5xx) and as the admin (200)."""
    for key in (user_key, c.key):
        for path in LISTS:
            r = requests.get(
                c.url + path, params={"limit": 1000}, headers={"Authorization": f"Bearer {key}"}, timeout=30
            )
            assert r.status_code < 500 and (key == user_key or r.status_code == 200), (path, r.text[:300])


SHARDS = 3
"""The operations are fuzzed round-robin in this many tests, each on a cluster of its own, so the
suite's workers share them; each ends by checking that its cluster still serves."""


# All shards together: about 3 min of fuzzing on an idle 2-core machine, more on a busy one.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_no_input_gets_a_server_error(own_cluster: Callable[..., Cluster], shard: int) -> None:
    c = own_cluster()
    # No agent runs anything while the fuzz submits arbitrary commands: they stay queued.
    user_key = add_user_in_own_project(c.database_url, "fuzzer", "fuzz", also_default=True)
    schema = schemathesis.openapi.from_url(f"{c.url}/openapi.json", config=schemathesis.Config())
    operations = [result.ok() for result in schema.get_all_operations()]
    # The served API is the one the shards were cut from: no operation escapes the fuzz.
    assert sorted((op.method.upper(), op.path) for op in operations) == OPERATIONS
    mine = set(OPERATIONS[shard::SHARDS])
    assert len(OPERATIONS) >= 12 and mine
    http = requests.Session()
    for op in operations:
        if (op.method.upper(), op.path) not in mine:
            continue
        key = c.token if op.path.startswith("/api/v1/agent/") else user_key
        fuzz(op, http, {"Authorization": f"Bearer {key}"})
        if op.path.startswith(ADMIN_ROUTES):
            fuzz(op, http, {"Authorization": f"Bearer {c.key}"}, ADMIN_EXAMPLES)
    # And after all of it, the cluster still serves: everything this shard stored reads back
    # through every list, and a real session runs end to end.
    reads_back(c, user_key)
    c.start_agent("after", resource_group="after-the-fuzz")
    s = c.submit(command=["sh", "-c", "echo after-the-fuzz"], resource_group="after-the-fuzz")
    assert c.wait(s["id"], timeout=60)["result"] == "success"
